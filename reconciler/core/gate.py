"""The gate (DESIGN §5.8): which shell lines are heavy work, what to book for them, and what the hook
does with them. Pure: text and tables in, decisions out; the hook (commands/hook.py), the shims and
the loop's answer to "would this fit?" (loop/serve.py) do the I/O.

    judge(line, table, learned)        -> Heavy | None          (None: the line passes unchanged)
    verdict(heavy, answer, wait_s)     -> ("rewrite" | "deny" | "pass", why)
    rewritten(res, heavy, line, ...)   -> the line that runs it through `res run --wait`

A line is heavy when one of its simple commands is in the table (policies/heavy.toml plus the
policy's gate_heavy_add, less gate_heavy_remove), or when history learned that this command, in this
project, peaked over heavy_mem_gb or ran over heavy_minutes. Compound lines (`cd x && make test`,
`timeout 600 pytest -x | tail`, `A=1 uv run pytest`) are understood: wrappers are seen through, and
the WHOLE line runs as the job, so its output and exit code are the line's own.

Lines the gate cannot read for sure pass unchanged: here-documents, `case`, a program that is itself
a substitution (`$(…)`, backticks), unbalanced quotes, anything in the background (`&`: the job would
end with its main process and take the background one with it), `sudo` (not the user's cgroup to
manage), and any line that already runs `res`.

The line is read by core/shellline.py (its simple commands, the program under the wrappers, the
fingerprint) and each command sized by core/sizing.py (history, else the table).

Import-light (shlex, posixpath): the hook runs this before every shell command an agent runs.
"""
from __future__ import annotations

import posixpath
import shlex
from collections import namedtuple

from reconciler.core.shellline import SHELLS, Tool, Unreadable, fingerprint, program_of, simple_commands
from reconciler.core.sizing import Size, combined, command_size, commands_of

# ---------------------------------------------------------------- the table


class TableError(ValueError):
    """One line naming the entry that is wrong."""


_SIZE_KEYS = ("mem_gb", "cpus", "minutes")
DEFAULT_SIZE = {"mem_gb": 2.0, "cpus": 2.0, "minutes": 10.0}  # an added entry that names no size


def _tool(key: object, spec: object, where: str) -> Tool:
    if not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise TableError(f"{where}: {key!r}: a key is a program and the words that follow it")
    words = tuple(key.split())
    if any(w.startswith("-") and w != words[-1] and not w.startswith("--") for w in words[:1]):
        raise TableError(f"{where}: {key!r}: must start with a program")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise TableError(f"{where}: {key!r}: must be a table like {{ mem_gb = 2, cpus = 2, minutes = 10 }}")
    unknown = sorted(set(spec) - set(_SIZE_KEYS))
    if unknown:
        raise TableError(f"{where}: {key!r}: unknown key {unknown[0]!r} (mem_gb, cpus, minutes)")
    size = dict(DEFAULT_SIZE)
    for k, v in spec.items():
        if type(v) not in (int, float) or not (0 < v <= {"mem_gb": 65536, "cpus": 4096, "minutes": 525600}[k]):
            raise TableError(f"{where}: {key!r}: {k} must be a number above 0 (got {v!r})")
        size[k] = float(v)
    return Tool(" ".join(words), words, max(size["mem_gb"], 0.0625), max(size["cpus"], 0.01),
                max(int(round(size["minutes"] * 60)), 1))


def make_table(shipped: object, add: object = None, remove: object = None) -> tuple[Tool, ...]:
    """The effective table: the shipped `[heavy]` entries, the policy's additions (which win on the
    same key), less the keys the policy removes. Longest keys first, so `cargo test` is tried before
    a bare `cargo` entry a policy may add. TableError names the first bad entry."""
    tools: dict[str, Tool] = {}
    for where, entries in (("heavy.toml", shipped), ("gate_heavy_add", add)):
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise TableError(f"{where}: must be a table of commands")
        for key, spec in entries.items():
            t = _tool(key, spec, where)
            tools[t.key] = t
    if remove is not None:
        if not isinstance(remove, (list, tuple)) or not all(isinstance(k, str) for k in remove):
            raise TableError("gate_heavy_remove: must be a list of keys")
        for key in remove:
            tools.pop(" ".join(key.split()), None)
    return tuple(sorted(tools.values(), key=lambda t: (-len(t.words), t.key)))


def table_data(table: tuple[Tool, ...]) -> dict:
    """The table as the loop publishes it (gate.json), read back by `make_table(data)`."""
    return {t.key: {"mem_gb": t.mem_gb, "cpus": t.cpus, "minutes": t.est_s / 60} for t in table}


# ---------------------------------------------------------------- judging a line


# Not `-v`: for pytest, tox and mocha it is --verbose (a whole run); a `make -v` sent through res costs
# a tiny job, a test run let past the gate costs the crowd.
_ASKS_ONLY = frozenset({"--version", "-V", "--help", "-h", "version", "help"})


# A heavy line: fingerprint (str: of its heaviest command, its title kind in the history), mem_gb
# (float: the most any of its heavy commands books), cpus (float), est_s (int: the heavy commands'
# estimates, one after the other), source (str: "table: pytest", "history: 5 runs of make e2e"),
# guessed (bool: from the table, not from this project's own runs).
Heavy = namedtuple("Heavy", "fingerprint mem_gb cpus est_s source guessed")


def judge(line: str, table: tuple[Tool, ...], learned: dict | None = None) -> Heavy | None:
    """Heavy, or None: light, already `res`, or not read for sure (Unreadable is caught here).
    `learned`: fingerprint -> [mem_gb, est_s, heavy, runs] from this project's history (the loop
    publishes it, gate.json)."""
    try:
        commands = [program_of(words) for words in simple_commands(line)]
    except Unreadable:
        return None
    found: list[tuple[Size, str]] = []  # (size, fingerprint) of each heavy command
    for command in commands:
        if not command:
            continue
        name = posixpath.basename(command[0])
        if name == "res":
            return None  # the agent asks res itself: never twice
        if name in SHELLS and "-c" in command[1:2]:
            return None  # `bash -c '…'`: its own line, not read twice over
        if command[1:] and set(command[1:]) <= _ASKS_ONLY:
            continue  # `make --version`, `cargo help`: a question to the tool, not work
        known = command_size(command, learned, table)
        if known is not None and known[1]:
            found.append((known[0], fingerprint(command)))
    if not found:
        return None
    size = combined([s for s, _ in found], Size(0.0, DEFAULT_SIZE["cpus"], 0, ""))
    top_size, top_fp = max(found, key=lambda f: f[0].mem_gb)
    source = (f"history: {top_size.runs} run{'s' if top_size.runs != 1 else ''} of {top_size.key}" if top_size.runs
              else f"table: {top_size.key}")
    return Heavy(top_fp, size.mem_gb, size.cpus, size.est_s, source, any(not s.runs for s, _ in found))


def line_fingerprint(cmd: list[str]) -> str | None:
    """The fingerprint history files a finished job under: its one command (a gated job's line,
    `bash -c LINE`, read as the gate reads it; else its own argv). None when nothing in it can be
    read, or a line runs several commands (which one needed the memory is not known)."""
    try:
        commands = commands_of(list(cmd))
    except Unreadable:
        return None
    return (fingerprint(commands[0]) or None) if len(commands) == 1 else None


# ---------------------------------------------------------------- the decision


def verdict(answer: dict | None, wait_s: float, now: float) -> tuple[str, str | None]:
    """What the hook does with a heavy line, given the loop's answer to "would it fit?" (None: no loop
    answered): ("rewrite", None) when it fits now or is expected to within `wait_s` (or nobody can
    tell: `res run --start-within` then keeps the promise), ("deny", busy line) when it would wait
    longer, ("pass", None) when res itself is not usable (the agent's command runs as it would have)."""
    if answer is None:
        return "rewrite", None
    fits = answer.get("fits")
    if fits == "now":
        return "rewrite", None
    if fits == "later":
        start = answer.get("start")
        if start is None:  # holders overdue: could be any moment; the wait is bounded anyway
            return "rewrite", None
        if type(start) in (int, float) and start - now <= wait_s:
            return "rewrite", None
        return "deny", str(answer.get("line") or "busy")
    if fits == "unknown":
        return "deny", str(answer.get("line") or "busy")
    return "pass", None


def rewritten(res: list[str], heavy: Heavy, line: str, wait_s: float, shell: str = "bash",
              max_duration_s: int | None = None, by: str | None = None) -> str:
    """The line that runs `line` as a res job: `res run --wait --queue --start-within …` with the
    booked size (not enforced when guessed), the whole line under `shell -c`, in the same directory,
    with its own output and exit code."""
    gb = heavy.mem_gb
    mem = f"{int(round(gb * 1024))}M" if gb < 1 else f"{gb:g}G"
    args = [*res, "run", "--wait", "--queue", "--start-within", f"{max(int(wait_s), 1)}s",
            "--mem", mem, "--cpus", f"{heavy.cpus:g}", "--for", f"{max(heavy.est_s, 1)}s", "--gated"]
    if max_duration_s:
        args += ["--max-duration", f"{max_duration_s}s"]
    if by:
        args += ["--by", by]
    args += ["--title", _title(line), "--", shell, "-c", line]
    return shlex.join(args)


def _title(line: str) -> str:
    text = " ".join(line.split())
    return text if len(text) <= 120 else text[:119] + "…"
