"""Would a job of this size start now? The gate's question (DESIGN §5.8), answered by the planner
itself against the last pass's inputs, so the rule of who starts when has one home (core/plan.py).
Pure: the loop hands in what its last pass planned from, and renders the busy line.

    would_fit(desired, records, world, now, policy, size) -> {"fits": "now" | "later" | "never" | "unknown",
                                                              "start": epoch | None, "detail": {...}, "mem_gb", "cpus"}

A size that can never fit (the table's guess is more than the agents will ever have) is asked again
at the most there is: a guess must not turn a command that would have run into one that never can.
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
        return {**out, "fits": "later", "start": d.get("retry_at"), "detail": d}
    if d.get("code") == "busy" and d.get("retry") == "soon":  # holders overdue: any moment
        return {**out, "fits": "later", "start": None, "detail": d}
    return {**out, "fits": "unknown", "start": None, "detail": d}


def would_fit(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy, size: dict) -> dict:
    """`size`: mem_gb, cpus, est_s (and title, project, cwd for the busy line). The answer names the
    size it is for: a guess that can never fit is asked again at the most the agents can have."""
    answer = _ask(desired, records, world, now, policy, size)
    if answer["fits"] == "never" and size.get("guessed"):
        d = answer["detail"]
        smaller = dict(size)
        for _ in range(2):  # memory, then CPUs (each refusal names one)
            key = "mem_gb" if d.get("resource") == "memory" else "cpus"
            top = d.get("max") or 0
            if not top > 0:
                break
            smaller[key] = top
            answer = _ask(desired, records, world, now, policy, smaller)
            if answer["fits"] != "never":
                break
            d = answer["detail"]
    return answer
