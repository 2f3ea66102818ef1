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

Import-light (shlex, posixpath): the hook runs this before every shell command an agent runs.
"""
from __future__ import annotations

import posixpath
import shlex
from collections import namedtuple

# ---------------------------------------------------------------- the table


# (collections.namedtuple, not typing.NamedTuple: `res hook` imports this module, and typing costs it ~3 ms)
# A table entry: key (str, as written: "cargo test", "npm run test*"), words (tuple[str, ...]:
# ("cargo", "test")), mem_gb (float), cpus (float), est_s (int).
Tool = namedtuple("Tool", "key words mem_gb cpus est_s")


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


# ---------------------------------------------------------------- reading a shell line


class Unreadable(Exception):
    """The gate cannot tell for sure what the line runs: it passes unchanged."""


_OPERATORS = frozenset({"&&", "||", ";", "|", "|&", "\n", ";;", "(", ")"})
_REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<>"})
_GROUPING = frozenset({"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"})
_NEVER = frozenset({"case", "esac", "function", "select", "coproc"})
MAX_LINE = 16384  # longer lines are not read (they pass)


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command in `line`, redirections dropped. Unreadable for what the
    gate does not read for sure (see the module's doc)."""
    if len(line) > MAX_LINE or "<<" in line or "`" in line:
        raise Unreadable("here-document, backticks or a very long line")
    lex = shlex.shlex(line, posix=True, punctuation_chars="();<>|&\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        tokens = list(lex)
    except ValueError as e:  # "No closing quotation", "No escaped character"
        raise Unreadable(str(e)) from None
    out: list[list[str]] = []
    words: list[str] = []
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
            continue
        if tok in _REDIRECTS or (tok and set(tok) <= set("<>&|") and tok not in _OPERATORS and tok != "&"):
            if tok not in _REDIRECTS:
                raise Unreadable(f"operator {tok!r}")
            if words and words[-1].isdigit():
                words.pop()  # `2>&1`: the 2 is the redirection's, not an argument
            skip_next = True
            continue
        if tok == "&":
            raise Unreadable("runs something in the background")
        if tok in _OPERATORS:
            if words:
                out.append(words)
            words = []
            continue
        words.append(tok)
    if skip_next:
        raise Unreadable("a redirection without its target")
    if words:
        out.append(words)
    return out


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[0].isdigit()


def _skip_options(words: list[str], i: int, with_value: frozenset[str]) -> int:
    """Past the options at words[i:]: `-x`, `--long`, `--long=v`, and `-k V` for those in `with_value`."""
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            return i + 1
        i += 2 if words[i] in with_value else 1
    return i


_TIMEOUT_VALUED = frozenset({"-s", "--signal", "-k", "--kill-after"})
_NICE_VALUED = frozenset({"-n", "--adjustment"})
_IONICE_VALUED = frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"})
_STDBUF_VALUED = frozenset({"-i", "-o", "-e"})
_XVFB_VALUED = frozenset({"-s", "--server-args", "-n", "--server-num", "-e", "--error-file", "-f", "--auth-file",
                          "-p", "--xauth-protocol", "-w", "--wait"})
_ENV_VALUED = frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"})
_UV_VALUED = frozenset({"--with", "--python", "-p", "--extra", "--group", "--project", "--directory", "--env-file",
                        "--package", "--with-requirements", "--index", "--index-url", "--from"})
_RUNNERS = {  # program -> the word after which a command follows ("" : right after the program's options)
    "uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run", "rye": "run",
    "bundle": "exec", "pnpm": "exec", "yarn": "exec", "npm": "exec", "conda": "run", "mamba": "run",
}
_DIRECT = {"npx": _UV_VALUED, "bunx": frozenset(), "pnpx": frozenset(), "xvfb-run": _XVFB_VALUED,
           "timeout": _TIMEOUT_VALUED, "nice": _NICE_VALUED, "ionice": _IONICE_VALUED, "stdbuf": _STDBUF_VALUED,
           "nohup": frozenset(), "command": frozenset(), "exec": frozenset(), "env": _ENV_VALUED,
           "chrt": frozenset(), "taskset": frozenset(), "time": frozenset(), "caffeinate": frozenset(),
           "systemd-inhibit": frozenset(), "ccache": frozenset(), "dotenv": frozenset({"-f", "--file"})}
_PYTHONS = ("python", "python3", "pypy", "pypy3")
SHELLS = frozenset({"bash", "sh", "zsh", "dash"})


def program_of(words: list[str]) -> list[str]:
    """The command a simple command runs, wrappers and assignments taken off: `A=1 timeout 600 uv run
    python -m pytest -x` -> [pytest, -x]. Unreadable for `sudo` and for a program that is a
    substitution; [] for a bare assignment."""
    i = 0
    for _ in range(16):  # wrappers inside wrappers, a bounded number of times
        while i < len(words) and (_is_assignment(words[i]) or words[i] in _GROUPING):
            i += 1
        if i >= len(words):
            return []
        prog = words[i]
        name = posixpath.basename(prog)
        if "$(" in prog or "${" in prog or prog.startswith("$"):
            raise Unreadable("the program is a substitution")
        if name in ("sudo", "doas", "su", "pkexec", "runuser"):
            raise Unreadable("runs as another user")
        if name in _NEVER:
            raise Unreadable(f"{name} is not read")
        if name == "timeout":
            i = _skip_options(words, i + 1, _TIMEOUT_VALUED) + 1  # and its DURATION
            continue
        if name in ("chrt", "taskset"):
            i = _skip_options(words, i + 1, frozenset()) + 1  # priority / mask
            continue
        if name in _DIRECT:
            i = _skip_options(words, i + 1, _DIRECT[name])
            if name == "env":
                while i < len(words) and _is_assignment(words[i]):
                    i += 1
            continue
        if name in _RUNNERS and i + 1 < len(words):
            j = _skip_options(words, i + 1, _UV_VALUED)
            if j < len(words) and words[j] == _RUNNERS[name]:
                i = _skip_options(words, j + 1, _UV_VALUED)
                continue
        if _python_name(name):  # `python3 -u -m pytest -x` -> [pytest, -x]
            j = i + 1
            while j < len(words) and words[j].startswith("-") and words[j] not in ("-m", "-c", "-"):
                j += 2 if words[j] in ("-W", "-X") else 1
            if j + 1 < len(words) and words[j] == "-m":
                return words[j + 1:]
            return words[i:]
        return words[i:]
    raise Unreadable("too many wrappers")


def _python_name(name: str) -> bool:
    """python, python3, python3.12, pypy3: an interpreter that takes `-m MODULE`."""
    for p in _PYTHONS:
        if name.startswith(p) and all(c.isdigit() or c == "." for c in name[len(p):]):
            return True
    return False


def _word_matches(pattern: str, word: str) -> bool:
    return word.startswith(pattern[:-1]) if pattern.endswith("*") and len(pattern) > 1 else word == pattern


def match_tool(command: list[str], table: tuple[Tool, ...]) -> Tool | None:
    """The table's entry for a command (wrappers already off), or None."""
    if not command:
        return None
    name = posixpath.basename(command[0])
    for tool in table:
        if tool.words[0] != name:
            continue
        i, ok = 1, True
        for want in tool.words[1:]:
            while i < len(command) and command[i] != want and command[i][:1] in ("-", "+"):
                i += 1
            if i >= len(command) or not _word_matches(want, command[i]):
                ok = False
                break
            i += 1
        if ok:
            return tool
    return None


# ---------------------------------------------------------------- fingerprints

_HEXCH = frozenset("0123456789abcdefABCDEF")
# Short options that take the next word as their value in the common runners (pytest -n/-k/-p/-m,
# make -j/-C/-f/-o, …): that word is not a target.
_VALUED_SHORT = frozenset({"-n", "-k", "-p", "-m", "-j", "-C", "-f", "-o", "-c", "-r", "-t", "-W", "-X"})


def _target_word(word: str) -> bool:
    """A word that names what to do (`test`, `e2e`, `build:prod`), not a path, file, number or hash."""
    if not word or word[0] in "-+./~$" or "/" in word or "=" in word or len(word) > 40:
        return False
    if "." in word and not word.startswith("test"):  # files: test_x.py, setup.cfg
        return False
    if word.isdigit() or (len(word) >= 7 and set(word) <= _HEXCH):
        return False
    return True


# Commands whose further words only choose files, directories, packages or test ids (paths, node
# ids, `-timeout 9000s`): never a target.
_SELECTS_ONLY = frozenset({"pytest", "py.test", "go test", "go vet"})


def fingerprint(command: list[str]) -> str:
    """What identifies a command from run to run (DESIGN §5.9): the program's name and up to two target
    words, no paths, files, options or hashes. `make -j8 test` -> "make test"; `pytest tests/ -x` ->
    "pytest"; `npm run test:unit -- --watch=false` -> "npm run test:unit"."""
    if not command:
        return ""
    words = [posixpath.basename(command[0])]
    rest = command[1:]
    script = _script_of(words[0], rest)
    if script is not None:  # `python3 tools/gen.py all`: the script is the program ("python3 gen.py all")
        words.append(posixpath.basename(rest[script]))
        rest = rest[script + 1:]
    if words[0] in _SELECTS_ONLY:
        return words[0]  # `pytest tests/unit -x`, `pytest test_a.py::test_b`: what it runs, not what it is
    skip = False
    for w in rest:
        if w == "--":
            break
        if " ".join(words) in _SELECTS_ONLY:
            break  # `go test ./... -timeout 9000s`: packages and options, not targets
        if skip:  # the value of `-n auto`, `-k expr`, `-p plugin`, `-C dir`: not what to do
            skip = False
            continue
        if w in _VALUED_SHORT:
            skip = True
            continue
        if _target_word(w):
            words.append(w)
            if len(words) == 3:
                break
    return " ".join(words)


_INTERPRETERS = frozenset({"node", "deno", "ruby", "perl", "php", "Rscript", "julia", "lua", *SHELLS})


def _script_of(name: str, args: list[str]) -> int | None:
    """Where the script an interpreter runs is in `args` (its first word that is not an option), or
    None: not an interpreter, or it runs code given inline (`-c`, `-e`) or none."""
    if not (_python_name(name) or name in _INTERPRETERS):
        return None
    for i, w in enumerate(args):
        if w in ("-c", "-e", "--eval", "-"):
            return None
        if not w.startswith("-"):
            return i if not _is_assignment(w) else None
    return None


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
    from reconciler.core.sizing import Size, combined, command_size

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
    from reconciler.core.sizing import commands_of

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
