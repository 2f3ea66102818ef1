"""Text for people and agents: the plan (DESIGN §7) and the warnings of `res status`. Pure.

Agents parse these lines: each is one line, stable and complete. The reasons on the plan's actions
are made in render/reasons.py.
"""
from __future__ import annotations

from reconciler.core.models import Action, Plan, World
from reconciler.core.quantities import throttled
from reconciler.render.text import fmt_cpus, fmt_gb, one_line, quoted


# ---------------------------------------------------------------- the plan (DESIGN §7)

_SYMBOL = {
    "start": "+ start",
    "grant": "+ note",
    "refuse": "x refuse",
    "stop": "- stop",
    "evict": "‼ stop",
    "settle": "✓ settle",
    "requeue": "⟲ requeue",
    "retry": "⟲ retry",
    "reattach": "↻ reattach",
    "expire": "- expire",
    "cancel": "- cancel",
    "set": "~ set",
    "adopt": "~ adopt",
    "end_game": "~ game off",
    "restore": "~ restore",
    "recover": "↻ recover",
    "hold": "x hold",
    "enqueue": "· queue",
    "running": "· running",
    "retire": "· retire",
    "prune": "· prune",
}
_SUMMARY = [("start", "to start"), ("grant", "to note"), ("refuse", "to refuse"), ("stop", "to stop"),
            ("evict", "to stop above its book"),
            ("set", "to change"), ("adopt", "to adopt"), ("end_game", "to end game mode"), ("restore", "to write back"), ("recover", "to recover"), ("hold", "held (not written by res)"), ("reattach", "to reattach"), ("requeue", "to requeue"), ("retry", "to start again bigger"), ("settle", "to settle"),
            ("expire", "to expire"), ("cancel", "to cancel")]


def retry_text(d: dict) -> str:
    """Why an auto-sized job goes back in the queue (core.plan.may_retry): `killed at its memory limit
    (256 MB, peak 250 MB); res sized it, so it starts again once, at 384 MB`."""
    if d.get("cause") == "node_failure":  # core.plan.may_requeue
        where = f" ({d['place']})" if d.get("place") else ""
        return f"its cluster node failed under it (slurm NODE_FAIL{where}); submitted again ({d['requeue']} of {d['of']})"
    if d.get("cause") == "evicted":  # core.plan._evicted_retry
        used = f"{fmt_gb(d['used_gb'])} used, " if d.get("used_gb") is not None else ""
        book = (f"booked at its cap ({fmt_gb(d['to_gb'])}) from now on" if d.get("at_cap")
                else f"booked {fmt_gb(d['to_gb'])} now")
        times = "" if d.get("stops", 1) == 1 else f" (stop {d['stops']})"
        return (f"stopped by res above its book ({used}{fmt_gb(d['book_gb'])} booked) before memory ran out{times}; "
                f"back at the queue's head, {book}; it starts again by itself")
    peak = f", peak {fmt_gb(d['peak_gb'])}" if d.get("peak_gb") is not None else ""
    return (f"killed at its memory limit ({fmt_gb(d['killed_at_gb'])}{peak}); res sized it, so it starts again "
            f"once, at {fmt_gb(d['mem_gb'])}")


def retry_line(job_id: str, d: dict) -> str:
    """The line res writes at the end of the killed run's output, in the job's log."""
    return f"{job_id} {retry_text(d)}"


def _unheld(a: Action) -> bool:
    """A reattach of a job whose holder gave it up cleanly: bookkeeping."""
    return a.kind == "reattach" and (a.detail or {}).get("code") == "unheld"


def _bookkeeping(a: Action) -> bool:
    return a.kind in ("enqueue", "running", "retire", "prune") or _unheld(a)


def plan_line(a: Action) -> str:
    if a.kind in ("set", "adopt", "end_game"):  # units and files, not jobs: the name, then what changes
        return f"  {_SYMBOL[a.kind]:<11}{a.id:<33}{one_line(a.reason, 200)}".rstrip()
    symbol = "· attach" if _unheld(a) else _SYMBOL.get(a.kind, a.kind)
    if a.kind == "start" and (a.detail or {}).get("where") == "cluster":
        symbol = "+ submit"
    head = f"  {symbol:<11}{a.id:<6}"
    what = quoted(a.title, 24) if a.title else ""
    size = ""
    if a.kind in ("start", "grant", "refuse", "enqueue", "evict"):
        mem = f"{a.book_gb:.1f} GB booked · {a.mem_gb:.1f} GB cap" if a.book_gb is not None else f"{a.mem_gb:.1f} GB"
        size = f"{mem}  {fmt_cpus(a.cpus):<7}"
    reason = one_line(a.reason, 200)
    return f"{head}{what:<26} {size:<17}{reason}".rstrip()


def render_plan(plan: Plan) -> str:
    lines = [f"res: {n}" for n in plan.notices]
    lines += [plan_line(a) for a in plan.actions if a.kind != "wait"]
    counts = {k: sum(1 for a in plan.of(k) if not _bookkeeping(a)) for k, _ in _SUMMARY}
    said = [f"{counts[k]} {label}" for k, label in _SUMMARY if counts[k]]
    bookkeeping = sum(1 for a in plan.actions if _bookkeeping(a))
    waits = plan.of("wait")
    waiting = ""
    if waits:
        n = len(waits)
        waiting = f"{n} queued entr{'y waits' if n == 1 else 'ies wait'} ({waits[0].id}: {one_line(waits[0].reason, 120)})"
    if said:
        lines.append("Plan: " + ", ".join(said) + "." + (f" {waiting}." if waiting else ""))
    elif bookkeeping:
        lines.append(f"No changes to jobs; {bookkeeping} bookkeeping step{'s' if bookkeeping > 1 else ''} (·)"
                     + (f"; {waiting}." if waiting else "."))
    elif waiting:
        lines.append(f"No changes; {waiting}.")
    else:
        lines.append("No changes. The world matches the desired state.")
    return "\n".join(lines)


# ---------------------------------------------------------------- `res status`: the user's side

TMPFS_SHARE = 0.25  # of RAM


def agents_memory_line(world: World) -> str | None:
    """What agents use outside their jobs' reservations: the slice's memory minus the jobs', and how
    much of that is page cache the kernel takes back when it needs to."""
    s = world.agents_slice
    if s is None:
        return None
    jobs = sum(o.mem_used_gb for o in world.jobs.values())
    free_of_jobs = max(s.mem_used_gb - jobs, 0.0)
    cache = min(s.mem_file_gb, free_of_jobs)
    return (f"agents slice uses {fmt_gb(s.mem_used_gb)}: jobs {fmt_gb(jobs)}, unreserved {fmt_gb(free_of_jobs)} "
            f"(of which {fmt_gb(cache)} reclaimable cache)")


def throttle_line(req, used_gb: float, pressure_avg60: float) -> str:
    by = f" (by {one_line(req.by, 60)})" if req.by else ""
    return (f"{req.id} {quoted(req.title, 30)}{by} is throttled at its own limit "
            f"({fmt_gb(used_gb)} of {fmt_gb(req.mem_gb)}, memory pressure {pressure_avg60:.0f}%); "
            f"it would run faster with more --mem")


def status_warnings(world: World, records, policy) -> list[str]:
    """One line per thing the user may want to act on; none of them stops anything."""
    out = []
    for rec in sorted(records, key=lambda r: r.request.number):
        o = world.jobs.get(rec.id)
        if o is None or o.pressure_avg60 is None:
            continue
        if throttled(o.mem_used_gb, rec.request.mem_gb, o.pressure_avg60):
            out.append(throttle_line(rec.request, o.mem_used_gb, o.pressure_avg60))
    if world.tmp_tmpfs_used_gb is not None and world.mem_total_gb and \
            world.tmp_tmpfs_used_gb > TMPFS_SHARE * world.mem_total_gb:
        out.append(f"/tmp is a tmpfs holding {fmt_gb(world.tmp_tmpfs_used_gb)} "
                   f"({world.tmp_tmpfs_used_gb / world.mem_total_gb:.0%} of RAM); see res clean")
    outside = sorted(s.pid for s in world.sessions or [] if not s.in_slice and s.movable)
    for s in sorted(world.sessions or [], key=lambda s: s.pid):
        if not s.in_slice and not s.movable:
            out.append(f"claude pid {s.pid} runs in {s.unit or '?'}, outside {policy.agents_slice} "
                       f"(left there: res moves sessions out of scopes only)")
    if outside:
        n = len(outside)
        out.append(f"{n} claude session{'s' if n > 1 else ''} outside {policy.agents_slice} "
                   f"(pid {', '.join(map(str, outside[:5]))}{', …' if n > 5 else ''}); res adopt moves them")
    if world.stray_services:
        names = world.stray_services

        def named(n: str) -> str:
            job, gb = world.stray_from.get(n), world.stray_mem_gb.get(n)
            said = ", ".join(x for x in (f"from {job}" if job else "", fmt_gb(gb) if gb is not None else "") if x)
            return f"{n} ({said})" if said else n

        out.append(f"transient service{'s' if len(names) > 1 else ''} outside the agents slices, outside every "
                   f"budget: {', '.join(named(n) for n in names[:5])}{', …' if len(names) > 5 else ''} (agents: "
                   "use res run; res stops none of them: docs/escaping.md)")
    return out
