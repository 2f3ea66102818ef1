"""The parts of the systemd runtime that need no manager: slice paths, mount parsing, the environment
filter, the exit-record script run by hand, an unreachable bus (the rest: tests/systemd/)."""
from __future__ import annotations

import asyncio
import json
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.observed import cgroup
from reconciler.runtime import RuntimeUnavailable
from reconciler.runtime.jobunit import EXIT_RECORD_SCRIPT, job_environment
from reconciler.runtime.systemd import SystemdRuntime


PY = sys.executable


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)

HYBRID = """\
25 30 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
31 25 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
"""
UNIFIED = """\
25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
"""
CONTAINER_V1 = """\
31 25 0:28 /docker/abc /sys/fs/cgroup/memory\\040x rw - cgroup cgroup rw,cpuacct,memory
"""


def test_slice_path_and_unit_cgroup():
    assert cgroup.slice_path("-.slice") == ""
    assert cgroup.slice_path("app.slice") == "app.slice"
    assert cgroup.slice_path("agents-jobs.slice") == "agents.slice/agents-jobs.slice"
    assert cgroup.slice_path("a-b-c.slice") == "a.slice/a-b.slice/a-b-c.slice"
    assert cgroup.unit_cgroup("", "agents-jobs.slice", "res-r-1.service") == \
        "/agents.slice/agents-jobs.slice/res-r-1.service"
    assert cgroup.unit_cgroup("/", "x.slice", "u.service") == "/x.slice/u.service"
    assert cgroup.unit_cgroup("/user.slice/user-1000.slice/user@1000.service", "agents-jobs.slice", "u.service") == \
        "/user.slice/user-1000.slice/user@1000.service/agents.slice/agents-jobs.slice/u.service"
    with pytest.raises(ValueError):
        cgroup.slice_path("x.service")


def test_memory_mount_parsing():
    m = cgroup.parse_memory_mount(HYBRID, read=lambda p: "cpu io")  # unified has no memory: v1 wins anyway
    assert m == cgroup.MemoryMount(Path("/sys/fs/cgroup/memory"), "/", 1)
    m = cgroup.parse_memory_mount(UNIFIED, read=lambda p: "cpuset cpu io memory pids")
    assert m == cgroup.MemoryMount(Path("/sys/fs/cgroup"), "/", 2)
    assert cgroup.parse_memory_mount(UNIFIED, read=lambda p: "cpu io") is None
    m = cgroup.parse_memory_mount(CONTAINER_V1)
    assert m.path == Path("/sys/fs/cgroup/memory x") and m.root == "/docker/abc"
    d, v = cgroup.memory_dir("/docker/abc/x.slice/u.service", m)
    assert (d, v) == (Path("/sys/fs/cgroup/memory x/x.slice/u.service"), 1)
    assert cgroup.memory_used_bytes("/no/such/cgroup/anywhere") is None


def test_job_environment_filters_secrets_and_what_the_manager_has():
    env = {"PATH": "/bin", "SAME": "1", "NEW": "a $HOME %h", "GH_TOKEN": "x", "db_password": "y",
           "Passwd_file": "z", "MY_SECRET_KEY": "s", "AWS_CREDENTIALS": "c", "BAD-NAME": "v", "1X": "v",
           # set by systemd for the unit itself (a caller running in a unit has its own)
           "INVOCATION_ID": "x", "NOTIFY_SOCKET": "/x", "SERVICE_RESULT": "x", "EXIT_STATUS": "9",
           "RES_EXIT_RECORD": "/elsewhere"}
    assert sorted(job_environment(env, {"SAME": "1", "PATH": "/usr/bin"})) == ["NEW=a $HOME %h", "PATH=/bin"]


def test_what_only_the_manager_has_is_unset_for_the_job():
    from reconciler.runtime.jobunit import manager_only

    caller = {"PATH": "/venv/bin:/bin", "HOME": "/home/u"}
    manager = {"PATH": "/usr/bin", "HOME": "/home/u", "PYENV_VERSION": "3.11.7", "DISPLAY": ":0",
               "GH_TOKEN": "kept as the manager has it", "MANAGERPID": "1"}
    assert manager_only(caller, manager) == ["DISPLAY", "PYENV_VERSION"]


def test_exit_record_script_never_fails(tmp_path):
    """Run by hand, outside any unit and with no systemd variables: still writes a record, 0600."""
    out = tmp_path / "deep" / "r-1.exit.json"
    r = subprocess.run([PY, "-I", "-S", EXIT_RECORD_SCRIPT, str(out)], env={}, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    rec = json.loads(out.read_text())
    assert rec["result"] is None and rec["code"] is None and rec["status"] is None
    assert set(rec) == {"result", "code", "status", "peak_bytes", "oom_kills", "at", "invocation", "cpu_usec"}
    assert abs(rec["at"] - time.time()) < 30 and rec["oom_kills"] >= 0
    assert mode(out) == 0o600
    # RES_EXIT_RECORD (the unit's environment) wins over argv[1]
    other = tmp_path / "env;$x" / "r-2.exit.json"
    r = subprocess.run([PY, "-I", "-S", EXIT_RECORD_SCRIPT, str(out)],
                       env={"RES_EXIT_RECORD": str(other), "SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited",
                            "EXIT_STATUS": "3"})
    assert r.returncode == 0
    assert json.loads(other.read_text())["status"] == "3" and json.loads(out.read_text())["status"] is None
    # an unwritable target: still exit 0, nothing raised
    r = subprocess.run([PY, "-I", "-S", EXIT_RECORD_SCRIPT, "/proc/nope/x.json"], env={}, capture_output=True)
    assert r.returncode == 0 and r.stderr == b""


def test_the_exit_record_is_json_whatever_the_variables_hold(tmp_path):
    """The script writes its JSON itself (no `json` import: it runs at every job's end): hostile
    values (quotes, backslashes, control characters, bytes that are not UTF-8, astral characters)
    come back exactly through json.loads, as json.dumps would have written them."""
    out = tmp_path / "r-1.exit.json"
    hostile = 'a"b\\c\n\t\x01\x7f é 😀 }{'
    env = {"SERVICE_RESULT": hostile, "EXIT_CODE": "exited", "EXIT_STATUS": "0"}
    env_b = {k.encode(): v.encode() for k, v in env.items()}
    env_b[b"INVOCATION_ID"] = b"\xff\xfe-not-utf8"
    r = subprocess.run([PY, "-I", "-S", EXIT_RECORD_SCRIPT, str(out)], env=env_b, capture_output=True)
    assert r.returncode == 0 and r.stderr == b""
    text = out.read_text(encoding="ascii")  # escaped as json.dumps does: ASCII only
    rec = json.loads(text)
    assert rec["result"] == hostile and rec["status"] == "0"
    assert rec["invocation"] == b"\xff\xfe-not-utf8".decode("utf-8", "surrogateescape")
    assert text.strip() == json.dumps(rec)


def test_unreachable_bus_is_runtime_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path}/no-such-bus")

    async def go():
        rt = SystemdRuntime("res", "agents-jobs.slice", tmp_path)
        with pytest.raises(RuntimeUnavailable) as e1:
            await rt.connect()
        with pytest.raises(RuntimeUnavailable) as e2:
            await rt.observe(["r-1"])
        await rt.close()
        return str(e1.value), str(e2.value)

    for msg in asyncio.run(go()):
        assert "\n" not in msg and "no-such-bus" in msg, msg


def test_bus_without_systemd_is_runtime_unavailable(tmp_path, monkeypatch):
    """A bus that answers but has no systemd on it is no better than none."""
    if not shutil.which("dbus-daemon"):
        pytest.skip("no dbus-daemon")
    sock = tmp_path / "bus"
    d = subprocess.Popen(["dbus-daemon", "--session", f"--address=unix:path={sock}", "--nofork", "--nopidfile"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.01)
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={sock}")

        async def go():
            rt = SystemdRuntime("res", "agents-jobs.slice", tmp_path)
            try:
                await rt.observe(["r-1"])
            finally:
                await rt.close()

        with pytest.raises(RuntimeUnavailable, match="org.freedesktop.systemd1"):
            asyncio.run(go())
    finally:
        d.terminate()
        d.wait(5)
