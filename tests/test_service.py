"""`res service install|uninstall|status` (issue 4 item 8).

Pure tier: the quoting of ExecStart= and Environment=, what the unit carries, the status lines.
Systemd tier: the real command line on the real user manager: the unit rendered in the user's unit
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
from reconciler.service import (NO_UNIT, UnitState, env_assignment, exec_line, quote_word, render_unit,
                                res_command, service_environment, status_lines, unit_name)

HOSTILE = 'a "b" 100% $HOME ${X} $$ \\ back\nline2\ttab \'single\' ;&|'


# ---------------------------------------------------------------- pure


def test_unit_name_follows_the_prefix():
    assert unit_name("res") == "res-serve.service"
    assert unit_name("rest1x2") == "rest1x2-serve.service"


def test_environment_words_are_quoted_for_systemd():
    assert env_assignment("A", "plain") == '"A=plain"'
    assert env_assignment("A", "a b") == '"A=a b"'
    assert env_assignment("A", 'say "hi"') == '"A=say \\"hi\\""'
    assert env_assignment("A", "100%") == '"A=100%%"'
    assert env_assignment("A", "$HOME ${X} $$") == '"A=$HOME ${X} $$"'  # Environment= does not expand $
    assert env_assignment("A", "back\\slash\\") == '"A=back\\\\slash\\\\"'
    assert env_assignment("A", "l1\nl2\tt\x01") == '"A=l1\\nl2\\tt\\x01"'
    assert env_assignment("A", "é;x=y") == '"A=é;x=y"'
    with pytest.raises(ValueError):
        env_assignment("NOT-A-NAME", "x")


def test_exec_start_is_verbatim():
    assert exec_line(["/opt/my tools/bin/res", "serve"]) == '"/opt/my tools/bin/res" "serve"'
    assert quote_word("$HOME 50%", dollar=True) == '"$$HOME 50%%"'


def test_rendered_unit_carries_the_environment_quoted_one_word_per_line():
    env = {"PATH": "/usr/bin:/bin", "RES_MARK": HOSTILE, "RES_STATE_DIR": "/home/u/state dir %h"}
    text = render_unit(["/usr/bin/res", "serve"], env, "/home/u/state dir %h")
    lines = text.splitlines()
    assert 'ExecStart="/usr/bin/res" "serve"' in lines
    envs = [line for line in lines if line.startswith("Environment=")]
    assert envs == ['Environment="PATH=/usr/bin:/bin"',
                    'Environment="RES_MARK=a \\"b\\" 100%% $HOME ${X} $$ \\\\ back\\nline2\\ttab \'single\' ;&|"',
                    'Environment="RES_STATE_DIR=/home/u/state dir %%h"']
    assert "WantedBy=default.target" in lines
    assert "Type=exec" in lines
    # the state dir in the header comment is one line whatever it holds
    assert len(render_unit(["/r"], {}, "/a\nb").splitlines()) == len(render_unit(["/r"], {}, "/a").splitlines())


def test_service_environment_pins_state_and_policy_and_keeps_every_res_variable():
    env = {"RES_UNIT_PREFIX": "x", "RES_USER_RESERVE_GB": "8", "RES_STATE_DIR": "relative", "HOME": "/home/u",
           "PATH": "/bin", "RES_API_TOKEN": "s3cret", "RES_EXIT_RECORD": "/x.json", "OTHER": "no",
           "RES_BAD\udcff": "x", "RES_UNDECODABLE": "a\udcffb"}
    out = service_environment(env, "/abs/state", "/abs/policy.toml")
    assert out == {"PATH": "/bin", "RES_POLICY_FILE": "/abs/policy.toml", "RES_STATE_DIR": "/abs/state",
                   "RES_UNIT_PREFIX": "x", "RES_USER_RESERVE_GB": "8"}
    assert list(out) == sorted(out)
    assert service_environment({}, "/s", "/p", pythonpath="/checkout")["PYTHONPATH"] == "/checkout"


def test_status_lines():
    st = UnitState("loaded", "active", "running", "enabled", 4242, "success", 0, False,
                   ("PATH=/bin", "RES_STATE_DIR=/s"))
    assert status_lines("res-serve.service", Path("/u/res-serve.service"), True, st) == [
        "unit       res-serve.service",
        "installed  /u/res-serve.service",
        "enabled    yes",
        "active     active (running), pid 4242",
        "serves     /s",
    ]
    assert status_lines("res-serve.service", Path("/u/res-serve.service"), False, NO_UNIT) == [
        "unit       res-serve.service",
        "installed  no",
        "enabled    no",
        "active     inactive (dead)",
    ]
    linked = st._replace(file_state="linked", active="failed", sub="failed", pid=0)
    assert status_lines("n", Path("/u/n"), True, linked)[2:4] == ["enabled    yes (linked)", "active     failed (failed)"]


def test_the_command_runs_this_copy_of_res(tmp_path):
    here = Path(__import__("reconciler").__file__).resolve().parent
    argv, pythonpath = res_command()
    assert argv[-2:] == ["-m", "reconciler.cli"] or Path(argv[0]).name == "res"
    assert pythonpath in (None, str(here.parent))
    # a copy that this interpreter would not import from / gets its parent on PYTHONPATH
    copy = tmp_path / "checkout" / "reconciler"
    shutil.copytree(here, copy, ignore=shutil.ignore_patterns("__pycache__"))
    argv, pythonpath = res_command(here=copy)
    assert pythonpath == str(copy.parent)
    r = subprocess.run([*argv, "--help"], env=dict(os.environ, PYTHONPATH=pythonpath), cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "serve" in r.stdout, r.stderr


# ---------------------------------------------------------------- systemd tier


def _unit_dir() -> Path:
    from reconciler.unitfiles import user_unit_dir

    return user_unit_dir()


def _ping(state: Path) -> str:
    from reconciler.client import ask

    return ask(state / "serve.sock", {"op": "ping"}, timeout=10)["line"]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.decode(errors="surrogateescape").split("=", 1) for kv in raw.split(b"\0") if b"=" in kv)


@pytest.mark.systemd
def test_install_enables_starts_and_uninstall_removes(res):
    from reconciler.client import NoDaemon

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
    from reconciler.resources import shipped

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
        module = checkout / "reconciler" / "units.py"
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


def test_the_state_dir_is_read_back_from_the_unit_file_as_written():
    from reconciler.service import NO_UNIT, quote_word, serves, unquote_word

    for text in ["/home/u/.local/state/res", 'a"b\\c%d$e\nf\tg\x01h', "%%"]:
        assert unquote_word(quote_word(text)[1:-1]) == text
    unit = f'[Service]\nEnvironment={quote_word("RES_STATE_DIR=/srv/odd dir/100%")}\n'
    assert serves(NO_UNIT, unit) == "/srv/odd dir/100%"
    assert serves(NO_UNIT._replace(env=("RES_STATE_DIR=/loaded",)), None) == "/loaded"
    assert serves(NO_UNIT, "[Service]\n") is None


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
