"""`res hist [--project P]`: what finished jobs actually used, and what to ask for next time.
Pure: records in, rows and text out; the CLI reads state.db (records() and
history()) and prints.

Runs are grouped by (project, title kind). The *title kind* is the title without what changes from
run to run: a trailing `(…)` group and trailing hex words, repeatedly (`title_kind`):
"build abc123f" → "build", "e2e (retry 2)" → "e2e", "test 9f8e7d6 (attempt 3)" → "test".
A *hex word* is a word of at least 4 hex digits with at least one decimal digit in it (optionally
after `0x` or `#`): commit hashes, run numbers like 2024 or 1234, build ids. "e2e", "add", "beef",
"cafe" and "v1.2" are not hex words, so real words survive. What is left is cut of trailing
separators (` -:,;/#@`); if nothing would be left the whole title (flattened) is the kind.

Which runs count (`counted`): finished jobs (phase done, kind job; notes never ran anything) with a
start and an end, except those that say nothing about what the work needs: stopped by res itself
(a `stop_reason`: released, budget), stopped from outside res, never started or could not execute,
lost. A job killed at its memory limit (outcome `memory_limit`) counts, with its
limit (the request's mem_gb, its MemoryMax) as its peak, and the row says how many were.

Percentiles are NEAREST-RANK: the p-th percentile of n sorted values is the value at rank
ceil(p/100 × n) (1-based, at least 1). It is always one of the observed values; with few runs p95
is the largest, which is the safe side for sizing. The "median" everywhere here is the nearest-rank
p50, i.e. the lower of the two middle values for an even count (`percentile`).

A suggestion needs at least 3 counted runs (MIN_RUNS): mem = p95 peak × 1.15, or × 1.5 when that
peak is a limit a run was killed at (its real need is past it, by an unknown amount), rounded up to
256 MB steps below 1 GB and to 0.1 GB from 1 GB on (`suggest_mem_gb`: the same rule names the --mem to
try in the line of a job killed at its limit); for = p90 duration × 1.5, rounded up to a whole minute.
render/hist.py makes its table and the one stderr line `run` / `note` print when they ask for more than
2× that (`hint_for`).

Import-light: no pydantic (records are used by attribute), no dataclasses.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, NamedTuple

if TYPE_CHECKING:
    from reconciler.core.models import JobRecord

MIN_RUNS = 3
MEM_FACTOR = 1.15  # over a peak seen whole
KILLED_FACTOR = 1.5  # over a limit a run was killed at
FOR_FACTOR = 1.5
HINT_FACTOR = 2.0
MIN_CPU_RUN_S = 1.0  # a shorter run's CPU time ÷ duration is mostly start-up noise
_NOT_COUNTED = frozenset({"exec_failed", "start_failed", "stopped_outside", "lost"})  # JobRecord.outcome
_HEX = frozenset("0123456789abcdefABCDEF")
_SEPARATORS = " \t-:,;/#@"


# ---------------------------------------------------------------- title kinds


def flat(text: str) -> str:
    """User-supplied text (a title) on one line, the form its kind is read from: every character that
    is not printable (a newline, an escape sequence) as a space, runs of spaces as one, none at either
    end. render.text.one_line shows text in this form."""
    text = str(text)
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text  # already one line (the common case, thousands a pass: no character-wise copy)
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def _is_hex_word(word: str) -> bool:
    w = word[1:] if word.startswith("#") else word
    if w[:2] in ("0x", "0X"):
        w = w[2:]
    return len(w) >= 4 and set(w) <= _HEX and any(c.isdigit() for c in w)


def _strip_group(s: str) -> str | None:
    """`s` without its trailing balanced `(…)` group, or None if it does not end with one."""
    if not s.endswith(")"):
        return None
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                return s[:i]
    return None


def title_kind(title: str) -> str:
    """The title without a trailing `(…)` and trailing hex words (see the module docstring)."""
    whole = flat(title)
    s = whole
    while True:
        s = s.rstrip(_SEPARATORS)
        cut = _strip_group(s)
        if cut is not None:
            s = cut
            continue
        head, _, last = s.rpartition(" ")
        if last and _is_hex_word(last):
            s = head
            continue
        break
    return s or whole


# ---------------------------------------------------------------- statistics


def percentile(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank p-th percentile (0 < p ≤ 100) of `values`; None if there are none."""
    xs = sorted(values)
    if not xs:
        return None
    rank = max(1, math.ceil(round(p / 100 * len(xs), 9)))
    return xs[min(rank, len(xs)) - 1]


def median(values: Iterable[float]) -> float | None:
    """The nearest-rank p50: the lower middle value for an even count."""
    return percentile(values, 50)


def round_mem_gb(gb: float) -> float:
    """Up to 256 MB steps below 1 GB, up to 0.1 GB from there: 0.3 → 0.5, 1.38 → 1.4, 2.3 → 2.3."""
    if gb <= 0:
        return 0.25
    if gb < 1:
        return math.ceil(round(gb * 4, 6)) / 4
    return math.ceil(round(gb * 10, 6)) / 10


def round_for_s(seconds: float) -> int:
    """Up to a whole minute, at least one: the --for a person types."""
    return max(60, math.ceil(round(seconds / 60, 6)) * 60)


def round_est_s(seconds: float) -> int:
    """Up to ten seconds, at least ten: a learned estimate nobody types, kept close to the runs so
    backfill can place a 3 s job in a 20 s gap (a job past its estimate is never stopped for it)."""
    return max(10, math.ceil(round(seconds / 10, 6)) * 10)


def suggest_mem_gb(peak_gb: float, killed: bool) -> float:
    """The --mem to ask for next, from a peak (or the limit a run was killed at, `killed`)."""
    return round_mem_gb(peak_gb * (KILLED_FACTOR if killed else MEM_FACTOR))


def mem_flag(gb: float) -> str:
    """A --mem value that parses back to `gb`: 512M below 1 GB, else 1.4G / 12G."""
    if gb < 1:
        return f"{round(gb * 1024)}M"
    return f"{gb:.1f}".rstrip("0").rstrip(".") + "G"


def for_flag(seconds: int) -> str:
    """A --for value: whole minutes, or hours when it is a whole number of them (90m, 2h)."""
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


# ---------------------------------------------------------------- rows


class Suggestion(NamedTuple):
    project: str
    kind: str
    n: int  # counted runs
    mem_gb: float | None  # suggested --mem (None: fewer than MIN_RUNS known peaks)
    est_s: int | None  # suggested --for (None: fewer than MIN_RUNS runs)
    peak_p95_gb: float | None
    dur_p90_s: float | None
    killed: int  # runs killed at their memory limit (counted with the limit as peak)


class HistRow(NamedTuple):
    project: str
    kind: str
    n: int
    req_gb: float | None  # median request (--mem)
    peak_p50_gb: float | None
    peak_p95_gb: float | None
    est_s: float | None  # median estimate (--for)
    dur_p50_s: float | None
    dur_p90_s: float | None
    killed: int
    suggestion: Suggestion | None


def _phase(rec) -> str:
    return getattr(rec.phase, "value", rec.phase)


def counted(rec: "JobRecord") -> bool:
    """Does this record say something about what its kind of work needs? (module docstring)"""
    return (_phase(rec) == "done" and rec.request.kind == "job" and rec.started is not None
            and rec.ended is not None and rec.ended >= rec.started and not rec.stop_reason
            and rec.outcome not in _NOT_COUNTED)


def killed_at_limit(rec: "JobRecord") -> bool:
    return rec.outcome == "memory_limit"


def peak_of(rec: "JobRecord") -> float | None:
    """The run's peak in GB: its limit if it was killed at it, else the recorded peak (or None)."""
    if killed_at_limit(rec):
        return rec.request.mem_gb
    return rec.peak_gb


def _row(project: str, kind: str, recs: list["JobRecord"]) -> HistRow:
    peaks = [p for p in (peak_of(r) for r in recs) if p is not None]
    durs = [r.ended - r.started for r in recs]
    killed = sum(1 for r in recs if killed_at_limit(r))
    n = len(recs)
    p95, p90 = percentile(peaks, 95), percentile(durs, 90)
    sugg = None
    if n >= MIN_RUNS:
        at_limit = any(killed_at_limit(r) and r.request.mem_gb >= p95 for r in recs) if peaks else False
        mem = suggest_mem_gb(p95, at_limit) if len(peaks) >= MIN_RUNS else None
        est = round_for_s(p90 * FOR_FACTOR)
        sugg = Suggestion(project, kind, n, mem, est, p95 if mem is not None else None, p90, killed)
    return HistRow(project, kind, n, median(r.request.mem_gb for r in recs), median(peaks), p95,
                   median(r.request.est_s for r in recs), median(durs), p90, killed, sugg)


def _groups(records: Iterable["JobRecord"]) -> dict[tuple[str, str], list["JobRecord"]]:
    seen: set[str] = set()
    groups: dict[tuple[str, str], list] = {}
    for rec in records:
        rid = rec.request.id
        if rid in seen or not counted(rec):  # a record both live and in history counts once
            continue
        seen.add(rid)
        groups.setdefault((rec.request.project, title_kind(rec.request.title)), []).append(rec)
    return groups


def hist_rows(records: Iterable["JobRecord"], project: str | None = None) -> list[HistRow]:
    """One row per (project, title kind) of the counted runs, by project then kind; only `project`'s
    if given."""
    groups = _groups(r for r in records if project is None or r.request.project == project)
    return [_row(p, k, recs) for (p, k), recs in sorted(groups.items())]


def suggestion_for(records: Iterable["JobRecord"], project: str, title: str) -> Suggestion | None:
    """The suggestion for a new request with this project and title, if its kind has one."""
    kind = title_kind(title)
    got = _groups(r for r in records if r.request.project == project).get((project, kind))
    return _row(project, kind, got).suggestion if got else None


def oversized(request_mem_gb: float, request_est_s: float, suggestion: Suggestion | None) -> tuple[bool, bool]:
    """(asks for more than HINT_FACTOR × the suggested memory, … × the suggested duration)."""
    if suggestion is None:
        return False, False
    s = suggestion
    return (s.mem_gb is not None and request_mem_gb > HINT_FACTOR * s.mem_gb,
            s.est_s is not None and request_est_s > HINT_FACTOR * s.est_s)


# ---------------------------------------------------------------- what the gate learns


def cpus_used(recs: list["JobRecord"]) -> float | None:
    """The CPUs these runs kept busy: the p90 of CPU time ÷ duration over runs that recorded their CPU
    time and lasted at least MIN_CPU_RUN_S, rounded up to half a CPU (at least half). No margin: a CPU
    guessed low is shared a little slower, never a kill. None when no run says."""
    rates = [r.cpu_s / (r.ended - r.started) for r in recs
             if getattr(r, "cpu_s", None) is not None and r.ended - r.started >= MIN_CPU_RUN_S]
    p90 = percentile(rates, 90)
    return None if p90 is None else max(0.5, math.ceil(round(p90 * 2, 6)) / 2)


def learned(records: Iterable["JobRecord"], heavy_mem_gb: float, heavy_minutes: float, fingerprint_of) -> dict[str, dict[str, list]]:
    """project -> command fingerprint (core.gate) -> [mem_gb to ask, est_s, heavy, runs, cpus or None,
    the p95 peak (GB) itself: what a job of it books, × the policy's margin, DESIGN §5.1],
    for the gate (DESIGN §5.8) and `--mem/--cpus/--for auto` (core/sizing.py, §5.9): what this
    project's finished runs of that command needed. Heavy: a run peaked over `heavy_mem_gb` or ran
    over `heavy_minutes`. The size is the suggestion's rule (p95 peak × 1.15, × 1.5 over a limit a run
    was killed at; p90 duration × 1.5; `cpus_used`) over every counted run, even fewer than MIN_RUNS:
    one run of this very command says more than the table's guess, and an auto-sized job killed at
    its limit is started again once, bigger (never low twice)."""
    groups: dict[tuple[str, str], list] = {}
    for rec in records:
        if not counted(rec):
            continue
        fp = fingerprint_of(rec.request.cmd)
        if fp:
            groups.setdefault((rec.request.project, fp), []).append(rec)
    out: dict[str, dict[str, list]] = {}
    for (project, fp), recs in groups.items():
        peaks = [p for p in (peak_of(r) for r in recs) if p is not None]
        durs = [r.ended - r.started for r in recs]
        if not peaks or not durs:
            continue
        p95 = percentile(peaks, 95)
        killed = any(killed_at_limit(r) and r.request.mem_gb >= p95 for r in recs)  # the p95 is a limit it died at
        heavy = max(peaks) > heavy_mem_gb or max(durs) > heavy_minutes * 60
        mem = suggest_mem_gb(p95, killed)
        est = round_est_s(percentile(durs, 90) * FOR_FACTOR)
        out.setdefault(project, {})[fp] = [mem, est, heavy, len(recs), cpus_used(recs), round(p95, 4)]
    return out
