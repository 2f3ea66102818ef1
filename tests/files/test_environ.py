"""What a job takes from its caller: the program its shell would run, and its environment as the shell
had it (pure, and on real files in a temporary directory)."""
from __future__ import annotations

import os

from reconciler.config.environ import caller_environment, resolve_program

ROOT = "/home/u/.pyenv"
# A real PATH seen when `res` is pyenv's shim: pyenv put libexec and its plugins' bin directories
# first, `pyenv exec` the bin directory of the Python res runs on (copied from this machine, with
# /root/.pyenv as /home/u/.pyenv).
SHIMMED = (f"{ROOT}/versions/3.11.7/bin:{ROOT}/libexec:{ROOT}/plugins/python-build/bin:"
           f"{ROOT}/plugins/pyenv-virtualenv/bin:{ROOT}/plugins/pyenv-update/bin:{ROOT}/plugins/pyenv-doctor/bin:"
           f"/tmp/real/venv/bin:/home/u/.cargo/bin:{ROOT}/plugins/pyenv-virtualenv/shims:{ROOT}/shims:{ROOT}/bin:"
           "/usr/local/bin:/usr/bin:/bin")
CALLERS = (f"/tmp/real/venv/bin:/home/u/.cargo/bin:{ROOT}/plugins/pyenv-virtualenv/shims:{ROOT}/shims:{ROOT}/bin:"
           "/usr/local/bin:/usr/bin:/bin")


def test_a_pyenv_shims_additions_are_taken_back():
    ours = {"PATH": SHIMMED, "PYENV_ROOT": ROOT, "PYENV_VERSION": "3.11.7", "PYENV_DIR": "/work",
            "_PYENV_INSTALL_PREFIX": ROOT, "PYENV_HOOK_PATH": f"{ROOT}/pyenv.d", "HOME": "/home/u", "KEEP": "1"}
    parent = {"PATH": CALLERS, "PYENV_ROOT": ROOT, "HOME": "/home/u"}
    got = caller_environment(ours, parent)
    assert got["PATH"] == CALLERS
    assert {k for k in got if "PYENV" in k} == {"PYENV_ROOT"} and got["KEEP"] == "1"
    # a PYENV_VERSION the caller set itself is the caller's
    got = caller_environment(ours, {**parent, "PYENV_VERSION": "3.12.1"})
    assert got["PYENV_VERSION"] == "3.11.7"
    # not started through pyenv: nothing changes, even with pyenv installed
    plain = {"PATH": CALLERS, "PYENV_ROOT": ROOT}
    assert caller_environment(plain, parent) == plain
    assert caller_environment({"PATH": "/usr/bin"}, None) == {"PATH": "/usr/bin"}


def test_the_program_is_resolved_as_the_shell_would(tmp_path):
    venv, other = tmp_path / "venv" / "bin", tmp_path / "other"
    venv.mkdir(parents=True)
    other.mkdir()
    for d in (venv, other):
        (d / "tool").write_text("#!/bin/sh\n")
        (d / "tool").chmod(0o755)
    (venv / "not-exec").write_text("x")
    path = f"{venv}:{other}"
    assert resolve_program("tool", "/", path) == f"{venv}/tool"  # the first on PATH, as the shell
    assert resolve_program("tool", "/", f"{other}:{venv}") == f"{other}/tool"
    assert resolve_program("not-exec", "/", path) is None
    assert resolve_program("./tool", str(venv), "") == f"{venv}/tool"
    assert resolve_program("../bin/tool", str(venv), "") == f"{venv}/tool"
    assert resolve_program("tool", str(other), ":/nonexistent") == f"{other}/tool"  # an empty entry is "."
    assert resolve_program("missing", "/", path) is None
    assert resolve_program(str(other / "tool"), "/", "") == str(other / "tool")
    assert os.path.isabs(resolve_program("sh", "/", os.environ["PATH"]))
