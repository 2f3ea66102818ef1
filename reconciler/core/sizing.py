"""The sizes res chooses (DESIGN §5.9): `res run --mem auto --cpus auto --for auto`, and what the gate
books for a heavy line (core/gate.py). Pure.

For each command a job runs (its argv; each command of a `bash -c LINE`), in this order:

1. history: this project's finished runs of the same command fingerprint (core/shellline.fingerprint),
   as core/hist.learned sums them up: p95 peak × 1.15 (× 1.5 over a limit a run was killed at), p90
   duration × 1.5, the CPUs the runs kept busy (p90);
2. the gate's table (policies/heavy.toml and the policy's gate_heavy_add): that tool's default;
3. the policy's auto_mem_gb, auto_cpus, auto_minutes.

A line of several commands gets the most memory and CPUs any of them needs and their durations one
after the other. Every size says where it came from (`source`), and `res run` prints it.

Import-light (the gate's hot path): the shell line's reading (core/shellline.py), nothing else.
"""
from __future__ import annotations

import posixpath
from collections import namedtuple

from reconciler.core.shellline import SHELLS, Tool, Unreadable, fingerprint, match_tool, program_of, simple_commands

TYPE_CHECKING = False  # typing's flag without typing (`res hook` imports this module; typing costs it ~3 ms)
if TYPE_CHECKING:
    from reconciler.core.rules import Rules

MAX_EST_S = 365 * 86400
_NOT_WORK = frozenset({"cd", "echo", "true", "export", "set", "source", ".", "pwd", "printf"})


# (collections.namedtuple, not typing.NamedTuple: `res hook` imports this module, and typing costs it ~3 ms)
# A size: mem_gb (float), cpus (float), est_s (int), source (str: "12 earlier runs of make test", "the
# table's entry for pytest", "the policy's default"), runs (int: earlier runs it was learned from; 0:
# not from history), key (str: the fingerprint history knows it by, or the table's key).
Size = namedtuple("Size", "mem_gb cpus est_s source runs key", defaults=(0, ""))
# One fingerprint's entry in what history learned (core/hist.learned, gate.json): mem_gb (float),
# est_s (int), heavy (bool), runs (int), cpus (float | None), peak_gb (float | None: the p95 peak
# itself, what a book is made from).
Seen = namedtuple("Seen", "mem_gb est_s heavy runs cpus peak_gb", defaults=(None,))


def seen_entry(value: object) -> Seen | None:
    """A learned entry as the loop publishes it ([mem_gb, est_s, heavy, runs] and, since CPUs are
    learned, cpus or null, and since books are, the p95 peak), or None when it is not one (a
    hand-edited or older gate.json)."""
    if not isinstance(value, (list, tuple)) or len(value) not in (4, 5, 6):
        return None
    mem, est, heavy, runs = value[:4]
    cpus = value[4] if len(value) >= 5 else None
    peak = value[5] if len(value) == 6 else None
    if not (type(mem) in (int, float) and 0 < mem <= 65536 and type(est) in (int, float) and 0 < est <= MAX_EST_S
            and type(heavy) is bool and type(runs) is int and runs >= 0):
        return None
    if cpus is not None and not (type(cpus) in (int, float) and 0 < cpus <= 4096):
        return None
    if peak is not None and not (type(peak) in (int, float) and 0 < peak <= 65536):
        return None
    return Seen(float(mem), int(est), heavy, runs, None if cpus is None else float(cpus),
                None if peak is None else float(peak))


def commands_of(cmd: list[str]) -> list[list[str]]:
    """What a job's argv runs: the commands of a `bash -c LINE` (less `cd`, `echo` and the like), else
    the argv itself; wrappers taken off (core/shellline.program_of). Unreadable when it cannot be told."""
    if len(cmd) >= 3 and posixpath.basename(cmd[0]) in SHELLS and cmd[1] == "-c":
        found = [program_of(w) for w in simple_commands(cmd[2])]
        return [c for c in found if c and posixpath.basename(c[0]) not in _NOT_WORK]
    command = program_of(list(cmd))
    return [command] if command else []


def _runs(n: int) -> str:
    return f"{n} earlier run{'s' if n != 1 else ''}"


def command_size(command: list[str], learned: dict | None, table: tuple[Tool, ...]) -> tuple[Size, bool] | None:
    """(the size of one command, heavy?) from history or the table; None when neither knows it.
    Heavy (for the gate): in the table, or history saw it pass heavy_mem_gb / heavy_minutes."""
    fp = fingerprint(command)
    seen = seen_entry((learned or {}).get(fp))
    tool = match_tool(command, table)
    if seen is not None:
        cpus = seen.cpus if seen.cpus is not None else (tool.cpus if tool else None)
        size = Size(seen.mem_gb, cpus if cpus is not None else 0.0, seen.est_s, f"{_runs(seen.runs)} of {fp}", seen.runs, fp)
        return size, seen.heavy or tool is not None
    if tool is not None:
        return Size(tool.mem_gb, tool.cpus, tool.est_s, f"the table's entry for {tool.key}", 0, tool.key), True
    return None


def combined(sizes: list[Size], default: Size) -> Size:
    """One size for a line of several commands: the most memory and CPUs, the durations in a row; the
    source of the one that needs the most memory. A CPU count history did not learn (0) is the default's."""
    if not sizes:
        return default
    top = max(sizes, key=lambda s: s.mem_gb)
    cpus = max(s.cpus for s in sizes) or default.cpus
    return Size(top.mem_gb, cpus, min(sum(s.est_s for s in sizes), MAX_EST_S), top.source, top.runs, top.key)


def size_for(cmd: list[str], learned: dict | None, table: tuple[Tool, ...], default: Size) -> Size:
    """The size of a job running `cmd` in a project whose history is `learned` (fingerprint -> entry):
    history, else the table, else `default` (the policy's auto_* keys)."""
    try:
        commands = commands_of(cmd)
    except Unreadable:
        return default
    sizes = [known[0] for known in (command_size(c, learned, table) for c in commands) if known is not None]
    return combined(sizes, default)


def policy_default(policy: Rules) -> Size:
    """The size of a command neither history nor the table knows: the policy's auto_* keys."""
    return Size(float(policy.auto_mem_gb), float(policy.auto_cpus), max(1, int(round(policy.auto_minutes * 60))),
                "the policy's default")


BOOK_RUNS = 3  # finished runs of a command before a job of it is booked below its cap (DESIGN §5.1)


# What a job books: gb (float), source (str: "5 runs of make test").
Book = namedtuple("Book", "gb source")


def book_for(cmd: list[str], learned: dict | None, margin: float) -> Book | None:
    """What a job running `cmd` books (DESIGN §5.1): the most any of its commands peaked at in this
    project (their p95 peak, core/hist.learned) × `margin`, once each of them has BOOK_RUNS finished
    runs; None (booked at its cap) when one of them has fewer, or the line cannot be read. The caller
    keeps it under the job's cap."""
    try:
        commands = commands_of(cmd)
    except Unreadable:
        return None
    if not commands:
        return None
    top: tuple[float, Seen, str] | None = None
    for command in commands:
        fp = fingerprint(command)
        seen = seen_entry((learned or {}).get(fp))
        if seen is None or seen.peak_gb is None or seen.runs < BOOK_RUNS:
            return None
        if top is None or seen.peak_gb > top[0]:
            top = (seen.peak_gb, seen, fp)
    peak, seen, fp = top
    return Book(round(peak * margin, 3), f"{seen.runs} runs of {fp}")
