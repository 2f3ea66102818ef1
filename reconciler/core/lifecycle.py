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

The plan speaks this table's language: each of its action kinds is the event it records (`ACTIONS`),
and what the runtime answers a start is the event that follows it (`AFTER_START`), so the executor
never chooses an event of its own.

No event leads to `exited`: an ended job stays `running` until a pass settles it (`done`). The value
is `res status`'s word for such a job once its exit record is there (ops/status.py shows it, never
records it); a record of an older state.db that holds it is read as the live job it is, and settled,
stopped, claimed or handed over like a running one.
"""
from __future__ import annotations

from reconciler.core.errors import NeedsPerson
from reconciler.core.models import Action, ActionKind, JobRecord, Phase, Request, copy

Q, S, R, D = Phase.queued, Phase.starting, Phase.running, Phase.done
X = Phase.exited  # no event's target (see above): only a phase events leave, for old records
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
    "retry": {p: Q for p in _LIVE},  # killed at its limit (auto-sized) or stopped by the ladder: same id, again
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


# ---------------------------------------------------------------- the plan's actions, as events

# Each action kind of a plan: the event it records on its job's record, or None for a kind that
# records none (it edits the queue file, the user's side or the history, or changes nothing).
# `recover` records one of two, by its detail's code; a `start`'s second event is the runtime's answer
# (`AFTER_START`).
RECOVER = {"unit": "recover_unit", "lost": "recover_lost"}  # its unit is there / only its log is
ACTIONS: dict[ActionKind, str | dict[str, str] | None] = {
    "enqueue": "enqueue",
    "wait": None,  # stays queued: its position and ETA are published with the pass
    "start": "start",
    "grant": "grant",
    "refuse": "refuse",
    "running": "unit_seen",
    "stop": "stop",
    "evict": "stop",  # the ladder's stop: recorded as a stop with the code `evicted` (core/ladder.py)
    "settle": "settle",
    "reattach": "claim",
    "requeue": "requeue",
    "retry": "retry",
    "expire": "expire",
    "cancel": "cancel",
    "retire": None,  # queue.toml: the finished entry leaves it
    "prune": None,  # the record moves into the history
    "set": None,  # the user's side: a unit's properties
    "adopt": None,  # the user's side: a session moved into a scope
    "end_game": None,  # game.toml
    "restore": None,  # queue.toml: the entry is written back
    "recover": RECOVER,
    "hold": None,  # shown, never started
}

# A start asks the runtime once `starting` is on record; its answer is the event that follows.
AFTER_START: dict[str, str | None] = {
    "started": "started",  # the runtime's start job finished: the command was executed
    "not_started": "requeue",  # certainly nothing started (the runtime said so): back in the queue at once
    "unknown": None,  # no answer: it stays `starting`; the next pass sees the unit, or requeues after the lease
    "busy": "refuse",  # asked for now, and the cluster cannot start it now
    "failed": "start_failed",  # the runtime refused the start, or it failed under it: settled, with why
}


def event_of(action: Action) -> str | None:
    """The lifecycle event `action` records (None: it records none)."""
    event = ACTIONS[action.kind]
    if isinstance(event, dict):
        return event[(action.detail or {}).get("code")]
    return event


def planned(rec: JobRecord | None, action: Action, now: float, **facts) -> JobRecord:
    """The record after the event `action` records (`transition` with the plan's own word)."""
    event = event_of(action)
    if event is None:
        raise IllegalTransition(rec.phase if rec is not None else None, action.kind)
    return transition(rec, event, now, **facts)


def after_start(starting: JobRecord, answer: str, now: float, **facts) -> JobRecord | None:
    """The record after the runtime's `answer` to a start (AFTER_START); None: it stays `starting`."""
    event = AFTER_START[answer]
    return transition(starting, event, now, **facts) if event is not None else None


# ---------------------------------------------------------------- transitions


class IllegalTransition(NeedsPerson, ValueError):
    """An event the table does not allow from the record's phase: a bug, never retried in a loop."""

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
        if event == "expire" and isinstance(f["detail"], dict) and f["detail"].get("peak_gb") is not None:
            out["peak_gb"] = f["detail"]["peak_gb"]  # a booking in place: the most its command used
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
        out = {"request": f["request"], "started": None, "lease_until": None, "attached_by": None, "invocation": None,
               "peak_gb": f["peak_gb"], "detail": f["detail"], "log_offset": 0, "stop_reason": None, "stop_code": None}
        if f.get("eviction") is not None:  # stopped by the ladder: kept, for its book and the views' marks
            out["evictions"] = [*rec.evictions, f["eviction"]]
        return out
    if event == "cancel":
        return {"why": "released before it started", "detail": {"code": "cancelled"}, "ended": now}
    if event == "recover_unit":
        return {"attempt": 1, "started": now, "unit": f["unit"]}
    if event == "recover_lost":
        return {"attempt": 1, "ended": now, "why": f["why"], "detail": f["detail"]}
    if event == "stop":
        out = {"stop_reason": f["reason"], "stop_code": f["code"]}
        if f.get("detail") is not None:  # the ladder's figures (what it used, what it booked)
            out["detail"] = f["detail"]
        return out
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
