"""plan(desired, recorded, observed, now, policy) -> Plan: every decision of DESIGN §5.3, pure.

No I/O, no clock, no randomness: all it needs is in its arguments, so `res reconcile --dry-run
--world FILE` reproduces any decision.
"""
from __future__ import annotations

import math
import signal

from .capacity import HOLDING, Capacity, QueueForecast, capacity, holder_of
from .models import TERMINAL, Action, Desired, ExitObs, JobRecord, Phase, Plan, Request, World
from .render import busy_line, lock_line, never_line
from .units import fmt_clock, fmt_gb, fmt_span

PRUNE_AFTER_S = 24 * 3600


def _act(**fields) -> Action:
    """Actions are made here from validated inputs only: skip re-validating each (1,000s a pass)."""
    return Action.model_construct(**fields)
ALIVE = ("active", "activating", "deactivating")


def plan(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy) -> Plan:
    out = Plan()
    if not desired.queue_ok:
        out.notices.append(f"{desired.queue_error}; starting and stopping nothing because of it")
    if not world.ok:
        out.notices.append("could not observe jobs (" + "; ".join(world.errors) + "); acting on none of them")
    wanted = {r.id for r in desired.requests}
    ended: set[str] = set()  # records that stop holding resources in this plan

    for rec in sorted(records.values(), key=lambda r: r.request.number):
        for action in _lifecycle(rec, desired, wanted, world, now):
            out.actions.append(action)
            if action.kind in ("settle", "expire", "requeue"):
                ended.add(rec.id)

    holding = [r for r in records.values() if r.phase in HOLDING and r.id not in ended]
    cap = capacity(policy, desired.game, world, holding, now)
    out.budget_mem_gb, out.budget_cpus = cap.mem_gb, cap.cpus
    if desired.queue_ok and world.ok:
        out.actions.extend(_admit(desired, records, cap, now, policy))
    return out


# ---------------------------------------------------------------- running, ended, released


def _lifecycle(rec: JobRecord, desired: Desired, wanted: set[str], world: World, now: float) -> list[Action]:
    req = rec.request
    tag = dict(title=req.title, mem_gb=req.mem_gb, cpus=req.cpus)
    if rec.phase in TERMINAL:
        acts = []
        if desired.queue_ok and rec.id in wanted:
            acts.append(_act(kind="retire", id=rec.id, reason=f"{rec.phase.value}; removing it from the queue file", **tag))
        elif rec.ended is not None and now - rec.ended > PRUNE_AFTER_S:
            acts.append(_act(kind="prune", id=rec.id, reason="finished over 24 h ago; into history", **tag))
        return acts

    if req.kind == "note":
        if rec.phase != Phase.running:
            return []
        if req.owner_pid is not None and world.ok and req.owner_pid not in world.live_pids:
            return [_act(kind="expire", id=rec.id, reason=f"owner pid {req.owner_pid} is gone", **tag)]
        expires = rec.expires()
        if expires is not None and now >= expires:
            return [_act(kind="expire", id=rec.id, reason=f"expired at {fmt_clock(expires)}", **tag)]
        if desired.queue_ok and rec.id not in wanted:
            return [_act(kind="expire", id=rec.id, reason="released", **tag)]
        return []

    if rec.phase == Phase.queued:
        if desired.queue_ok and rec.id not in wanted:
            return [_act(kind="cancel", id=rec.id, reason="removed from the queue", **tag)]
        return []

    # starting / running / exited: only what could be observed is acted on.
    if not world.ok:
        return []
    obs = world.jobs.get(rec.id)
    if obs is not None and obs.exit is not None:
        rc, why, peak = settle_outcome(rec, obs.exit)
        return [_act(kind="settle", id=rec.id, rc=rc, why=why, peak_gb=peak, at=obs.exit.at or None, reason=settle_text(rec, rc, peak, why, obs.exit.at), **tag)]
    alive = obs is not None and obs.state in ALIVE
    if rec.phase == Phase.starting:
        if alive:
            return [_act(kind="running", id=rec.id, reason="unit seen started", **tag)]
        if rec.lease_until is not None and now > rec.lease_until:
            return [_act(kind="requeue", id=rec.id, reason="never started; lease expired", **tag)]
        return []
    if not alive:
        why = "lost: the unit vanished without an exit record"
        return [_act(kind="settle", id=rec.id, rc=None, why=why, peak_gb=None, reason=why, **tag)]
    if desired.queue_ok and rec.id not in wanted and rec.stop_reason is None:
        return [_act(kind="stop", id=rec.id, reason="released", **tag)]
    return []


def settle_outcome(rec: JobRecord, ex: ExitObs) -> tuple[int | None, str, float | None]:
    """(rc, why, peak GB) of an ended job, from the exit record its unit wrote."""
    req = rec.request
    peak = round(ex.peak_gb, 3) if ex.peak_gb is not None else None
    if ex.code == "exited":
        rc = int(ex.status) if ex.status.lstrip("-").isdigit() else None
    else:
        try:
            rc = 128 + signal.Signals["SIG" + ex.status].value
        except KeyError:
            rc = None
    oom = ex.result == "oom-kill" or (ex.oom_kills > 0 and ex.code != "exited")
    if rec.stop_reason:
        why = rec.stop_reason
    elif oom:
        why = (f"killed at its memory limit ({fmt_gb(req.mem_gb)}"
               + (f", peak {fmt_gb(peak)}" if peak is not None else "")
               + f"); raise --mem (try --mem {suggest_mem(req.mem_gb)})")
    elif ex.code == "exited" and rc == 203:
        why = "could not execute the command (not found or not executable)"
    elif ex.code == "exited":
        why = "exited 0" if rc == 0 else f"exit code {rc}"
    else:
        why = f"killed by signal {ex.status}"
    return rc, why, peak


def suggest_mem(mem_gb: float) -> str:
    """A bigger --mem to try after a kill at the limit: 1.5 ×, rounded up to a whole GB (or 256 MB)."""
    want = mem_gb * 1.5
    if want < 1:
        return f"{math.ceil(want * 4) * 256}M"
    return f"{math.ceil(want)}G"


def settle_text(rec: JobRecord, rc: int | None, peak: float | None, why: str, at: float) -> str:
    took = f" in {fmt_span(at - rec.started)}" if rec.started and at else ""
    peak_s = f" peak {fmt_gb(peak)}" if peak is not None else ""
    return f"rc={rc if rc is not None else '?'}{peak_s}{took}; {why}"


# ---------------------------------------------------------------- admission (DESIGN §5.2)


def _admit(desired: Desired, records: dict[str, JobRecord], cap: Capacity, now: float, policy) -> list[Action]:
    acts: list[Action] = []
    locks = {h.lock: h for h in cap.holders if h.lock}
    starts = 0
    head: Request | None = None  # the first queued entry that waits: everything behind it waits too
    forecast: QueueForecast | None = None  # made once the first entry waits
    position = 0  # of a queued entry among those that stay queued

    for req in desired.requests:
        rec = records.get(req.id)
        if rec is not None and rec.phase != Phase.queued:
            continue
        tag = dict(title=req.title, mem_gb=req.mem_gb, cpus=req.cpus)
        if cap.never_fits(req):
            acts.append(_act(kind="refuse", id=req.id, never=True, reason=never_line(req, cap), **tag))
            continue
        holder = locks.get(req.lock) if req.lock else None

        if req.kind == "note" or not req.queue:
            if holder is not None:
                acts.append(_act(kind="refuse", id=req.id, reason=lock_line(req, holder), **tag))
            elif head is not None and not req.force:
                acts.append(_act(kind="refuse", id=req.id, reason=busy_line(req, cap, now, head=head), **tag))
            elif not cap.fits(req):
                acts.append(_act(kind="refuse", id=req.id, reason=busy_line(req, cap, now), **tag))
            elif req.kind == "note":
                acts.append(_act(kind="grant", id=req.id, reason=f"fits ({fmt_gb(cap.mem_gb)} free)", **tag))
                cap.take(req, _new_holder(req, now))
            elif starts < policy.max_starts_per_tick:
                acts.append(_act(kind="start", id=req.id, reason=f"fits ({fmt_gb(cap.mem_gb)} free)", **tag))
                cap.take(req, _new_holder(req, now))
                starts += 1
                if req.lock:
                    locks[req.lock] = cap.holders[-1]
            # else: over this pass's start cap; decided next pass
            continue

        # --queue: strict FIFO; a blocked head holds the rest; a held lock skips the entry.
        position += 1
        if holder is not None:
            acts.extend(_wait(req, rec, f"position {position}; lock {req.lock!r} held by {holder.id}", **tag))
            continue
        if head is None and cap.fits(req) and starts < policy.max_starts_per_tick:
            why = "queue head, fits" if position == 1 else "fits"
            acts.append(_act(kind="start", id=req.id, reason=f"{why} ({fmt_gb(cap.mem_gb)} free)", **tag))
            cap.take(req, _new_holder(req, now))
            starts += 1
            position -= 1  # it did not stay queued
            if req.lock:
                locks[req.lock] = cap.holders[-1]
            continue
        if head is None:
            head = req
            forecast = QueueForecast(cap, now)
        est = forecast.start_of(req.mem_gb, req.cpus, req.est_s)
        eta = f"est. start ~{fmt_clock(est)}" if est is not None else "est. start unknown"
        blocked = "" if head is req else f"; behind queue head {head.id}"
        acts.extend(_wait(req, rec, f"position {position}; {eta}{blocked}", **tag))
    return acts


def _wait(req: Request, rec: JobRecord | None, reason: str, **tag) -> list[Action]:
    kind = "enqueue" if rec is None else "wait"
    return [_act(kind=kind, id=req.id, reason=reason, **tag)]


def _new_holder(req: Request, now: float):
    rec = JobRecord(request=req, phase=Phase.starting, started=now)
    return holder_of(rec, 0.0, now)
