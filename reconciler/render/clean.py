"""The lines of `res clean`: what a dry run would free, what a sweep freed and kept."""
from __future__ import annotations

from reconciler.core.clean import Outcome, Removal, escaped_path as show
from reconciler.core.quantities import GIB


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MB"
    return f"{max(0, n) / 1024:.0f} KB"


def render_plan(removals: list[Removal]) -> list[str]:
    if not removals:
        return ["nothing to clean"]
    lines = [f"would free {fmt_bytes(r.entry.size)}: {show(r.entry.path)} ({r.reason})" for r in removals]
    total = sum(r.entry.size for r in removals)
    n = len(removals)
    lines.append(f"would free {fmt_bytes(total)} in {n} {'entry' if n == 1 else 'entries'}; "
                 "res clean --yes removes them")
    return lines


def render_outcomes(outcomes: list[Outcome]) -> list[str]:
    lines = []
    for o in outcomes:
        if o.freed or o.removed:
            line = f"freed {fmt_bytes(o.freed)}: {show(o.entry.path)}"
            lines.append(line + (f" (kept part: {o.note})" if o.note else ""))
        else:
            lines.append(f"kept {show(o.entry.path)}: {o.note}")
    if not outcomes:
        lines.append("nothing to clean")
    elif len(outcomes) > 1:
        lines.append(f"freed {fmt_bytes(sum(o.freed for o in outcomes))} in total")
    return lines
