"""The `res` console script. `res hook` runs before every agent Bash command and agents poll `res
status`, so both are dispatched here, before the command line (argparse, the units, pathlib) is even
imported."""
from __future__ import annotations

import os
import sys


def _hook_agent(args: list[str]) -> tuple[bool, str | None]:
    """(`res hook` as an agent CLI calls it, the --agent it names): `hook`, `hook --agent X`, `hook --agent=X`."""
    if args[:1] != ["hook"]:
        return False, None
    rest = args[1:]
    if not rest:
        return True, None
    from reconciler.core.agentclis import CLIS  # the CLIs whose hooks res serves (`res hook` imports it anyway)

    if len(rest) == 2 and rest[0] == "--agent" and rest[1] in CLIS:
        return True, rest[1]
    if len(rest) == 1 and rest[0].startswith("--agent=") and rest[0][8:] in CLIS:
        return True, rest[0][8:]
    return False, None


def main() -> int:
    is_hook, agent = _hook_agent(sys.argv[1:])
    if is_hook:
        from reconciler.commands.hook import run

        code = run(agent)
    elif sys.argv[1:2] == ["shim"]:  # a shim of `res shell-init --shims`: before every heavy tool's run
        from reconciler.commands.shim import run as shim

        code = shim(sys.argv[2:])
    else:
        code, asked = None, False
        if sys.argv[1:2] == ["status"]:  # polled by agents: the loop's answer without the command line
            from reconciler.commands.status import quick

            try:
                code, asked = quick(sys.argv[2:])
            except BrokenPipeError:
                from reconciler.commands.reader import reader_gone

                code = reader_gone()
        if code is None:
            from reconciler.cli import main as cli_main

            code = cli_main(loop_unanswered=asked)
    code = code if isinstance(code, int) else (0 if code is None else 1)
    # Leave without the interpreter's teardown (freeing every module's objects: ~10 ms of a 70 ms
    # call, on the path of every agent command and of `res wait` to its caller) once what was
    # printed is out. Nothing of res runs at exit.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        return code  # the normal way out, which knows what to do with a closed pipe
    os._exit(code)
