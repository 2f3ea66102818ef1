"""The PATH a job gets with pyenv installed (config/environ.caller_environment): only what pyenv itself
put in front of the caller's PATH on its way to `res` is taken back; a caller's venv or pipx
directory first on PATH stays first, even when `res` lives there. PATHs as pyenv 2.4 builds them
(libexec/pyenv: each plugin's bin, then libexec; libexec/pyenv-exec: the version's bin first)."""
from __future__ import annotations

from reconciler.config.environ import caller_environment

ROOT = "/home/u/.pyenv"
PYENVS = (f"{ROOT}/libexec:{ROOT}/plugins/python-build/bin:{ROOT}/plugins/pyenv-virtualenv/bin:"
          f"{ROOT}/plugins/pyenv-update/bin:{ROOT}/plugins/pyenv-doctor/bin")
SHELL = f"{ROOT}/plugins/pyenv-virtualenv/shims:{ROOT}/shims:{ROOT}/bin:/usr/local/bin:/usr/bin:/bin"
BY_PYENV = {"PYENV_VERSION": "3.11.7", "PYENV_DIR": "/work", "_PYENV_INSTALL_PREFIX": ROOT,
            "PYENV_HOOK_PATH": f"{ROOT}/pyenv.d"}


def test_a_venv_first_on_path_with_res_in_it_stays_first():
    venv = "/home/u/proj/.venv/bin"  # `res` is /home/u/proj/.venv/bin/res, run directly
    ours = {"PATH": f"{venv}:{SHELL}", "PYENV_ROOT": ROOT, "VIRTUAL_ENV": "/home/u/proj/.venv",
            "PYENV_VERSION": "3.12.1"}
    # The shell activated the venv (and chose a version) after it started: its /proc environ has neither.
    parent = {"PATH": SHELL, "PYENV_ROOT": ROOT}
    assert caller_environment(ours, parent) == ours
    assert caller_environment(ours, None) == ours


def test_pipxs_directory_first_on_path_stays_first():
    ours = {"PATH": f"/home/u/.local/bin:{SHELL}", "PYENV_ROOT": ROOT}  # pipx's res, run directly
    assert caller_environment(ours, {"PATH": f"/home/u/.local/bin:{SHELL}", "PYENV_ROOT": ROOT}) == ours
    assert caller_environment(ours, {"PATH": "/usr/bin:/bin"}) == ours


def test_through_a_pyenv_shim_pyenvs_additions_are_taken_back():
    # `res` is ~/.pyenv/shims/res: the shim runs `pyenv exec res`, which puts the version's bin,
    # libexec and the plugins' bin directories first and exports PYENV_* names.
    ours = {"PATH": f"{ROOT}/versions/3.11.7/bin:{PYENVS}:{SHELL}", "PYENV_ROOT": ROOT, "HOME": "/home/u",
            **BY_PYENV}
    parent = {"PATH": SHELL, "PYENV_ROOT": ROOT, "HOME": "/home/u"}
    assert caller_environment(ours, parent) == {"PATH": SHELL, "PYENV_ROOT": ROOT, "HOME": "/home/u"}
    # a venv the shell activated after it started (not in its /proc environ) stays first
    ours["PATH"] = f"{ROOT}/versions/3.11.7/bin:{PYENVS}:/home/u/proj/.venv/bin:{SHELL}"
    assert caller_environment(ours, parent)["PATH"] == f"/home/u/proj/.venv/bin:{SHELL}"
    # parent unknown: PATH still taken back, PYENV_* names kept (nothing tells whose they are)
    got = caller_environment(ours, None)
    assert got["PATH"] == f"/home/u/proj/.venv/bin:{SHELL}" and got["PYENV_VERSION"] == "3.11.7"


def test_pyenv_exec_additions_are_taken_back_and_a_callers_own_pyenv_dirs_kept():
    plain = "/usr/local/bin:/usr/bin:/bin"
    # `pyenv exec res …` from a shell whose PATH has no pyenv in it
    ours = {"PATH": f"{ROOT}/versions/3.12.1/bin:{PYENVS}:{plain}", "PYENV_ROOT": ROOT, **BY_PYENV}
    assert caller_environment(ours, {"PATH": plain})["PATH"] == plain
    # the system version: pyenv exec adds no version bin; libexec and the plugins still go
    ours["PATH"] = f"{PYENVS}:{plain}"
    assert caller_environment(ours, {"PATH": plain})["PATH"] == plain
    # a caller started under `pyenv exec` itself: what its own PATH starts with is its, not pyenv's
    theirs = f"{ROOT}/versions/3.12.1/bin:{PYENVS}:{plain}"
    ours["PATH"] = f"{ROOT}/versions/3.12.1/bin:{PYENVS}:{theirs}"
    assert caller_environment(ours, {"PATH": theirs, **BY_PYENV})["PATH"] == ours["PATH"]
    ours["PATH"] = theirs  # ... and `res` run directly from there: nothing was added
    assert caller_environment(ours, {"PATH": theirs, **BY_PYENV})["PATH"] == theirs
    # a packaged pyenv (Homebrew) lives outside PYENV_ROOT, and says where
    brew = "/opt/homebrew/Cellar/pyenv/2.4.0"
    ours = {"PATH": f"{ROOT}/versions/3.12.1/bin:{brew}/libexec:{ROOT}/plugins/pyenv-virtualenv/bin:{plain}",
            "PYENV_ROOT": ROOT, "_PYENV_INSTALL_PREFIX": brew}
    assert caller_environment(ours, {"PATH": plain})["PATH"] == plain


def test_pyenv_like_directories_without_pyenvs_libexec_are_the_callers():
    # A version's bin first on PATH by the user's own choice, `res` run directly: pyenv never ran.
    ours = {"PATH": f"{ROOT}/versions/3.11.7/bin:{SHELL}", "PYENV_ROOT": ROOT, "PYENV_VERSION": "3.11.7"}
    assert caller_environment(ours, {"PATH": SHELL}) == ours
    assert caller_environment({"PATH": SHELL}, {"PATH": SHELL}) == {"PATH": SHELL}  # no PYENV_ROOT: as is

