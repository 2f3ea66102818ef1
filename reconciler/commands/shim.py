"""The gate for agents without hooks (aider, cursor-agent, opencode, a plain shell): `res shell-init
--shims` makes one small wrapper per heavy tool of the table (pytest, make, cargo, npm, …) in
`<state dir>/shims` and prints the PATH line that puts them first. A wrapper runs

    res shim NAME ARGS…

which judges `NAME ARGS…` as `res hook` judges a line (core/gate.py), and then runs the real NAME
(the next one on PATH after the shims) itself, through `res run --wait …` (heavy, fits now or within
gate_wait_s), or not at all (heavy, would wait longer: the busy line on stderr, exit 3). Inside a res
job (`RES_ID` set), light commands and anything that goes wrong: the real program, straight through,
with its own arguments, output and exit code.

Import-light on the way through: os, sys, shlex and the gate's own modules.
"""
from __future__ import annotations

import os
import sys

SHIM = """#!/bin/sh
# res shim (res shell-init --shims): the gate for agents without hooks; straight through inside a job
[ -n "$RES_ID" ] && {{ PATH=$(printf %s "$PATH" | sed 's|{dir}:||g'); exec {name} "$@"; }}
exec {res} shim {name} "$@"
"""
EXIT_BUSY = 3


def real_program(name: str, path: str, shim_dir: str) -> str | None:
    """The NAME a shell would run were the shims not on PATH."""
    skip = os.path.realpath(shim_dir)
    for d in path.split(os.pathsep):
        if not d or os.path.realpath(d) == skip:
            continue
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def shim_dir(environ) -> str:
    from reconciler.commands.hook import state_dir

    return os.path.join(state_dir(environ), "shims")


def run(argv: list[str], environ=os.environ) -> int:
    """`res shim NAME ARGS…`: exec the real NAME, or res run, or say busy. Returns only on a refusal
    or when the real program is nowhere (127, as a shell says)."""
    if not argv:
        print("res: shim: which program?", file=sys.stderr)
        return 2
    name, args = argv[0], argv[1:]
    here = shim_dir(environ)
    real = real_program(os.path.basename(name), environ.get("PATH", ""), here)
    if real is None:
        print(f"res: shim: {name}: command not found (besides the shim in {here})", file=sys.stderr)
        return 127
    try:
        decided = _decide(real, args, environ)  # (inside a job, RES_ID: no opinion)
    except Exception:  # noqa: BLE001 - the gate never gets in the way
        decided = None
    if decided is not None and decided[0] == "deny":
        print(decided[1], file=sys.stderr)
        return EXIT_BUSY
    if decided is not None and decided[0] == "note":  # (the loop did not answer: it runs as it is)
        print(decided[1], file=sys.stderr)
    elif decided is not None:
        import shlex

        words = shlex.split(decided[1])
        os.execv(words[0], words)
    os.execv(real, [real, *args])
    return 127  # not reached


def _decide(real: str, args: list[str], environ) -> tuple | None:
    import shlex
    import time

    from reconciler.commands.hook import gate
    from reconciler.core.hooks import Call

    line = shlex.join([real, *args])
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    return gate(Call("shell", line, cwd, {"command": line}, None, None), environ, time.time())


def install(environ, res: list[str], table_keys) -> tuple[str, list[str]]:
    """(the shims' directory, the programs given a shim): one wrapper per first word of the table's
    keys, made anew (old ones not in the table any more removed)."""
    import re

    here = shim_dir(environ)
    os.makedirs(here, mode=0o700, exist_ok=True)
    names = sorted({k.split()[0] for k in table_keys if re.fullmatch(r"[A-Za-z0-9._+-]+", k.split()[0])})
    for old in os.listdir(here):
        if old not in names:
            os.unlink(os.path.join(here, old))
    import shlex

    for name in names:
        text = SHIM.format(dir=here, name=name, res=shlex.join(res))
        path = os.path.join(here, name)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return here, names


def shell_init_shims(environ, res: list[str]) -> str:
    """The lines `eval "$(res shell-init --shims)"` runs: the shims made, and first on PATH."""
    import shlex

    from reconciler.config import gatefile

    here, names = install(environ, res, gatefile.load(os.path.dirname(shim_dir(environ)))["table"].keys())
    return (f"# res: shims for {len(names)} heavy tools ({', '.join(names[:6])}, …) first on PATH\n"
            f"export PATH={shlex.quote(here)}:\"$PATH\"")
