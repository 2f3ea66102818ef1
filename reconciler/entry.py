"""The `res` console script. `res hook` runs before every agent Bash command, so it is dispatched
here, before the command line (argparse, the units, pathlib) is even imported."""
from __future__ import annotations

import sys


def main() -> int:
    if sys.argv[1:] == ["hook"]:
        from reconciler.commands.hook import run

        return run()
    from reconciler.cli import main as cli_main

    return cli_main()
