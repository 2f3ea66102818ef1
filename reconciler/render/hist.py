"""The text of `res hist`: its table, and the hint a `run` / `note` prints when it asks for far more
than its kind of job has used (the rule: core/hist.py)."""
from __future__ import annotations

from reconciler.core.hist import MIN_RUNS, HistRow, Suggestion, for_flag, mem_flag, oversized
from reconciler.render.text import fmt_gb, fmt_span, one_line, quoted


def hint_for(request_mem_gb: float, request_est_s: float, suggestion: Suggestion | None) -> str | None:
    """One stderr line when a `run` / `note` asks for more than 2× the suggestion (memory or
    duration), else None:
    `hint: "build" in proj-a peaked at 1.2 GB (p95, 7 runs); --mem 1.4G would do`"""
    big_mem, long_for = oversized(request_mem_gb, request_est_s, suggestion)
    if not (big_mem or long_for):
        return None
    s = suggestion
    where = quoted(s.kind, 40) + (f" in {one_line(s.project)[:40]}" if s.project else "")
    runs = f"{s.n} runs" + (f", {s.killed} killed at the limit" if s.killed else "")
    if big_mem and long_for:
        what = f"peaked at {fmt_gb(s.peak_p95_gb)} (p95) and took {fmt_span(s.dur_p90_s)} (p90) over {runs}"
        flags = f"--mem {mem_flag(s.mem_gb)} --for {for_flag(s.est_s)}"
    elif big_mem:
        what = f"peaked at {fmt_gb(s.peak_p95_gb)} (p95, {runs})"
        flags = f"--mem {mem_flag(s.mem_gb)}"
    else:
        what = f"took {fmt_span(s.dur_p90_s)} (p90, {runs})"
        flags = f"--for {for_flag(s.est_s)}"
    return f"hint: {where} {what}; {flags} would do"


_HEADER = ("project", "kind", "runs", "req", "peak p50", "peak p95", "est", "took p50", "took p90", "suggest", "")
_RIGHT = {2, 3, 4, 5, 6, 7, 8}


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} GB"


def _dur(x: float | None) -> str:
    return "-" if x is None else fmt_span(x)


def render_hist(rows: list[HistRow]) -> str:
    """An aligned table, one line per row; `suggest` shows the flags to use (or why there are none),
    the last column flags runs killed at their memory limit."""
    if not rows:
        return "no finished jobs to learn from yet"
    lines = [_HEADER]
    for r in rows:
        s = r.suggestion
        if s is None:
            sugg = f"- (needs {MIN_RUNS} runs)"
        else:
            sugg = " ".join(f for f in ((f"--mem {mem_flag(s.mem_gb)}" if s.mem_gb is not None else ""),
                                        (f"--for {for_flag(s.est_s)}" if s.est_s is not None else "")) if f)
        note = f"{r.killed} killed at the limit" if r.killed else ""
        lines.append((one_line(r.project)[:24] or "-", quoted(r.kind, 30), str(r.n), _gb(r.req_gb), _gb(r.peak_p50_gb),
                      _gb(r.peak_p95_gb), _dur(r.est_s), _dur(r.dur_p50_s), _dur(r.dur_p90_s), sugg, note))
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADER))]
    out = []
    for line in lines:
        cells = [c.rjust(w) if i in _RIGHT else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


_AUTO_HEADER = ("project", "command", "runs", "--mem", "--cpus", "--for", "")


def render_learned(learned: dict[str, dict[str, list]], project: str | None = None) -> str:
    """What `--mem/--cpus/--for auto` take for each command fingerprint history knows (core/hist.learned;
    `-`: not learned, the table's or the policy's then), by project then command."""
    from reconciler.core.sizing import seen_entry

    lines = [_AUTO_HEADER]
    for proj in sorted(learned):
        if project is not None and proj != project:
            continue
        for fp in sorted(learned[proj]):
            seen = seen_entry(learned[proj][fp])
            if seen is None:
                continue
            lines.append((one_line(proj)[:24] or "-", quoted(fp, 40), str(seen.runs), mem_flag(seen.mem_gb),
                          "-" if seen.cpus is None else f"{seen.cpus:g}", for_flag(seen.est_s), "heavy" if seen.heavy else ""))
    if len(lines) == 1:
        return "no command learned yet (auto sizes come from the gate's table or the policy)"
    widths = [max(len(line[i]) for line in lines) for i in range(len(_AUTO_HEADER))]
    return "\n".join("  ".join(c.rjust(w) if i in (2, 3, 4, 5) else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths))).rstrip() for line in lines)
