"""The lines of `res clean`: what a dry run would free and why, what a sweep freed and kept, the
refused lines of a pattern file."""
from __future__ import annotations

from reconciler.core.clean import (ABSOLUTE, DEAD_PID, DOT_NAMES, DOUBLE_STAR, EMPTY_DIR, NAMES_GIT, ONLY_WILDCARDS,
                                   PROJECT_PATTERN, Outcome, PatternError, Removal)
from reconciler.core.quantities import GIB
from reconciler.render.text import escaped_path as show, fmt_span


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MB"
    return f"{max(0, n) / 1024:.0f} KB"


def removal_reason(r: Removal) -> str:
    """`stale scratch, untouched 3h`: why an entry goes (core.clean.select)."""
    untouched = f"untouched {fmt_span(r.idle_s)}"
    if r.code == EMPTY_DIR:
        return f"empty directory, {untouched}"
    if r.code == DEAD_PID:
        return f"pid file of dead pid {r.entry.pid}, {untouched}"
    if r.code == PROJECT_PATTERN:
        return f"project pattern {r.entry.pattern!r}, {untouched}"
    return f"stale scratch, {untouched}"  # core.clean.STALE_SCRATCH


_PATTERN_WHY = {
    ABSOLUTE: "must be relative to the project",
    DOT_NAMES: "empty, '.' or '..' names are not allowed",
    DOUBLE_STAR: "'**' is not supported",
    NAMES_GIT: "may not name .git or the pattern file",
    ONLY_WILDCARDS: "the first name must not be only wildcards",
}


def pattern_error(source: str, e: PatternError) -> str:
    """`p/.res-clean:6: /etc: must be relative to the project`: a refused line of a pattern file
    (core.clean.parse_patterns); `source` as shown."""
    return f"{source}:{e.line_no}: {show(e.line)}: {_PATTERN_WHY[e.code]}"


def render_plan(removals: list[Removal]) -> list[str]:
    if not removals:
        return ["nothing to clean"]
    lines = [f"would free {fmt_bytes(r.entry.size)}: {show(r.entry.path)} ({removal_reason(r)})" for r in removals]
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
