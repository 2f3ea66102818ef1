"""A regular install (`pip install .`, what a user's machine and the benchmarks run) carries every
module: pyproject.toml lists its packages one by one, so a new folder of code left out of the list is
missing from every install but an editable one (core/clis/ was, for a day: `res hook` and `res serve`
failed with ModuleNotFoundError in a fresh venv while the suite, on an editable install, passed)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def test_doctor_names_a_gate_module_an_install_lacks(tmp_path):
    """`res hook` answers every call it cannot load its code for with no opinion (it never gets in an
    agent's way): `res doctor` is where such an install says so. Here: this checkout's package copied
    without core/shellrules.py."""
    shutil.copytree(ROOT / "reconciler", tmp_path / "reconciler", ignore=shutil.ignore_patterns("__pycache__"))
    code = "from reconciler.commands.doctor import gate_load_error as g; print(g())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    whole = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert whole.returncode == 0 and whole.stdout == "None\n", whole
    (tmp_path / "reconciler" / "core" / "shellrules.py").unlink()
    lacking = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert lacking.returncode == 0 and lacking.stdout == "ModuleNotFoundError: No module named 'reconciler.core.shellrules'\n", lacking
