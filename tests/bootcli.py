"""The command line the tests' boot harnesses share (usermgr.py, slurmcluster.py, slurmnodes.py):
`python3 tests/HARNESS.py start DIR` prints the environment its clients need as `export` lines;
`stop DIR` stops what `start DIR` started."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str], start, stop) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(f"usage: {os.path.basename(argv[0])} start|stop DIR", file=sys.stderr)
        return 2
    base = Path(argv[2]).resolve()
    if argv[1] == "start":
        for k, v in start(base).items():
            print(f"export {k}={v}")
    else:
        stop(base)
    return 0
