"""The PATH a job gets when the caller's PATH starts with a venv that holds `res` itself, with pyenv
installed (PYENV_ROOT set): on a real user manager, the job runs the venv's python3, and a `res run`
its own command makes finds `res` and is recorded as part of the job. Nothing asserts on time."""
from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from clihelp import PY, Out, res  # noqa: F401 - res is the fixture

pytestmark = pytest.mark.systemd


def _venv_with_res(where) -> str:
    """A venv with a `res` script in its bin that imports this interpreter's res, however it was
    installed: into a venv (the one the tests run in), with `pip install --user`, or globally. A venv
    made with --system-site-packages sees only the base interpreter's packages (not the running venv's,
    nor always the user's), so a .pth file of its own adds every site directory this interpreter reads."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True, timeout=120)
    python = where / "bin" / "python3"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(purelib) / "res-under-test.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in _site_dirs()) + "\n")
    script = where / "bin" / "res"
    script.write_text(f"#!{python}\nimport sys\nfrom reconciler.entry import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return str(where / "bin")


def _site_dirs() -> list[str]:
    """The site directories this interpreter imports from, in its order: its venv's (and its base's,
    where that venv sees them), the user's where enabled, the system's."""
    dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    return sorted({d for d in dirs if d in sys.path}, key=sys.path.index)


def _without_res(path: str) -> str:
    """`path` without the directories that hold a `res`: the job can only find the venv's."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and not os.access(os.path.join(d, "res"), os.X_OK))


def test_a_venv_first_on_path_stays_first_for_the_job_and_its_own_res_run(res):
    venv = res.tmp / "venv"
    bin_dir = _venv_with_res(venv)
    env = dict(res.env, PATH=f"{bin_dir}:{_without_res(res.env.get('PATH', '/usr/bin:/bin'))}",
               PYENV_ROOT=os.environ.get("PYENV_ROOT") or str(res.tmp / "pyenv"), VIRTUAL_ENV=str(venv))
    inner = ("python3 -c 'import sys; print(\"prefix=\" + sys.prefix)'; "
             "res run --mem 64M --for 1m --cpus 0.1 --title inner -- true; echo inner-rc=$?")
    # `res` by its name, as the caller's shell runs it: the venv's, first on PATH
    argv = ["sh", "-c", 'exec res "$@"', "sh", "run", "--mem", "256M", "--for", "5m", "--cpus", "0.1",
            "--title", "outer", "--", "sh", "-c", inner]
    p = subprocess.run(argv, cwd=str(res.work), env=env, capture_output=True, text=True, timeout=120)
    r = Out(p.returncode, p.stdout, p.stderr, tuple(argv))
    assert r.code == 0 and r.one_line().startswith("r-1 started"), str(r)
    outer = res.reconcile_until("r-1", lambda s: s["state"] == "done", "outer job done")
    log = (res.state / "logs" / "r-1.log").read_text()
    assert outer["rc"] == 0, (outer, log)
    assert f"prefix={venv}" in log.splitlines(), log  # the venv's python3, not pyenv's
    assert "inner-rc=0" in log, log  # its own `res` found on its PATH, and it answered
    st = res.status("r-2")
    assert st["title"] == "inner" and st["by"].get("batch") == "r-1", st
