"""`res service install|uninstall|status` on the real user manager (the pure parts:
tests/pure/test_service_unit.py): the unit rendered in the user's unit
directory, enabled, started, its loop answering on the socket with the service's MainPID, the hostile
environment value read back exactly from the manager and from the running process, install twice,
status, uninstall; and the refusal when a `res serve` already runs outside the service. Every test
that installs uninstalls in a `finally`, so no service outlives it."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clihelp import PY, res, unit_props, wait_for  # noqa: F401
from reconciler.commands.service import unit_name

HOSTILE = 'a "b" 100% $HOME ${X} $$ \\ back\nline2\ttab \'single\' ;&|'


















# ---------------------------------------------------------------- systemd tier


def _unit_dir() -> Path:
    from reconciler.runtime.unitfiles import user_unit_dir

    return user_unit_dir()


def _ping(state: Path) -> str:
    from reconciler.loop.client import ask

    return ask(state / "serve.sock", {"op": "ping"}, timeout=10)["line"]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.decode(errors="surrogateescape").split("=", 1) for kv in raw.split(b"\0") if b"=" in kv)


@pytest.mark.systemd
def test_install_enables_starts_and_uninstall_removes(res):
    from reconciler.loop.client import NoDaemon

    name = unit_name(res.prefix)
    unit_dir = _unit_dir()
    path = unit_dir / name
    wants = unit_dir / "default.target.wants" / name
    res.env["RES_TEST_MARK"] = HOSTILE
    try:
        st = res.ok("service", "status")
        assert st.lines == [f"unit       {name}", "installed  no", "enabled    no", "active     inactive (dead)"], str(st)

        r = res.ok("service", "install")
        assert r.lines[0] == f"installed {path}", str(r)
        assert r.lines[1] == f"enabled {name} (starts with the user manager)", str(r)
        assert r.lines[2].startswith(f"started {name} (pid ") and r.lines[2].endswith(f"), serving {res.state}"), str(r)
        assert len(r.lines) == 3 and r.err == "", str(r)

        # the file: this installation's res, the state and policy it serves, every RES_* variable
        text = path.read_text()
        lines = text.splitlines()
        exec_start = next(line for line in lines if line.startswith("ExecStart="))
        assert exec_start.endswith(' "serve"'), exec_start
        assert f'Environment="RES_STATE_DIR={res.state}"' in lines
        assert f'Environment="RES_UNIT_PREFIX={res.prefix}"' in lines
        assert f'Environment="RES_JOBS_SLICE={res.jobs_slice}"' in lines
        assert f'Environment="RES_POLICY_FILE={os.environ["RES_POLICY_FILE"]}"' in lines
        assert any(line.startswith('Environment="PATH=') for line in lines)
        assert "WantedBy=default.target" in lines

        # enabled, and the manager reads the environment exactly as it was
        assert wants.is_symlink() and wants.resolve() == path.resolve()
        props = unit_props(name)
        assert props["UnitFileState"] == "enabled" and props["ActiveState"] == "active", props
        assert f"RES_TEST_MARK={HOSTILE}" in props["Environment"], props["Environment"]
        pid = props["MainPID"]
        assert r.lines[2] == f"started {name} (pid {pid}), serving {res.state}"

        # the service's loop answers, and it is the service's main process
        assert _ping(res.state) == f"pid {pid}"
        env = _environ(pid)
        assert env["RES_TEST_MARK"] == HOSTILE
        assert env["RES_STATE_DIR"] == str(res.state) and env["RES_UNIT_PREFIX"] == res.prefix

        again = res.ok("service", "install")
        assert again.lines == [f"{name} already installed and running (pid {pid})"], str(again)
        assert unit_props(name)["MainPID"] == pid

        st = res.ok("service", "status")
        assert st.lines == [f"unit       {name}", f"installed  {path}", "enabled    yes",
                            f"active     active (running), pid {pid}", f"serves     {res.state}"], str(st)

        # Another state directory never takes over (or removes) the loop that serves this one.
        other = {"RES_STATE_DIR": str(res.tmp / "other-state")}
        for action in ("install", "uninstall"):
            r = res("service", action, env=other)
            assert r.code == 1 and r.one_line("err").startswith(f"res: {name} serves {res.state}"), str(r)
        assert unit_props(name)["MainPID"] == pid and path.exists()

        gone = res.ok("service", "uninstall")
        assert gone.lines == [f"stopped {name} (pid {pid})", f"disabled {name}", f"removed {path}"], str(gone)
        assert not path.exists() and not wants.is_symlink()
        with pytest.raises(NoDaemon):
            _ping(res.state)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"saw pid {pid} end", 30)
        assert not [u for u in res.units() if u[0] == name]

        assert res.ok("service", "uninstall").lines == [f"{name} not installed"]
        assert res.ok("service", "status").lines[1:] == ["installed  no", "enabled    no", "active     inactive (dead)"]
    finally:
        res("service", "uninstall")


@pytest.mark.systemd
def test_install_again_restarts_a_loop_that_runs_older_code(res):
    """After an upgrade (here: a copy of the package whose module changed), `res service install`
    restarts the service instead of saying it is already running."""
    here = Path(__import__("reconciler").__file__).resolve().parent
    checkout = res.tmp / "checkout"
    shutil.copytree(here, checkout / "reconciler", ignore=shutil.ignore_patterns("__pycache__"))
    from reconciler.config.resources import shipped

    for top in ("policies", "templates/units", "state"):  # the defaults beside the package, as in a checkout
        shutil.copytree(shipped(top), checkout / top)
    env = {"PYTHONPATH": str(checkout)}
    name = unit_name(res.prefix)

    def install():
        r = subprocess.run([PY, "-m", "reconciler.cli", "service", "install"], env={**res.env, **env}, cwd="/",
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
        return r.stdout.splitlines()

    try:
        lines = install()
        assert lines[-1].startswith(f"started {name} (pid "), lines
        pid = unit_props(name)["MainPID"]
        assert install() == [f"{name} already installed and running (pid {pid})"]
        module = checkout / "reconciler" / "core" / "quantities.py"
        module.write_text(module.read_text() + "\n# upgraded\n")
        lines = install()
        new = unit_props(name)["MainPID"]
        assert new != pid and lines == [f"restarted {name} (pid {new}), serving {res.state}; the code it ran "
                                        f"had changed since it started"], lines
        assert install() == [f"{name} already installed and running (pid {new})"]
    finally:
        subprocess.run([PY, "-m", "reconciler.cli", "service", "uninstall"], env={**res.env, **env}, cwd="/",
                       capture_output=True, text=True, timeout=120)


@pytest.mark.systemd
def test_install_refuses_while_a_loop_runs_outside_the_service(res):
    name = unit_name(res.prefix)
    path = _unit_dir() / name
    serve = res.spawn("serve")
    try:
        wait_for(lambda: (res.state / "serve.sock").exists() or serve.poll() is not None, "saw the serve socket")
        assert serve.poll() is None, serve.communicate()
        r = res("service", "install")
        assert r.code == 1, str(r)
        assert r.one_line("err") == (f"res: res serve already runs for {res.state} outside {name} (pid {serve.pid}); "
                                     "stop it, then run res service install again")
        assert r.out == "" and not path.exists()
        assert _ping(res.state) == f"pid {serve.pid}"  # the running loop is untouched
    finally:
        res("service", "uninstall")


@pytest.mark.systemd
def test_service_commands_say_one_line_when_the_manager_is_unreachable(res, tmp_path):
    gone = {"DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path}/no-bus", "XDG_RUNTIME_DIR": str(tmp_path)}
    for action in ("install", "uninstall", "status"):
        r = res("service", action, env=gone)
        assert r.code == 1 and r.out == "", str(r)
        assert r.one_line("err").startswith("res: systemd user manager unreachable at "), str(r)
    assert not (_unit_dir() / unit_name(res.prefix)).exists()




@pytest.mark.systemd
def test_uninstall_leaves_a_service_file_res_did_not_write(res):
    name = unit_name(res.prefix)
    path = _unit_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = "[Unit]\nDescription=my own loop\n[Service]\nExecStart=/bin/true\n"
    path.write_text(mine)
    try:
        for action in ("uninstall", "install"):
            r = res("service", action)
            assert r.code == 1 and "was not written by res" in r.one_line("err"), str(r)
        assert path.read_text() == mine
    finally:
        path.unlink(missing_ok=True)
