"""A regular install (`pip install .`, what a user's machine and the benchmarks run) carries every
module: pyproject.toml lists its packages one by one, so a new folder of code left out of the list is
missing from every install but an editable one (core/clis/ was, for a day: `res hook` and `res serve`
failed with ModuleNotFoundError in a fresh venv while the suite, on an editable install, passed)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_of_code_is_a_listed_package():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    mapped = {str(Path(d)): name for name, d in tool["package-dir"].items()}
    code = set()
    for py in (ROOT / "reconciler").rglob("*.py"):
        if "__pycache__" in py.parts:
            continue
        rel = py.parent.relative_to(ROOT)
        code.add(mapped.get(str(rel), ".".join(rel.parts)))
    assert code, "no code found under reconciler/"
    missing = sorted(code - listed)
    assert not missing, f"folders of code pyproject.toml does not install: {missing}"
