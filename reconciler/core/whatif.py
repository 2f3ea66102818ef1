"""Would a job of this size start now, or when? The gate's question (DESIGN §5.8), answered by the
planner itself against the last pass's inputs, so the rule of who starts when has one home
(core/plan.py). Pure: the loop hands in what its pass planned from, and renders the busy line.

    would_fit(desired, records, world, now, policy, size) -> {"fits": "now" | "later" | "never" | "unknown",
                                                              "start": epoch | None, "detail": {...}, "mem_gb", "cpus"}

The trial request is asked as the gate's rewrite will ask (`--queue`): in line behind whatever is
queued, its start is the queue's own estimate. `detail` is then the refusal the same request would
get asked for now (who holds what, until when), for the busy line.

- A start that rests on gated jobs' ends (the gate's guesses: the table's minutes, history's p90 × 1.5)
  is "later, unknown": an upper bound, no reason to refuse (the wait is bounded by --start-within).
- A guessed size that can never fit (more than the agents will ever have) is asked again at the most
  there is, and, held back only by use outside res, at what is free now: a guess is a booking, not a
  limit, and must not turn a command that would have run into one that never can.
"""
from __future__ import annotations

import dataclasses

from reconciler.core.models import LIVE, Desired, JobRecord, Phase, Request, World, parse
from reconciler.core.plan import plan
from reconciler.core.rules import Rules


def _trial(desired: Desired, records: dict[str, JobRecord], size: dict, now: float, queue: bool) -> Request:
    number = 1 + max([r.number for r in desired.requests] + [rec.request.number for rec in records.values()] + [0])
    return parse(Request, {"id": f"r-{number}", "kind": "job", "title": size.get("title") or "gate",
                           "project": size.get("project") or "", "mem_gb": size["mem_gb"], "cpus": size["cpus"],
                           "est_s": size["est_s"], "created": now, "queue": queue, "on": "local", "gated": True,
                           "cmd": ["true"], "cwd": size.get("cwd") or "/"})


def _action(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules, size: dict, queue: bool):
    req = _trial(desired, records, size, now, queue)
    trial = dataclasses.replace(desired, requests=[*desired.requests, req])
    acts = plan(trial, records, world, now, policy, me=None).for_id(req.id)
    return req, next((a for a in acts if a.kind in ("start", "refuse", "wait", "enqueue")), None)


def _gated_ahead(desired: Desired, records: dict[str, JobRecord]) -> bool:
    """Does some live or queued entry carry a gated job's guessed end?"""
    if any(r.gated and r.id not in records for r in desired.requests):
        return True
    return any(rec.request.gated and (rec.phase in LIVE or rec.phase == Phase.queued) for rec in records.values())


def _ask(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules, size: dict) -> dict:
    req, act = _action(desired, records, world, now, policy, size, queue=True)
    out = {"mem_gb": req.mem_gb, "cpus": req.cpus, "start": None, "detail": None}
    if act is None:
        return {**out, "fits": "unknown"}
    if act.kind == "start":
        return {**out, "fits": "now", "start": now}
    d = act.detail or {}
    if act.kind == "refuse":
        return {**out, "fits": "never" if d.get("code") == "never_fits" else "unknown", "detail": d}
    est = d.get("est_start")
    if est is None:
        waits = str(d.get("waits_for") or "").split("+")
        # waiting for memory or CPUs that no holder's end promises, or for memory pressure to fall
        return {**out, "fits": "unknown" if d.get("waits_for") in ("memory", "cpus", "memory+cpus") or "pressure" in waits
                else "later"}
    return {**out, "fits": "later", "start": None if _gated_ahead(desired, records) else est}


def _why(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules, size: dict) -> dict:
    """What the same request asked for now would be told: who holds what, until when, what is free."""
    _, act = _action(desired, records, world, now, policy, size, queue=False)
    return (act.detail or {}) if act is not None and act.kind == "refuse" else {}


def would_fit(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules, size: dict) -> dict:
    """`size`: mem_gb, cpus, est_s, guessed (and title, project, cwd for the busy line). The answer
    names the size it is for."""
    answer = _ask(desired, records, world, now, policy, size)
    smaller = dict(size)
    for _ in range(3):  # a guess: memory, then CPUs (a refusal names one), then what is free of them now
        if not size.get("guessed") or answer["fits"] not in ("never", "unknown"):
            break
        d = answer["detail"] if answer["fits"] == "never" else _why(desired, records, world, now, policy, smaller)
        if answer["fits"] == "never":
            top = d.get("max") or 0
            if not top > 0:
                break
            smaller["mem_gb" if d.get("resource") == "memory" else "cpus"] = top
        elif d.get("code") == "busy" and not d.get("holders") and not d.get("head"):
            # held back only by use outside res, nothing of res's to wait for: book what is free now
            free = {"mem_gb": d.get("free_gb") or 0, "cpus": d.get("free_cpus") or 0}
            if not all(v > 0 for v in free.values()):
                break
            smaller = {**smaller, **{k: min(smaller[k], free[k]) for k in free}}
        else:
            break
        answer = _ask(desired, records, world, now, policy, smaller)
    if answer["fits"] in ("later", "unknown"):
        answer["detail"] = _why(desired, records, world, now, policy, {**smaller, "mem_gb": answer["mem_gb"],
                                                                      "cpus": answer["cpus"]})
    return answer
