"""Where the shipped files are: the checkout's top-level dirs (DESIGN §3), or their installed copies
inside the package (pyproject maps them there for a non-editable install)."""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent  # the package directory
_INSTALLED = {"policies": "policies", "templates/units": "templates/units", "templates/web": "templates/web",
              "state": "state_templates"}


def shipped(top: str) -> Path:
    """shipped('policies') -> the directory holding the default policy, wherever it was installed."""
    installed = _HERE / _INSTALLED[top]
    return installed if installed.is_dir() else _HERE.parent / top
