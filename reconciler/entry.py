"""The `res` console script. `res hook` runs before every agent Bash command, so it is dispatched
here, before the command line (argparse, the units, pathlib) is even imported."""
from __future__ import annotations

import os
import sys


def main() -> int:
    if sys.argv[1:] == ["hook"]:
        from reconciler.commands.hook import run

        code = run()
    else:
        from reconciler.cli import main as cli_main

        code = cli_main()
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
