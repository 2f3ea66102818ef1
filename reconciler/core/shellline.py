"""A shell line, read (DESIGN §5.8, §5.9): the words of each simple command in it, the program a
command runs under its wrappers (`A=1 timeout 600 uv run python -m pytest -x` -> [pytest, -x]), the
entry of the gate's table it matches, and its fingerprint, what history files its runs under. Pure:
text in, words out. The gate (core/gate.py) judges lines with it and sizing (core/sizing.py) sizes
commands with it; both import it, neither the other's reading.

Lines it cannot read for sure raise Unreadable: here-documents, `case`, a program that is itself a
substitution (`$(…)`, backticks), unbalanced quotes, anything in the background (`&`), `sudo`.

Import-light (shlex, posixpath): the hook runs this before every shell command an agent runs.
"""
from __future__ import annotations

import posixpath
import shlex
from collections import namedtuple


# (collections.namedtuple, not typing.NamedTuple: `res hook` imports this module, and typing costs it ~3 ms)
# A table entry: key (str, as written: "cargo test", "npm run test*"), words (tuple[str, ...]:
# ("cargo", "test")), mem_gb (float), cpus (float), est_s (int).
Tool = namedtuple("Tool", "key words mem_gb cpus est_s")


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
