"""The job lifecycle (DESIGN §5.3): every change of a job record, in one table. Pure.

`transition(record, event, now, **facts) -> record` is the one place a record changes: the executor,
the streamer, the loop's hand-over and `res release` persist what it returns (a compare-and-set on
the phase the record had) and call the runtime; none of them builds a record itself. An event not
allowed from the record's phase raises `IllegalTransition`, so a wrong turn is a loud bug, never a
silently rewritten record. In the spirit of h11's `_state.py`: the table says which phase an event
leads to from which; `_changes` says what else it writes.

    queued ──start──► starting ──started / unit_seen──► running ──settle──► done
      │  ▲               │ └──start_failed──► done          │ └──expire (a note)──► done
      │  ├───requeue─────┘                                  ├─ stop, claim, hand_over, stream,
      │  └───retry (auto-sized, killed at its limit: once, bigger)◄─┘
      ├──cancel──► cancelled                                   read_failed, attach_failed, release
      └──refuse──► refused     (none) ──enqueue / grant / refuse / start / recover_*──► …
"""
from __future__ import annotations

from reconciler.core.models import JobRecord, Phase, Request, copy

Q, S, R, X, D = Phase.queued, Phase.starting, Phase.running, Phase.exited, Phase.done
_LIVE = (S, R, X)
SAME = "same"  # the event keeps the phase

# event -> {phase before (None: no record yet): phase after}
TABLE: dict[str, dict[Phase | None, Phase | str]] = {
    "enqueue": {None: Q},
    "grant": {None: R, Q: R},  # a note: granted, it holds its memory at once
    "refuse": {None: Phase.refused, Q: Phase.refused, S: Phase.refused},  # from S: the cluster cannot start it now
    "start": {None: S, Q: S},  # `starting`, with a lease, is written before the runtime is asked
    "started": {S: R},  # the runtime's start job finished: the command was executed
    "unit_seen": {S: R},  # a pass saw the unit of a `starting` record alive (its starter died)
    "start_failed": {S: D},
    "requeue": {S: Q},  # the unit never appeared and its starter is gone: same id, no retry spent
    "retry": {p: Q for p in _LIVE},  # auto-sized, killed at its memory limit: same id, once, bigger
    "cancel": {Q: Phase.cancelled},
    "expire": {R: D},  # a note's time is up, its owner is gone, or it was released
    "recover_unit": {None: R},  # state.db lost it, its unit is there: taken back
    "recover_lost": {None: D},  # state.db lost it, only its log is left: it ran, never again
    "stop": {p: SAME for p in _LIVE},  # the reason goes on record before the runtime is asked to stop
    "settle": {p: D for p in _LIVE},
    "claim": {p: SAME for p in _LIVE},
    "hand_over": {R: SAME, X: SAME},
    "stream": {R: SAME},  # log read to a new offset, digest with it, the lease renewed
    "read_failed": {p: SAME for p in _LIVE},  # the last read allowed failed: counted, the hold kept
    "attach_failed": {p: SAME for p in _LIVE},  # counted, and the hold given up for another to try
    "release": {Q: SAME, S: SAME, R: SAME, X: SAME},  # `res release`: the user's word, on record
}


class IllegalTransition(ValueError):
    def __init__(self, phase: Phase | None, event: str):
        super().__init__(f"{event} is not allowed from {phase.value if phase else 'no record'}")
        self.phase, self.event = phase, event


def allowed(phase: Phase | None, event: str) -> bool:
    return phase in TABLE.get(event, {})


def transition(rec: JobRecord | None, event: str, now: float, **facts) -> JobRecord:
    """The record after `event`. Facts by event: enqueue/grant/refuse/start/recover_*: `request`
    (when there is no record yet); refuse, expire, start_failed, recover_lost: `why`, `detail`;
    start: `unit`, `holder`, `lease_s`, `where`, `log_dir`; started: `invocation`; recover_unit: `unit`; stop:
    `reason`, `code`; retry: `request` (resized), `peak_gb`, `detail`; settle: `rc`, `peak_gb`, `cpu_s`, `why`, `detail`, `at`; claim: `holder`, `lease_s`;
    stream: `read` (the record with the new offset and digest), `lease_s` (None: not renewed);
    read_failed / attach_failed: `error`."""
    phase = rec.phase if rec is not None else None
    after = TABLE.get(event, {}).get(phase)
    if after is None:
        raise IllegalTransition(phase, event)
    if rec is None:
        req: Request = facts["request"]
        rec = JobRecord(request=req, phase=Q)  # a base to change; its phase is set below
    changes = _changes(rec, event, now, facts)
    changes["phase"] = rec.phase if after == SAME else after
    changes["updated"] = now
    return copy(rec, **changes)


def _changes(rec: JobRecord, event: str, now: float, f: dict) -> dict:
    if event == "enqueue":
        return {}
    if event == "grant":
        return {"started": now}
    if event in ("refuse", "expire", "start_failed"):
        out = {"why": f["why"], "detail": f["detail"], "ended": now}
        if rec.phase == S:  # refused by the cluster, or a start that failed: nobody holds it
            out.update(attached_by=None, lease_until=None)
        return out
    if event == "start":
        return {"attempt": rec.attempt + 1, "started": now, "unit": f["unit"], "attached_by": f["holder"],
                "lease_until": now + f["lease_s"], "where": f.get("where", "local"),
                "log_dir": f.get("log_dir")}
    if event == "started":
        return {"invocation": f["invocation"]}
    if event == "unit_seen":
        return {}
    if event == "requeue":
        # This attempt never ran and is not counted: the next start is the same attempt again.
        return {"started": None, "lease_until": None, "attached_by": None, "attempt": max(rec.attempt - 1, 0),
                "log_dir": None}  # where the next start puts its log is decided then
    if event == "retry":
        # The killed run is over; the next start is a new attempt (its own unit run, its own exit
        # record) of the same request, made bigger (`request`), its output appended to the same log.
        return {"request": f["request"], "started": None, "lease_until": None, "attached_by": None, "invocation": None,
                "peak_gb": f["peak_gb"], "detail": f["detail"], "log_offset": 0}
    if event == "cancel":
        return {"why": "released before it started", "detail": {"code": "cancelled"}, "ended": now}
    if event == "recover_unit":
        return {"attempt": 1, "started": now, "unit": f["unit"]}
    if event == "recover_lost":
        return {"attempt": 1, "ended": now, "why": f["why"], "detail": f["detail"]}
    if event == "stop":
        return {"stop_reason": f["reason"], "stop_code": f["code"]}
    if event == "settle":
        return {"rc": f["rc"], "peak_gb": f["peak_gb"], "cpu_s": f.get("cpu_s"), "why": f["why"], "detail": f["detail"],
                "ended": f["at"] or now, "attached_by": None, "lease_until": None}
    if event == "claim":
        return {"attached_by": f["holder"], "lease_until": now + f["lease_s"]}
    if event == "hand_over":
        return {"attached_by": None, "lease_until": None}
    if event == "stream":
        read: JobRecord = f["read"]
        out = {"log_offset": read.log_offset, "digest": read.digest, "attach_failures": 0}
        if f.get("lease_s") is not None:
            out["lease_until"] = now + f["lease_s"]
        return out
    if event == "read_failed":
        return {"attach_failures": rec.attach_failures + 1, "last_error": f["error"]}
    if event == "attach_failed":
        return {"attach_failures": rec.attach_failures + 1, "last_error": f["error"],
                "attached_by": None, "lease_until": None}
    if event == "release":
        return {"released": True}
    raise IllegalTransition(rec.phase, event)
