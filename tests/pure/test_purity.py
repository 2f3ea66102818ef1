"""The core is pure (DESIGN §3): every module under reconciler/core/ imports only other core modules and
the standard library's pure parts, and calls nothing that reads a clock, a time zone or a file. Walks
the source's AST, so it holds for code paths no other test runs."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "reconciler" / "core"

# Standard-library modules a rule may use: computation only, no I/O, no clock.
ALLOWED = {"__future__", "bisect", "collections", "dataclasses", "enum", "fnmatch", "functools", "hashlib", "heapq", "itertools",
           "json", "math", "operator", "posixpath", "re", "shlex", "signal", "statistics", "string", "tomllib", "types", "typing"}
# pydantic: the constraints on the model's fields, checked where data comes in (models.parse); it
# does no I/O.
ALLOWED_THIRD_PARTY = {"pydantic"}
# Calls that read the world even from an allowed module, or built-ins that do I/O.
FORBIDDEN_CALLS = {"open", "input", "print", "breakpoint", "exec", "eval", "__import__"}
FORBIDDEN_ATTRS = {("datetime", "now"), ("datetime", "today"), ("date", "today"), ("datetime", "utcnow"),
                   ("tomllib", "load"), ("json", "load"), ("json", "dump"), ("signal", "signal"), ("signal", "alarm")}


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def problems(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "reconciler" and not alias.name.startswith("reconciler.core"):
                    out.append(f"{name}:{node.lineno}: import {alias.name} (outside core/)")
                elif top != "reconciler" and top not in ALLOWED | ALLOWED_THIRD_PARTY:
                    out.append(f"{name}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative: stays inside core/ only at level 1
                if node.level > 1:
                    out.append(f"{name}:{node.lineno}: from {'.' * node.level}{mod} import … (outside core/)")
            elif mod.split(".")[0] == "reconciler":
                if not (mod == "reconciler.core" or mod.startswith("reconciler.core.")):
                    out.append(f"{name}:{node.lineno}: from {mod} import … (outside core/)")
            elif mod.split(".")[0] not in ALLOWED | ALLOWED_THIRD_PARTY:
                out.append(f"{name}:{node.lineno}: from {mod} import …")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                out.append(f"{name}:{node.lineno}: {f.id}(…)")
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FORBIDDEN_ATTRS:
                out.append(f"{name}:{node.lineno}: {f.value.id}.{f.attr}(…)")
    return out


def test_the_core_has_modules_to_check():
    names = {p.stem for p in core_modules()}
    assert {"models", "plan", "capacity", "quantities", "digest", "pricing"} <= names, names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_a_core_module_imports_only_the_core_and_pure_stdlib(path):
    assert problems(path.read_text(), path.name) == []


@pytest.mark.parametrize("source, found", [
    ("import os\n", "import os"),
    ("import time\n", "import time"),
    ("from pathlib import Path\n", "from pathlib import"),
    ("import subprocess\n", "import subprocess"),
    ("import sqlite3\n", "import sqlite3"),
    ("import socket\n", "import socket"),
    ("from dbus_fast.aio import MessageBus\n", "from dbus_fast.aio import"),
    ("from reconciler.observed import procs\n", "outside core/"),
    ("from reconciler.render.lines import busy_line\n", "outside core/"),
    ("from ..observed.procs import alive\n", "outside core/"),
    ("def f(p):\n    return open(p).read()\n", "open(…)"),
    ("from datetime import datetime\nx = datetime.now()\n", "datetime.now(…)"),
])
def test_the_check_catches_what_would_make_the_core_impure(source, found):
    """The check itself: each of these, added to a core module, fails the test above."""
    found_lines = problems(source, "m.py")
    assert any(found in p for p in found_lines), found_lines
