"""Where res keeps its state, as a string (DESIGN §4): RES_STATE_DIR, else $XDG_STATE_HOME/res, else
~/.local/state/res. The one home of that rule; os.path only, for the hot paths (`res hook`, `res
status`) that do not import pathlib. config/paths.py wraps it in a Path."""
from __future__ import annotations

import os


def state_root(environ) -> str:
    root = environ.get("RES_STATE_DIR")
    if root:
        return root
    base = environ.get("XDG_STATE_HOME")
    if not base:
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "res")
