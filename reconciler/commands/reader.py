"""When the reader of a command's output went away (`res status | head`): no "Broken pipe" line, no
traceback, the shell's code for it. Import-light: entry.py's quick paths use it too."""
from __future__ import annotations

import os
import sys


def reader_gone() -> int:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more is written to it
    except OSError:
        pass
    return 141
