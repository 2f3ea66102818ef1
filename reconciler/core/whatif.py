"""Would a job of this size start now? The gate's question (DESIGN §5.8), answered by the planner
itself against the last pass's inputs, so the rule of who starts when has one home (core/plan.py).
Pure: the loop hands in what its last pass planned from, and renders the busy line.

    would_fit(desired, records, world, now, policy, size) -> {"fits": "now" | "later" | "never" | "unknown",
                                                              "start": epoch | None, "detail": {...}, "mem_gb", "cpus"}

A guessed size that can never fit (the table's guess is more than the agents will ever have) is asked
again at the most there is, and, held back only by use outside res, at what is free now: a guess (a
booking, not a limit) must not turn a command that would have run into one that never can. A start
that rests on gated jobs' ends (the gate's guesses) is "later, unknown": no reason to refuse.
"""
from __future__ import annotations

import dataclasses

from reconciler.core.models import Desired, JobRecord, Request, World, parse
from reconciler.core.plan import plan


def _trial(desired: Desired, records: dict[str, JobRecord], size: dict, now: float) -> Request:
    number = 1 + max([r.number for r in desired.requests] + [rec.request.number for rec in records.values()] + [0])
    return parse(Request, {"id": f"r-{number}", "kind": "job", "title": size.get("title") or "gate",
                           "project": size.get("project") or "", "mem_gb": size["mem_gb"], "cpus": size["cpus"],
                           "est_s": size["est_s"], "created": now, "queue": False, "on": "local", "gated": True,
                           "cmd": ["true"], "cwd": size.get("cwd") or "/"})


def _ask(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy, size: dict) -> dict:
    req = _trial(desired, records, size, now)
    trial = dataclasses.replace(desired, requests=[*desired.requests, req])
    acts = plan(trial, records, world, now, policy, me=None).for_id(req.id)
    out = {"mem_gb": req.mem_gb, "cpus": req.cpus}
    act = next((a for a in acts if a.kind in ("start", "refuse", "wait", "enqueue")), None)
    if act is None:
        return {**out, "fits": "unknown", "start": None, "detail": None}
    if act.kind == "start":
        return {**out, "fits": "now", "start": now, "detail": None}
    d = act.detail or {}
    if act.kind != "refuse":  # deferred by the per-pass start cap: it starts within a pass or two
        return {**out, "fits": "later", "start": None, "detail": d}
    if d.get("code") == "never_fits":
        return {**out, "fits": "never", "start": None, "detail": d}
    if d.get("code") == "busy" and d.get("retry") == "after":
        if any(_gated(records, h.get("id")) for h in d.get("holders") or ()):
            # Its start waits on gated jobs, whose ends are the gate's guesses (the table's minutes,
            # history's p90 × 1.5): an upper bound, no reason to refuse. The wait is bounded anyway.
            return {**out, "fits": "later", "start": None, "detail": d}
        return {**out, "fits": "later", "start": d.get("retry_at"), "detail": d}
    if d.get("code") == "busy" and d.get("retry") == "soon":  # holders overdue: any moment
        return {**out, "fits": "later", "start": None, "detail": d}
    return {**out, "fits": "unknown", "start": None, "detail": d}


def _gated(records: dict[str, JobRecord], job_id: object) -> bool:
    rec = records.get(job_id) if isinstance(job_id, str) else None
    return rec is not None and rec.request.gated


def would_fit(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy, size: dict) -> dict:
    """`size`: mem_gb, cpus, est_s (and title, project, cwd for the busy line). The answer names the
    size it is for: a guess that can never fit is asked again at the most the agents can have."""
    answer = _ask(desired, records, world, now, policy, size)
    if answer["fits"] != "never" or not size.get("guessed"):
        return answer
    smaller = dict(size)
    for _ in range(3):  # memory, then CPUs (each refusal names one), then what is free of them now
        d = answer["detail"] or {}
        if answer["fits"] == "never":
            key = "mem_gb" if d.get("resource") == "memory" else "cpus"
            top = d.get("max") or 0
            if not top > 0:
                break
            smaller[key] = top
        elif answer["fits"] == "unknown" and d.get("code") == "busy" and not d.get("holders"):
            # at the most there could be, held back by use outside res, with nothing of res's to wait
            # for: book what is free now (a guess is no limit)
            free = {"mem_gb": d.get("free_gb") or 0, "cpus": d.get("free_cpus") or 0}
            if not all(free[k] > 0 for k in free):
                break
            smaller = {**smaller, **{k: min(smaller[k], free[k]) for k in free}}
        else:
            break
        answer = _ask(desired, records, world, now, policy, smaller)
    return answer
