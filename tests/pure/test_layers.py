"""The floors: which folder of reconciler/ may import which. This table is the rule's one home
(docs/design-notes.md, "Floors", draws it; each folder's __init__.py says it in words).

A module may import its own folder and any folder on a LOWER floor (a larger number), never a folder
on its own floor (sideways) or above it (upward). The walk reads every module's source with `ast`, so
an import inside a function or a method counts as much as one at the top, relative imports are
resolved, and a code path no other test runs is held all the same. `reconciler/__init__.py` is on no
floor: it is nothing (the code's fingerprint, stdlib only); anyone may import it and it imports
nothing of res. The core's own stricter rule (pure: only itself and the standard library's pure parts)
is tests/pure/test_purity.py's."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "reconciler"

# Folder (or module directly under reconciler/, without its .py) → floor; 1 is the top.
FLOORS = {
    "entry": 1,        # the console script: `res hook` and `res shim` before anything else is imported
    "exit_hook": 1,    # the ExecStopPost every job unit runs (by path, isolated: imports exit_record.py only)
    "exit_record": 1,  # ... which imports nothing of res by name (it loads observed/mounts.py by its path)
    "cli": 2,          # the parser, lazy dispatch to commands/
    "commands": 3,     # one module per CLI group: parse → call → print
    "loop": 4,         # the pass (tick), res serve, the client, res wait's answers, the World of a pass
    "ops": 5,          # the operations the loop and the commands both call (requests, clean, status as data)
    "apply": 6,        # carrying a plan out: the executor, the attachments' streamer
    "runtime": 7,      # where jobs run: the interface, systemd, Slurm
    "desired": 7,      # queue.toml / game.toml: the reader, the writer
    "observed": 8,     # the live machine: /proc, cgroups, mounts, pressure
    "recorded": 8,     # state.db
    "render": 8,       # the text
    "config": 9,       # paths, policy, zone, environment, locks, file reads
    "core": 10,        # pure: the rules
}

# Upward edges known and being removed, (module under reconciler/, module it imports): each must still
# exist (the list can only shrink) and nothing else may point up.
# Known upward edges waiting for their fix; it may only shrink (test below). Empty: every arrow points down.
PENDING: set[tuple[str, str]] = set()


def _is_module(name: str, root: Path) -> bool:
    path = root.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _callee(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:` (the flag may be typing's or a module's own
    `TYPE_CHECKING = False`): what its body imports is only ever read by a type checker."""
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports(path: Path, root: Path, *, type_checking: bool = True) -> list[tuple[int, str]]:
    """(line, module) of every import of the package in `path`, wherever it stands: `import a.b`,
    `from a import b` (as a.b when b is a module), relative imports, and importlib.import_module with
    a literal name (or an f-string's literal start). `type_checking=False` leaves out what an `if
    TYPE_CHECKING:` block imports (never at run time: no part of an import cycle); the floors count it."""
    top = root.name
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = set()
    if not type_checking:
        typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and _type_checking(block.test)
                       for stmt in block.body for node in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                out.append((node.lineno, sub if _is_module(sub, root) else module))
        elif isinstance(node, ast.Call) and _callee(node.func) == "import_module" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((node.lineno, arg.value))
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                out.append((node.lineno, str(arg.values[0].value).rstrip(".")))
    return sorted({(line, m) for line, m in out if m == top or m.startswith(top + ".")})


def _label(folder: str, root: Path) -> str:
    return f"{folder}/" if (root / folder).is_dir() else f"{folder}.py"


def violations(root: Path, floors: dict[str, int]) -> list[tuple[tuple[str, str], str]]:
    """((module path under root, module imported), message naming file:line and the rule) for every
    import in the tree under `root` that does not point down."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root)
        mine = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for line, target in imports(path, root):
            where, edge = f"{root.name}/{rel.as_posix()}:{line}: imports {target}", (rel.as_posix(), target)
            parts = target.split(".")
            theirs = parts[1] if len(parts) > 1 else None  # None: the package itself
            if mine == "__init__":
                found.append((edge, f"{where}: {root.name}/__init__.py is nothing, it imports nothing of res"))
            elif theirs is None or theirs == mine:
                continue
            elif mine not in floors:
                found.append((edge, f"{where}: {_label(mine, root)} is on no floor (place it in FLOORS)"))
            elif theirs not in floors:
                found.append((edge, f"{where}: {_label(theirs, root)} is on no floor (place it in FLOORS)"))
            elif floors[theirs] <= floors[mine]:
                f, g = floors[mine], floors[theirs]
                how = "sideways: the same floor, another folder" if g == f else "upward"
                found.append((edge, f"{where}: {_label(mine, root)} (floor {f}) may import its own folder and "
                                    f"floors below {f} only; {_label(theirs, root)} is floor {g} ({how})"))
    return found


def test_every_import_points_down():
    bad = [message for edge, message in violations(PACKAGE, FLOORS) if edge not in PENDING]
    assert bad == [], "\n".join(bad)


def test_the_pending_edges_still_exist():
    """PENDING only shrinks: an edge that is gone must leave the list."""
    gone = PENDING - {edge for edge, _ in violations(PACKAGE, FLOORS)}
    assert not gone, f"fixed, remove from PENDING: {sorted(gone)}"


def test_every_folder_is_placed():
    """A new folder (or a module directly under reconciler/) must be given its floor."""
    here = {p.stem for p in PACKAGE.iterdir()
            if (p.is_dir() and any(p.glob("*.py"))) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert here - FLOORS.keys() == set()
    assert {"core", "config", "loop", "commands", "cli", "entry"} <= here  # the walk sees the real tree


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_walk_catches_a_planted_bad_import(tmp_path):
    root = tmp_path / "reconciler"
    _plant(root, {
        "__init__.py": "",
        "cli.py": "from reconciler.commands import run\nimport reconciler.core.rules\n",
        "core/__init__.py": "",
        "core/other.py": "X = 1\n",
        "core/rules.py": ("import os\n"
                          "from reconciler.core import other\n"
                          "from . import other as again\n"
                          "\n"
                          "\n"
                          "def f():\n"
                          "    from reconciler.loop import tick\n"
                          "    return tick\n"
                          "\n"
                          "\n"
                          "class C:\n"
                          "    def m(self):\n"
                          "        from ..config import paths\n"
                          "        return paths\n"),
        "config/__init__.py": "",
        "config/paths.py": "",
        "commands/__init__.py": "",
        "commands/run.py": "import reconciler\nfrom reconciler.loop.tick import g\n",
        "loop/__init__.py": "",
        "loop/tick.py": ("import importlib\n"
                         "from reconciler.core.rules import f\n"
                         "\n"
                         "\n"
                         "def g(name):\n"
                         "    import reconciler.commands.run\n"
                         "    return importlib.import_module(f'reconciler.commands.{name}')\n"),
        "observed/__init__.py": "",
        "observed/procs.py": "",
        "render/__init__.py": "",
        "render/x.py": "from reconciler.observed import procs\n",
        "attic/__init__.py": "",
        "attic/old.py": "from reconciler.core import rules\n",
    })
    found = violations(root, FLOORS)
    lines = sorted(message.split(": ", 1)[0] for _, message in found)
    assert lines == ["reconciler/attic/old.py:1", "reconciler/core/rules.py:13", "reconciler/core/rules.py:7",
                     "reconciler/loop/tick.py:6", "reconciler/loop/tick.py:7", "reconciler/render/x.py:1"], found
    messages = "\n".join(message for _, message in found)
    assert ("reconciler/core/rules.py:7: imports reconciler.loop.tick: core/ (floor 10) may import its own folder "
            "and floors below 10 only; loop/ is floor 4 (upward)") in messages
    assert "reconciler/core/rules.py:13: imports reconciler.config.paths: core/ (floor 10)" in messages
    assert "reconciler/loop/tick.py:6: imports reconciler.commands.run: loop/ (floor 4)" in messages
    assert "reconciler/loop/tick.py:7: imports reconciler.commands: loop/ (floor 4)" in messages
    assert ("reconciler/render/x.py:1: imports reconciler.observed.procs: render/ (floor 8) may import its own "
            "folder and floors below 8 only; observed/ is floor 8 (sideways: the same floor, another folder)") \
        in messages
    assert "reconciler/attic/old.py:1: imports reconciler.core.rules: attic/ is on no floor" in messages
    assert ("core/rules.py", "reconciler.loop.tick") in {edge for edge, _ in found}


def test_the_package_itself_imports_nothing(tmp_path):
    root = tmp_path / "reconciler"
    _plant(root, {"__init__.py": "def f():\n    from reconciler.core import rules\n",
                  "core/__init__.py": "", "core/rules.py": ""})
    assert [m for _, m in violations(root, FLOORS)] == [
        "reconciler/__init__.py:2: imports reconciler.core.rules: reconciler/__init__.py is nothing, it imports "
        "nothing of res"]
