"""A job's own `systemd-run` (issue 40 item 7, docs/escaping.md): first on the job's PATH, it runs the
real one with the same arguments and exit code, marking the service with the job that made it; a
`--scope`, `--help` or a call outside a job goes straight through. Real files and processes; the
"real" systemd-run here is a script that prints its arguments."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reconciler.apply import escape


@pytest.fixture
def setup(tmp_path):
    shim = escape.ensure(tmp_path / "bin")
    real_dir = tmp_path / "usr-bin"
    real_dir.mkdir()
    real = real_dir / "systemd-run"
    real.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\nexit 7\n')
    real.chmod(0o755)
    return shim, real_dir


def _run(shim: Path, real_dir: Path, *args: str, res_id: str | None = "r-12") -> tuple[int, list[str]]:
    env = {"PATH": f"{shim.parent}:{real_dir}:/usr/bin:/bin"}
    if res_id:
        env["RES_ID"] = res_id
    r = subprocess.run([str(shim), *args], env=env, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.splitlines()


def test_a_service_started_from_a_job_is_marked_with_the_job(setup):
    shim, real_dir = setup
    code, argv = _run(shim, real_dir, "--user", "--unit=dev", "npm", "start", "--scope-x")
    assert code == 7  # the real one's exit code
    assert argv == ["--setenv=RES_ESCAPED_FROM=r-12", "--user", "--unit=dev", "npm", "start", "--scope-x"]


@pytest.mark.parametrize("args", [("--user", "--scope", "make"), ("--help",), ("--version",)])
def test_a_scope_or_a_question_goes_straight_through(setup, args):
    shim, real_dir = setup
    assert _run(shim, real_dir, *args) == (7, list(args))


def test_outside_a_job_it_goes_straight_through(setup):
    shim, real_dir = setup
    assert _run(shim, real_dir, "--user", "sleep", "9", res_id=None) == (7, ["--user", "sleep", "9"])


def test_without_a_real_one_it_says_so_as_a_shell_would(tmp_path):
    shim = escape.ensure(tmp_path / "bin")
    r = subprocess.run([str(shim), "--user", "true"], env={"PATH": f"{shim.parent}:{tmp_path / 'none'}", "RES_ID": "r-1"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 127 and r.stderr == "systemd-run: command not found\n"


def test_it_is_written_once_and_again_only_when_changed(tmp_path):
    shim = escape.ensure(tmp_path / "bin")
    assert oct(shim.stat().st_mode & 0o777) == "0o700" and oct((tmp_path / "bin").stat().st_mode & 0o777) == "0o700"
    before = shim.stat().st_mtime_ns, shim.stat().st_ino
    escape.ensure(tmp_path / "bin")
    assert (shim.stat().st_mtime_ns, shim.stat().st_ino) == before
    shim.write_text("#!/bin/sh\nexit 0\n")
    escape.ensure(tmp_path / "bin")
    assert shim.read_text() == escape.SCRIPT


def test_first_on_the_jobs_path_once():
    assert escape.first_on_path({"PATH": "/usr/bin"}, Path("/s/bin")) == {"PATH": "/s/bin:/usr/bin"}
    assert escape.first_on_path({"PATH": "/s/bin:/usr/bin"}, Path("/s/bin")) == {"PATH": "/s/bin:/usr/bin"}
    assert escape.first_on_path({}, Path("/s/bin")) == {}  # no PATH of the caller's: the manager's stays
