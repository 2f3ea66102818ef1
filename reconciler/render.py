"""Text for people and agents: the busy line, outcome lines, the plan (DESIGN §5.2, §7). Pure.

Agents parse these lines: each is one line, stable and complete.
"""
from __future__ import annotations

from .capacity import Capacity, Holder, freed_by
from .models import Action, Plan, Request, World
from .units import fmt_clock, fmt_cpus, fmt_gb, one_line, quoted


def _until(h: Holder) -> str:
    if h.overdue or h.eta is None:
        return "(overdue)"
    return f"until ~{fmt_clock(h.eta)}"


def _who(h: Holder) -> str:
    project = f"{one_line(h.project, 30)} " if h.project else ""
    return f"{project}{quoted(h.title, 40)} ({h.id}) {_until(h)}"


def busy_line(req: Request, cap: Capacity, now: float, head: Request | None = None) -> str:
    """`busy: 7.5 GB held by proj-a "dotnet e2e" (r-4) until ~14:40; 2.1 GB free for agents; retry after
    ~14:40 or work on something else` — holders named earliest ETA first."""
    need_gb = req.mem_gb + (head.mem_gb if head else 0.0)
    need_cpus = req.cpus + (head.cpus if head else 0.0)
    short_mem = need_gb > cap.mem_gb + 1e-9
    chosen, when = freed_by(cap, need_gb, need_cpus, now)
    parts = []
    if chosen:
        unit = (lambda h: fmt_gb(h.held_gb)) if short_mem else (lambda h: fmt_cpus(h.cpus))
        first, *rest = chosen
        held = f"{unit(first)} held by {_who(first)}"
        held += "".join(f", {unit(h)} by {_who(h)}" for h in rest)
        parts.append(held)
    if head:
        parts.append(f"queue head {head.id} {quoted(head.title, 40)} waits for {fmt_gb(head.mem_gb)} first")
    free = f"{fmt_gb(max(cap.mem_gb, 0))} free for agents" if short_mem else f"{fmt_cpus(max(cap.cpus, 0))} free for agents"
    if not chosen:
        asked = fmt_gb(req.mem_gb) if short_mem else fmt_cpus(req.cpus)
        free += f", {asked} asked; the rest is in use outside res or kept as the user's reserve"
    parts.append(free)
    if when is None:
        retry = "retry later or work on something else"
    elif when <= now or any(h.overdue for h in chosen):
        retry = "retry in a few minutes or work on something else"
    else:
        retry = f"retry after ~{fmt_clock(when)} or work on something else"
    parts.append(retry)
    return "busy: " + "; ".join(parts)


def lock_line(req: Request, holder: Holder) -> str:
    return (f"busy: lock {quoted(req.lock or '', 40)} held by {_who(holder)}; "
            + (f"retry after ~{fmt_clock(holder.eta)} or work on something else"
               if holder.eta and not holder.overdue else "retry in a few minutes or work on something else"))


def sessions_line(sessions: list[Holder], limit: int) -> str:
    """Over max_concurrent_sessions: name the running sessions, earliest ETA first."""
    ordered = sorted(sessions, key=lambda h: (h.eta is None, h.eta or 0, h.id))
    who = ", ".join(_who(h) for h in ordered[:5]) + (f", and {len(ordered) - 5} more" if len(ordered) > 5 else "")
    first = next((h for h in ordered if h.eta and not h.overdue), None)
    retry = (f"retry after ~{fmt_clock(first.eta)} or work on something else" if first
             else "retry in a few minutes or work on something else")
    return f"busy: {len(sessions)} agent sessions running (max {limit}): {who}; {retry}"


def daily_line(spent: float, limit: float) -> str:
    return (f"busy: agent sessions spent ${spent:.2f} today, daily_cost_usd is ${limit:.2f}; "
            "new sessions start again tomorrow, or raise daily_cost_usd")


def never_line(req: Request, cap: Capacity) -> str:
    if req.mem_gb > cap.max_mem_gb:
        return f"{_g(req.mem_gb)} GB can never fit (max {_g(max(cap.max_mem_gb, 0))} GB)"
    return f"{fmt_cpus(req.cpus)} can never fit (max {fmt_cpus(max(cap.max_cpus, 0))})"


def _g(gb: float) -> str:
    return f"{gb:.0f}" if float(gb).is_integer() else f"{gb:.1f}"


# ---------------------------------------------------------------- the plan (DESIGN §7)

_SYMBOL = {
    "start": "+ start",
    "grant": "+ note",
    "refuse": "x refuse",
    "stop": "- stop",
    "settle": "✓ settle",
    "requeue": "⟲ requeue",
    "reattach": "↻ reattach",
    "expire": "- expire",
    "cancel": "- cancel",
    "set": "~ set",
    "adopt": "~ adopt",
    "end_game": "~ game off",
    "enqueue": "· queue",
    "running": "· running",
    "retire": "· retire",
    "prune": "· prune",
}
_SUMMARY = [("start", "to start"), ("grant", "to note"), ("refuse", "to refuse"), ("stop", "to stop"),
            ("set", "to change"), ("adopt", "to adopt"), ("end_game", "to end game mode"), ("reattach", "to reattach"), ("requeue", "to requeue"), ("settle", "to settle"),
            ("expire", "to expire"), ("cancel", "to cancel")]


UNHELD = "nobody attached"  # a reattach of a job whose holder gave it up cleanly: bookkeeping


def _bookkeeping(a: Action) -> bool:
    return a.kind in ("enqueue", "running", "retire", "prune") or (a.kind == "reattach" and a.reason == UNHELD)


def plan_line(a: Action) -> str:
    if a.kind in ("set", "adopt", "end_game"):  # units and files, not jobs: the name, then what changes
        return f"  {_SYMBOL[a.kind]:<11}{a.id:<33}{one_line(a.reason, 200)}".rstrip()
    symbol = "· attach" if a.kind == "reattach" and a.reason == UNHELD else _SYMBOL.get(a.kind, a.kind)
    head = f"  {symbol:<11}{a.id:<6}"
    what = quoted(a.title, 24) if a.title else ""
    size = f"{a.mem_gb:.1f} GB  {fmt_cpus(a.cpus):<7}" if a.kind in ("start", "grant", "refuse", "enqueue") else ""
    reason = one_line(a.reason, 200)
    return f"{head}{what:<26} {size:<17}{reason}".rstrip()


def render_plan(plan: Plan) -> str:
    lines = [f"res: {n}" for n in plan.notices]
    lines += [plan_line(a) for a in plan.actions if a.kind != "wait"]
    counts = {k: sum(1 for a in plan.of(k) if not _bookkeeping(a)) for k, _ in _SUMMARY}
    said = [f"{counts[k]} {label}" for k, label in _SUMMARY if counts[k]]
    bookkeeping = sum(1 for a in plan.actions if _bookkeeping(a))
    if said:
        lines.append("Plan: " + ", ".join(said) + ".")
    elif bookkeeping:
        lines.append(f"No changes to jobs; {bookkeeping} bookkeeping step{'s' if bookkeeping > 1 else ''} (·).")
    else:
        lines.append("No changes. The world matches the desired state.")
    return "\n".join(lines)


# ---------------------------------------------------------------- `res status`: the user's side

THROTTLE_USED = 0.85  # of the job's own --mem
THROTTLE_PRESSURE = 20.0  # memory.pressure some avg60, percent
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
    return (f"agents slice uses {s.mem_used_gb:.1f} GB: jobs {jobs:.1f} GB, unreserved {free_of_jobs:.1f} GB "
            f"(of which {cache:.1f} GB reclaimable cache)")


def status_warnings(world: World, records, policy) -> list[str]:
    """One line per thing the user may want to act on; none of them stops anything."""
    out = []
    for rec in sorted(records, key=lambda r: r.request.number):
        o = world.jobs.get(rec.id)
        if o is None or o.pressure_avg60 is None:
            continue
        if o.mem_used_gb >= THROTTLE_USED * rec.request.mem_gb and o.pressure_avg60 >= THROTTLE_PRESSURE:
            out.append(f"{rec.id} {quoted(rec.request.title, 30)} is throttled at its own limit "
                       f"({o.mem_used_gb:.1f} of {rec.request.mem_gb:.1f} GB, memory pressure {o.pressure_avg60:.0f}%); "
                       f"it would run faster with more --mem")
    if world.tmp_tmpfs_used_gb is not None and world.mem_total_gb and \
            world.tmp_tmpfs_used_gb > TMPFS_SHARE * world.mem_total_gb:
        out.append(f"/tmp is a tmpfs holding {world.tmp_tmpfs_used_gb:.1f} GB "
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
        out.append(f"transient service{'s' if len(names) > 1 else ''} outside the agents slices: "
                   f"{', '.join(names[:5])}{', …' if len(names) > 5 else ''} (agents: use res run)")
    return out
