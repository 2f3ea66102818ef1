"""Admission (DESIGN §5.2), pure: which desired entries not yet decided start, are granted, wait in
the queue, are held or are refused this pass, in queue order: FIFO with EASY backfill, locks, the
per-pass start cap, never-fit, the session caps and the day's spend, the cluster's share. Its own
module beside core/plan.py's lifecycle of what already ran: plan() calls admit() once capacity is
known, and the executor and ops/requests ask its single rules (too_late, caller_gone, first_asked,
taken_request_ids) at the moment they act.
"""
from __future__ import annotations

from reconciler.core.capacity import (Capacity, QueueForecast, busy_detail, daily_detail, holder_of, lock_detail,
                                      never_detail, sessions_detail, short_of)
from reconciler.core.models import ALIVE, LIVE, Action, Desired, JobRecord, Phase, Request, World
from reconciler.core.rules import Rules
from reconciler.core.quantities import UTC, Zone, local_midnight


def spent_today(records: dict[str, JobRecord], now: float, zone: Zone = UTC) -> float:
    """Settled spend of sessions that ended today (in `zone`) plus what running ones have spent so far."""
    midnight = local_midnight(now, zone)
    return sum(r.spend_usd for r in records.values()
               if r.phase in LIVE or (r.phase == Phase.done and (r.ended or 0) >= midnight))


def _session_block(req: Request, cap: Capacity, policy: Rules, spent: float, pricing_error: str | None) -> tuple[dict, bool] | None:
    """Why an agent session may not start now (a structured reason), and whether that can never
    change by waiting."""
    if pricing_error:
        return {"code": "pricing", "resource": "pricing", "error": pricing_error}, True
    running = [h for h in cap.holders if h.session]
    if len(running) >= policy.max_concurrent_sessions:
        return sessions_detail(running, policy.max_concurrent_sessions), False
    if policy.daily_cost_usd and spent >= policy.daily_cost_usd:
        return daily_detail(spent, policy.daily_cost_usd), False
    return None


def _refuse(req: Request, detail: dict, never: bool = False) -> Action:
    return Action(kind="refuse", id=req.id, never=never, detail=detail, **entry_tag(req))


def admit(desired: Desired, records: dict[str, JobRecord], cap: Capacity, now: float, policy: Rules,
           spent: float = 0.0, pricing_error: str | None = None, world: World | None = None) -> list[Action]:
    """Every desired entry not yet decided, in queue order: taken back, held, refused, started,
    granted or left waiting (DESIGN §5.2)."""
    adm = _Admission(cap, now, policy, spent, pricing_error)
    ran_before = set(world.ran_before) if world is not None else set()
    hand_added, unchecked = set(desired.hand_added), set(desired.unchecked)
    taken = taken_request_ids(records)  # a request id whose job ran or waits: asked again, never again
    for req in queue_order(desired.requests, records):
        rec = records.get(req.id)
        if rec is not None and rec.phase != Phase.queued:
            continue
        mark = len(adm.acts)
        if rec is None and req.id in ran_before:  # (recovering starts nothing, whoever wrote the entry)
            adm.recover(req, world)
        elif rec is None and req.id in hand_added:
            adm.acts.append(Action(kind="hold", id=req.id, detail={"code": "hand_added"}, **entry_tag(req)))
        elif rec is None and req.id in unchecked:
            adm.acts.append(Action(kind="hold", id=req.id, detail={"code": "unchecked"}, **entry_tag(req)))
        elif (late := too_late(req, rec is not None, now)) is not None:
            adm.acts.append(_refuse(req, late))
        elif rec is None and req.request_id is not None and taken.get(req.request_id, req.id) != req.id:
            adm.acts.append(_refuse(req, {"code": "same_request", "request_id": req.request_id,
                                          "as": taken[req.request_id]}))
        elif (where := _where(req, cap, policy, world, adm)) != "local":
            adm.cluster(req, rec, world, overflow=where == "overflow")
        elif cap.never_fits(req):
            adm.acts.append(_refuse(req, never_detail(req, cap), never=True))
        elif not req.queue:  # (a queued note: the gate's booking in place, waiting its turn like a job)
            adm.now_or_never(req)
        else:
            adm.queued(req, rec)
        if req.request_id is not None and rec is None:
            # Once admitted (started, granted, queued) it holds its request id against a second
            # entry of the same id later in this very pass (two processes that wrote one each).
            if any(a.id == req.id and a.kind in ("start", "grant", "enqueue") for a in adm.acts[mark:]):
                taken.setdefault(req.request_id, req.id)
    return adm.acts


def caller_gone(req: Request, now: float) -> bool:
    """A request asked for now (no --queue) whose caller stopped waiting before any pass decided it:
    never started (issue 40: a request is answered or never run). A --queue request waits whoever
    waits for it: its caller was told so (its answer, or the line it gave up with)."""
    return req.answer_by is not None and not req.queue and now >= req.answer_by


def start_missed(req: Request, now: float) -> bool:
    """A request asked with --start-within that has not started by its start_by: never started (its
    caller gave up on it then and was told it never starts)."""
    return req.start_by is not None and now >= req.start_by


def too_late(req: Request, recorded: bool, now: float) -> dict | None:
    """Why a request not yet started may no longer start (the refusal's detail), or None: its caller
    stopped waiting before any pass decided it (caller_gone: asked for now, not yet recorded), or its
    --start-within ran out (start_missed). The planner's rule, and the executor's at the moment it
    would start one (a plan made just before)."""
    if not recorded and caller_gone(req, now):
        return {"code": "caller_gone", "answer_by": req.answer_by}
    if start_missed(req, now):
        return {"code": "start_missed", "start_by": req.start_by}
    return None


def taken_request_ids(records: dict[str, JobRecord]) -> dict[str, str]:
    """Request id -> the entry holding it: one whose job waits in the queue, runs, or ran. A request
    refused, cancelled or never started holds nothing: asking again is a new attempt, still one job."""
    out: dict[str, str] = {}
    for rec in records.values():
        rid = rec.request.request_id
        if rid is None:
            continue
        if rec.phase in (Phase.queued, Phase.starting, Phase.running, Phase.exited) or \
                (rec.phase == Phase.done and rec.started is not None):
            out.setdefault(rid, rec.id)
    return out


def queue_order(requests: list[Request], records: dict[str, JobRecord]) -> list[Request]:
    """The queue in the order admission takes it: the file's, except that a job the ladder stopped
    (DESIGN §5.1) is back at the head, ahead of everything asked after it was first started, and an
    ask refused for want of room and asked again keeps the place of its first ask (`first_asked`)."""
    first = [r for r in requests if (rec := records.get(r.id)) is not None and rec.evictions and rec.phase == Phase.queued]
    ids = {r.id for r in first}
    rest = [r for r in requests if r.id not in ids]
    if any(r.since is not None for r in rest):
        rest.sort(key=lambda r: (r.since if r.since is not None else r.created, r.number))
    return first + rest


KEEP_PLACE_S = 60.0  # an ask refused unstarted and asked again this soon keeps its place


def first_asked(owner_pid: int | None, by: str | None, project: str, cmd: list[str], records: dict[str, JobRecord],
                now: float) -> float | None:
    """When the same agent first asked for the same command in the same project, where an ask of it
    waits unstarted or was refused or withdrawn unstarted within KEEP_PLACE_S (the gate's wait ran
    out: the agent was told busy, did other work, and asks again): the new ask keeps that place in
    the queue (Request.since), so that an agent refused once is not sent to the back each time it
    asks (Gemini CLI ends a session refused five times running). The same agent: the same CLI process
    (`owner_pid`, a booking in place's) or the same asker (`by`, a rewritten job's: "claude pid 4121
    session 3f2a…"). None: no such ask."""
    if not (owner_pid or by) or not cmd:
        return None
    found: float | None = None
    for rec in records.values():
        req = rec.request
        same = (owner_pid and req.owner_pid == owner_pid) or (by and req.by == by)
        if rec.started is not None or not same or req.project != project or list(req.cmd) != list(cmd):
            continue
        if rec.phase in (Phase.refused, Phase.cancelled):
            if rec.ended is None or now - rec.ended > KEEP_PLACE_S:
                continue
        elif rec.phase != Phase.queued:
            continue
        asked = req.since if req.since is not None else req.created
        found = asked if found is None else min(found, asked)
    return found


def _where(req: Request, cap: Capacity, policy: Rules, world: World | None, adm: _Admission) -> str:
    """`local`, `cluster` (asked for with --on cluster) or `overflow` (asked for here, does not fit
    here now, or only behind a waiting queue head, and the policy sends such requests to the
    cluster, which answers: DESIGN §6b)."""
    if req.kind != "job" or req.on == "local":
        return "local"
    if req.on == "cluster":
        return "cluster"
    if policy.overflow != "cluster" or world is None or world.cluster_ok is not True:
        return "local"
    if cap.never_fits(req) or not cap.fits(req) or (req.queue and adm.waits_behind_head(req)):
        return "overflow"
    return "local"


class _Admission:
    """The state one pass's admission carries from entry to entry."""

    def __init__(self, cap: Capacity, now: float, policy: Rules, spent: float, pricing_error: str | None):
        self.cap, self.now, self.policy, self.spent, self.pricing_error = cap, now, policy, spent, pricing_error
        self.acts: list[Action] = []
        self.locks = {h.lock: h for h in cap.holders if h.lock}  # lock -> its running holder
        self.queued_locks: dict[str, str] = {}  # lock -> the first waiting entry that will take it
        self.starts = 0
        self.head: Request | None = None  # the first queued entry that waits for memory or cpus
        self.forecast: QueueForecast | None = None  # made once the first entry waits
        # The head's reservation (EASY backfill, DESIGN §5.2): when it is expected to start (None:
        # nobody can tell, so nothing may jump it), and what it leaves spare of the then free.
        self.shadow: float | None = None
        self.spare_gb = self.spare_cpus = 0.0
        self.position = 0  # of a queued entry among those that stay queued
        self.session_waits = False  # a queued session waits for the session caps: later sessions wait behind it

    def recover(self, req: Request, world: World) -> None:
        """state.db does not know it, but its log (and maybe its unit) does: it ran before (state.db
        was lost or replaced). Taken back as what it is, never started a second time."""
        obs = world.jobs.get(req.id)
        there = obs is not None and (obs.state in ALIVE or obs.exit is not None)
        self.acts.append(Action(kind="recover", id=req.id, detail={"code": "unit" if there else "lost"}, **entry_tag(req)))
        if there:
            self.cap.take(req, _new_holder(req, self.now))

    def _blocked(self, req: Request) -> tuple[dict, bool] | None:
        return _session_block(req, self.cap, self.policy, self.spent, self.pricing_error) if req.session else None

    def backfill(self, req: Request) -> dict | None:
        """Why `req` may start now ahead of the waiting head without delaying it (EASY backfill, as
        Slurm's backfill scheduler does it), or None: it fits now, and by its own --for estimate it
        ends before the head's expected start, or it fits in what the head leaves spare once started.
        The head's start is an estimate from the holders' --for: it is never delayed beyond their
        errors, and nothing starves (only the head is protected, and it moves on)."""
        if self.head is None or self.shadow is None or not self.cap.fits(req):
            return None
        ends = self.now + req.est_s
        beside = ends > self.shadow
        if beside and (req.book > self.spare_gb + 1e-9 or req.cpus > self.spare_cpus + 1e-9):
            return None
        why = {"code": "backfill", "head": self.head.id, "head_start": self.shadow, "ends": ends,
               "free_gb": self.cap.mem_gb, "beside": beside}
        return {**why, "spare_gb": self.spare_gb, "spare_cpus": self.spare_cpus} if beside else why

    def waits_behind_head(self, req: Request) -> bool:
        return self.head is not None and self.backfill(req) is None

    def start(self, req: Request, head: bool, backfill: dict | None = None) -> None:
        cap = self.cap
        detail = backfill or {"code": "fits", "head": head, "free_gb": cap.mem_gb}
        if req.book < req.mem_gb:  # where its book came from (DESIGN §5.1), for the plan's reader
            detail = {**detail, "booked_from": req.booked_from}
        kind = "grant" if req.kind == "note" else "start"
        self.acts.append(Action(kind=kind, id=req.id, detail=detail, **entry_tag(req)))
        cap.take(req, _new_holder(req, self.now))
        if kind == "start":
            self.starts += 1
        if req.lock:
            self.locks[req.lock] = cap.holders[-1]
        if backfill is not None and backfill["beside"]:
            self.spare_gb -= req.book
            self.spare_cpus -= req.cpus
        if self.forecast is None:
            return
        if backfill is not None and not backfill["beside"]:
            self.forecast.ended_before(req.est_s, req.lock)  # over before the point the forecast reached
        else:
            self.forecast.started(req.book, req.cpus, req.est_s, req.lock)

    def cluster(self, req: Request, rec: JobRecord | None, world: World | None, overflow: bool) -> None:
        """A job for the cluster: res's own guardrails (session caps, daily spend, locks, the
        per-pass start cap) decide whether it is submitted; Slurm decides when it runs. While the
        cluster does not answer it waits in the queue file, --queue or not: nothing is lost, and it
        is submitted once the cluster answers."""
        if world is None or world.cluster_ok is not True:
            self.position += 1
            self.acts.append(_wait(req, rec, {"code": "queued", "position": self.position, "est_start": None,
                                              "waits_for": "cluster",
                                              "error": world.cluster_error if world is not None else None}))
            return
        blocked, holder = self._blocked(req), (self.locks.get(req.lock) if req.lock else None)
        if blocked is not None or holder is not None or self.starts >= self.policy.max_starts_per_tick:
            if not req.queue:
                if blocked is not None:
                    self.acts.append(_refuse(req, blocked[0], never=blocked[1]))
                elif holder is not None:
                    self.acts.append(_refuse(req, lock_detail(req.lock or "", holder, req.force)))
                return  # (over this pass's start cap: decided next pass)
            self.position += 1
            waits = (blocked[0]["resource"] if blocked else "lock" if holder is not None else "starts_per_pass")
            detail = {"code": "queued", "position": self.position, "est_start": None, "waits_for": waits}
            if holder is not None and blocked is None:
                detail.update(lock=req.lock, lock_holder=holder.id)
            if blocked is not None:
                detail["block"] = blocked[0]
            self.acts.append(_wait(req, rec, detail))
            return
        self.acts.append(Action(kind="start", id=req.id, where="cluster", detail={
            "code": "submit", "where": "cluster", "overflow": overflow, "queue": req.queue, "est_s": req.est_s}, **entry_tag(req)))
        self.cap.holders.append(_new_holder(req, self.now, remote=True))
        self.starts += 1
        if req.lock:
            self.locks[req.lock] = self.cap.holders[-1]

    def now_or_never(self, req: Request) -> None:
        """A note, or a job asked for without --queue: it starts (is granted) now or is refused."""
        cap, blocked = self.cap, self._blocked(req)
        holder = self.locks.get(req.lock) if req.lock else None
        behind = self.head is not None and not req.force  # --force ignores the head's claim
        jump = self.backfill(req) if behind else None
        if blocked is not None:
            detail, final = blocked
            self.acts.append(_refuse(req, detail, never=final))
        elif holder is not None:
            self.acts.append(_refuse(req, lock_detail(req.lock or "", holder, req.force)))
        elif behind and jump is None:
            self.acts.append(_refuse(req, busy_detail(req, cap, self.now, head=self.head)))
        elif not cap.fits(req):
            self.acts.append(_refuse(req, busy_detail(req, cap, self.now)))
        elif req.kind == "note" or self.starts < self.policy.max_starts_per_tick:
            self.start(req, False, jump)
        # else: over this pass's start cap; decided next pass

    def queued(self, req: Request, rec: JobRecord | None) -> None:
        """--queue: FIFO; a later entry starts before a waiting head only by backfill (it does not
        delay the head); a held lock skips the entry."""
        cap, lock = self.cap, req.lock
        holder = self.locks.get(lock) if lock else None
        self.position += 1
        if holder is not None or (lock and lock in self.queued_locks):
            # Skipped, not blocking: it waits for its lock (held now, or taken by an earlier waiting
            # entry), and starts once its holders are expected to end.
            self.forecast = self.forecast or QueueForecast(cap, self.now)
            est = self.forecast.start_of(req.book, req.cpus, req.est_s, lock=req.lock)
            lock_holder = holder.id if holder is not None else self.queued_locks[req.lock]
            self.acts.append(_wait(req, rec, {"code": "queued", "position": self.position, "est_start": est,
                                              "waits_for": "lock", "lock": req.lock, "lock_holder": lock_holder}))
            return
        session = req.session
        blocked = self._blocked(req) if session else None
        if session and (blocked is not None or self.session_waits):
            # Sessions wait for the session caps in FIFO order among themselves; other jobs go on.
            self.session_waits = True
            self.acts.append(_wait(req, rec, {"code": "queued", "position": self.position, "est_start": None,
                                              "waits_for": blocked[0]["resource"] if blocked else "sessions",
                                              "block": blocked[0] if blocked else None}))
            return
        if self.starts < self.policy.max_starts_per_tick:
            if self.head is None and cap.fits(req):
                self.start(req, self.position == 1)
                self.position -= 1  # it did not stay queued
                return
            if (jump := self.backfill(req)) is not None:
                self.start(req, False, jump)
                self.position -= 1
                return
        if self.head is None:
            self.head = req
            self.forecast = self.forecast or QueueForecast(cap, self.now)
        est = self.forecast.start_of(req.book, req.cpus, req.est_s, lock)
        if self.head is req:
            self.shadow, self.spare_gb, self.spare_cpus = est, self.forecast.free_gb, self.forecast.free_cpus
        if lock:
            self.queued_locks.setdefault(lock, req.id)
        if self.head is req:
            waits = "+".join(short_of(cap, req.book, req.cpus)) or "starts_per_pass"
            detail = {"code": "queued", "position": self.position, "est_start": est, "waits_for": waits}
            if cap.pressure is not None:  # how much, where, against what (the words: render.reasons.queued_line)
                detail["pressure"] = cap.pressure
            if cap.guard is not None:
                detail["guard"] = cap.guard
        else:
            detail = {"code": "queued", "position": self.position, "est_start": est, "waits_for": "queue_head",
                      "head": self.head.id}
        self.acts.append(_wait(req, rec, detail))


def entry_tag(req: Request) -> dict:
    """What an action shows of the entry it is about: its size, and its book where that is less."""
    book = req.book
    return {"title": req.title, "mem_gb": req.mem_gb, "cpus": req.cpus, "book_gb": book if book < req.mem_gb else None}


def _wait(req: Request, rec: JobRecord | None, detail: dict) -> Action:
    # Positional: one of these per waiting entry, thousands a pass.
    book = req.book
    if book < req.mem_gb:  # booked below its cap now (its record may say what it was booked at when asked)
        detail = {**detail, "book_gb": book, "booked_from": req.booked_from}
        return Action("enqueue" if rec is None else "wait", req.id, "", req.title, req.mem_gb, req.cpus,
                      detail=detail, book_gb=book)
    return Action("enqueue" if rec is None else "wait", req.id, "", req.title, req.mem_gb, req.cpus, detail=detail)


def _new_holder(req: Request, now: float, remote: bool = False):
    rec = JobRecord(request=req, phase=Phase.starting, started=now, where="cluster" if remote else "local")
    return holder_of(rec, 0.0, now)
