"""The user's side (DESIGN §5.6) through the real command line on a real systemd user manager: game mode sets the agents
slice (read back over D-Bus after on, off and expiry), the slices' unit files are installed, a real
process named `claude` is adopted with its children into a scope with its MemoryHigh, and the
`res shell-init` alias starts a session there."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import signal
import tomllib

import pytest

from clihelp import GIB, res, unit_props, wait_for  # noqa: F401
from reconciler.core.agents import SESSION_NAME
from reconciler.observed.procs import processes

pytestmark = pytest.mark.systemd

# A stand-in for an agent session: a script named `claude` (its process name is the script's)
# with two children, that runs until the test stops it.
FAKE_CLAUDE = "#!/bin/sh\nsleep 600 &\nsleep 600 &\nwait\n"


def slice_values(name: str) -> dict:
    p = unit_props(name, "Slice")
    return {k: p[k] for k in ("CPUWeight", "IOWeight", "MemoryHigh")}


def ram_bytes() -> int:
    with open("/proc/meminfo") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return kb * 1024


def high_of(gb: float) -> int:
    """The MemoryHigh res sets for `gb`: rounded up to 256 MiB."""
    step = 256 * 1024 * 1024
    return -(-int(gb * GIB) // step) * step


def foreign_sessions(mine: set[int]) -> list[int]:
    """Processes named claude of this user that this test did not start (a real session on a
    desktop): the adoption tests would move them, so they do not run then."""
    return [p.pid for p in processes().values()
            if p.name == SESSION_NAME and p.uid == os.getuid() and p.pid not in mine and p.ppid not in mine]


def in_slice(pid: int, slice_name: str) -> bool:
    """The process's cgroup is in the slice: `/<slice>/…` under a private manager that owns the root,
    `/user.slice/user-1000.slice/user@1000.service/<slice>/…` under a login user's (the guest tier)."""
    return f"/{slice_name}/" in cgroup_line(pid)


def cgroup_line(pid: int) -> str:
    from reconciler.observed.procs import cgroup_of

    return cgroup_of(pid) or ""


def test_slices_are_installed_and_game_mode_sets_them_on_off_and_at_expiry(res):
    ram = ram_bytes() / GIB
    res.env.update(RES_USER_RESERVE_GB="2", RES_GAME_RESERVE_GB="3")
    res.ok("reconcile")
    unit_dir = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "systemd", "user")
    text = open(os.path.join(unit_dir, res.agents_slice)).read()
    assert "CPUWeight=20\nIOWeight=20\n" in text
    assert os.path.exists(os.path.join(unit_dir, res.jobs_slice))
    normal = {"CPUWeight": 20, "IOWeight": 20, "MemoryHigh": high_of(ram - 2)}
    assert slice_values(res.agents_slice) == normal

    on = res.ok("game", "on", "--for", "1h")
    assert re.fullmatch(r"game on until \d\d:\d\d \(60 min\); CPU/IO now yours", on.lines[0]), str(on)
    assert slice_values(res.agents_slice) == {"CPUWeight": 5, "IOWeight": 5, "MemoryHigh": high_of(ram - 3)}
    assert res.ok("reconcile", "--dry-run").lines == ["No changes. The world matches the desired state."]

    res.ok("game", "off")
    assert slice_values(res.agents_slice) == normal

    # Expiry: the next pass restores the slice and clears game mode in the file, comments kept.
    game_file = res.state / "desired" / "game.toml"
    res.ok("game", "on", "--for", "10s")  # (long enough for a slow machine to read the slice before it ends)
    assert slice_values(res.agents_slice)["CPUWeight"] == 5
    wait_for(lambda: res.ok("game", "status").lines[0].startswith("game off"), "game mode expired", 60)
    plan = res.ok("reconcile").lines
    assert any(re.match(r"\s+~ game off\s+game\.toml\s+game mode ended at \d\d:\d\d; clearing it", line) for line in plan), plan
    assert slice_values(res.agents_slice) == normal
    text = game_file.read_text()
    assert tomllib.loads(text) == {"on": False} and text.startswith("# res: desired state, game mode")

    # A new reserve re-renders the slice's unit file (not the cached text) and the slice follows.
    res.env["RES_USER_RESERVE_GB"] = "3"
    res.ok("reconcile")
    assert f"MemoryHigh={high_of(ram - 3)}\n" in open(os.path.join(unit_dir, res.agents_slice)).read()
    assert slice_values(res.agents_slice)["MemoryHigh"] == high_of(ram - 3)


def test_game_mode_never_squeezes_what_agents_already_use(res):
    """With the game reserve bigger than RAM, MemoryHigh stays at (at least) what the slice uses."""
    res.env.update(RES_GAME_RESERVE_GB=str(int(ram_bytes() / GIB) + 8))
    jid = res.started("sleep", "600", mem="256M")
    res.ok("game", "on", "--for", "1h")
    high = slice_values(res.agents_slice)["MemoryHigh"]
    assert 0 < high <= 2 * GIB  # the slice's own use, rounded up: nothing taken from the running job
    assert res.status(jid)["state"] == "running"  # and the job was not stopped
    res.ok("release", jid, "--stop")


def test_a_running_claude_is_adopted_with_its_children_and_memory_high(res):
    bin_dir = res.tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    # Two children in its own cgroup, and one the session put in a scope of its own (which stays).
    own = f"{res.prefix}-own-child.scope"
    fake.write_text(FAKE_CLAUDE.replace("wait\n", f"systemd-run --user --scope --quiet --unit={own} sleep 600 &\nwait\n"))
    fake.chmod(0o755)
    p = res.popen([str(fake)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    kids = wait_for(lambda: (lambda k: k if len(k) == 3 else None)(
        [q.pid for q in processes().values() if q.ppid == p.pid]), "children started", 10)
    scoped = wait_for(lambda: next((k for k in kids if cgroup_line(k).endswith("/" + own)), None),
                      "the scoped child in its scope", 20)
    if foreign_sessions({p.pid}):
        pytest.skip("another claude session runs as this user; adopting would move it")
    assert processes()[p.pid].name == "claude"
    assert not in_slice(p.pid, res.agents_slice)

    observed = res.ok("observe", "--json").out
    assert f'"pid": {p.pid}' in observed and '"in_slice": false' in observed
    # With adopt_sessions off (as in every test), a pass leaves sessions where they are.
    res.ok("reconcile")
    assert not in_slice(p.pid, res.agents_slice)

    res.env["RES_SESSION_MEM_GB"] = "1.5"
    out = res.ok("adopt")
    scope = f"{res.prefix}-claude-{p.pid}.scope"
    assert out.lines == [f"adopted claude pid {p.pid} and 2 child processes into {scope}"], str(out)
    for pid in (p.pid, *kids):
        if pid != scoped:
            assert cgroup_line(pid).endswith(f"/{res.agents_slice}/{scope}"), (pid, cgroup_line(pid))
    assert cgroup_line(scoped).endswith("/" + own)  # its own unit and limits: left alone
    props = unit_props(scope, "Scope")
    assert props["MemoryHigh"] == int(1.5 * GIB) and props["Slice"] == res.agents_slice
    assert p.poll() is None  # moved, not restarted

    # Nothing left to do; a changed session_mem_gb is applied to the scope in place.
    assert res.ok("adopt").lines == [f"no agent session to move into {res.agents_slice}"]
    res.env["RES_SESSION_MEM_GB"] = "2"
    assert res.ok("adopt").lines == [f"{scope}: MemoryHigh 1.5 GB → 2.0 GB (session_mem_gb)"]
    assert unit_props(scope, "Scope")["MemoryHigh"] == 2 * GIB


def test_shell_init_alias_starts_a_session_in_the_slice(res):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bin_dir = res.tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\ncat /proc/self/cgroup\n")
    (bin_dir / "claude").chmod(0o755)
    res.env["RES_SESSION_MEM_GB"] = "1"
    res.ok("reconcile")  # the slices exist
    line = res.ok("shell-init").one_line()
    assert line.startswith("alias claude=") and f"--slice={res.agents_slice}" in line
    script = f"shopt -s expand_aliases\n{line}\nclaude\n"
    env = dict(res.env, PATH=f"{bin_dir}:{res.env['PATH']}")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^\d+:[^:\n]*:(/\S+)?/{re.escape(res.agents_slice)}/run-\S+\.scope$", r.stdout, re.M), r.stdout


def test_a_scope_name_still_taken_by_an_earlier_session_gets_a_name_of_its_own(res):
    """An earlier session with the same pid left a child in its scope: the name is taken, and the
    new session is adopted under another name instead of failing every pass."""
    bin_dir = res.tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(FAKE_CLAUDE)
    fake.chmod(0o755)
    p = res.popen([str(fake)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: len([q for q in processes().values() if q.ppid == p.pid]) == 2, "children started", 10)
    if foreign_sessions({p.pid}):
        pytest.skip("another claude session runs as this user; adopting would move it")
    taken = f"{res.prefix}-claude-{p.pid}.scope"
    holder = res.popen(["systemd-run", "--user", "--scope", "--quiet", f"--unit={taken}", f"--slice={res.agents_slice}",
                        "sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: unit_props(taken, "Scope")["ActiveState"] == "active", "the old scope is up", 20)
    out = res.ok("adopt")
    m = re.fullmatch(rf"adopted claude pid {p.pid} and 2 child processes into ({re.escape(taken[:-6])}-\d+\.scope)",
                     out.one_line())
    assert m, str(out)
    assert cgroup_line(p.pid).endswith(f"/{res.agents_slice}/{m.group(1)}")
    assert holder.poll() is None  # the earlier scope's process is left alone
    assert res.ok("adopt").lines == [f"no agent session to move into {res.agents_slice}"]


def test_res_adopt_through_the_running_loop(res):
    """With `res serve` running (adopt_sessions off, as in every test), `res adopt` asks the loop:
    the pass that answers adopts, and the line says so."""
    bin_dir = res.tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(FAKE_CLAUDE)
    fake.chmod(0o755)
    res.env["RES_TICK_S"] = "0.2"  # passes all the time: `res adopt` must not be answered by one under way
    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() or serve.poll() is not None, "saw the serve socket")
    assert serve.poll() is None
    p = res.popen([str(fake)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: len([q for q in processes().values() if q.ppid == p.pid]) == 2, "children started", 10)
    if foreign_sessions({p.pid}):
        pytest.skip("another claude session runs as this user; adopting would move it")
    res.passes(3)  # several of the loop's own passes: none of them adopts
    assert not in_slice(p.pid, res.agents_slice)
    scope = f"{res.prefix}-claude-{p.pid}.scope"
    assert res.ok("adopt").lines == [f"adopted claude pid {p.pid} and 2 child processes into {scope}"]
    assert cgroup_line(p.pid).endswith(f"/{res.agents_slice}/{scope}")
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(30) == 0


def test_game_on_never_fails_when_the_manager_is_unreachable(res):
    """Written is done: the line says game on, stderr says why the slice is not set yet, exit 0; the
    reserve is in game.toml for the next pass that can reach the manager."""
    away = {"DBUS_SESSION_BUS_ADDRESS": f"unix:path={res.tmp}/no-bus", "XDG_RUNTIME_DIR": str(res.tmp)}
    r = res("game", "on", "--for", "1h", env=away)
    assert r.code == 0 and re.fullmatch(r"game on until \d\d:\d\d \(60 min\); CPU/IO now yours", r.lines[0]), str(r)
    assert all(line.startswith("res: ") and line.endswith("the next pass retries") for line in r.err_lines), str(r)
    assert any("user manager unreachable" in line for line in r.err_lines), str(r)
    assert tomllib.loads((res.state / "desired" / "game.toml").read_text())["on"] is True
    res.ok("reconcile")  # reachable again: the slice follows
    assert slice_values(res.agents_slice)["CPUWeight"] == 5
