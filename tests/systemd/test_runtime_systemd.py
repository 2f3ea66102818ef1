"""The systemd runtime on a real user manager (DESIGN §6, §9, §12): real units, real MemoryMax kills,
real logs and exit records. Properties are read back over D-Bus with a connection of the test's own.
The parts that need no manager (slice paths, mount parsing, the environment filter, the exit-record
script run by hand, an unreachable bus) are tests/files/test_runtime_parts.py."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.observed import cgroup
from reconciler.runtime import JobSpec
from reconciler.runtime.jobunit import EXIT_RECORD_SCRIPT
from reconciler.runtime.systemd import SystemdRuntime

from clihelp import dbus_call, session_bus, unit_props_async

systemd = pytest.mark.systemd
GB = 1024**3
PY = sys.executable


# ---------------------------------------------------------------- helpers


def unit_props(unit: str):
    """All Unit and Service properties of a loaded unit, read back over our own connection (awaitable)."""
    return unit_props_async(unit, load="GetUnit")


async def manager_prop(name: str):
    async with session_bus() as bus:
        (v,) = await dbus_call(bus, "/org/freedesktop/systemd1", "org.freedesktop.DBus.Properties", "Get", "ss",
                               ["org.freedesktop.systemd1.Manager", name])
        return v.value


async def manager_env() -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in await manager_prop("Environment"))


async def manager_call(member: str, signature: str, body: list):
    """A Manager method call on a connection of our own; the reply message (which may be an error)."""
    from dbus_fast import Message

    async with session_bus() as bus:
        return await bus.call(Message(destination="org.freedesktop.systemd1", path="/org/freedesktop/systemd1",
                                      interface="org.freedesktop.systemd1.Manager", member=member,
                                      signature=signature, body=body))


async def manager_reload() -> None:
    """`systemctl --user daemon-reload`: Manager.Reload answers once the reload is done."""
    from dbus_fast import MessageType

    reply = await manager_call("Reload", "", [])
    assert reply.message_type is not MessageType.ERROR, reply.body


@dataclass
class Ctx:
    prefix: str
    jobs_slice: str
    agents_slice: str
    logs: Path
    tmp: Path
    ids: set[str] = field(default_factory=set)
    _n: int = 0

    def runtime(self, logs: Path | None = None) -> SystemdRuntime:
        return SystemdRuntime(self.prefix, self.jobs_slice, self.logs if logs is None else logs)

    @asynccontextmanager
    async def running(self, logs: Path | None = None):
        """A runtime for the block, closed at its end whatever happens."""
        rt = self.runtime(logs)
        try:
            yield rt
        finally:
            await rt.close()

    def spec(self, cmd: list[str], mem_gb: float = 0.25, env: dict[str, str] | None = None,
             cwd: str | None = None, job_id: str | None = None) -> JobSpec:
        if job_id is None:
            self._n += 1
            job_id = f"r-{self._n}"
        self.ids.add(job_id)
        return JobSpec(job_id=job_id, cmd=cmd, cwd=str(self.tmp) if cwd is None else cwd,
                       env=dict(os.environ) if env is None else env, mem_gb=mem_gb, cpus=1,
                       log_path=self.logs / f"{job_id}.log", exit_path=self.logs / f"{job_id}.exit.json",
                       description=f"test {job_id}")

    async def cleanup(self) -> list[str]:
        """Stop and forget every unit of ours, stop the test's slices; return what was still there."""
        async with self.running() as rt:
            seen = await rt.observe(sorted(self.ids))
            left = [j for j, o in seen.items() if o.state != "absent"]
            for job_id in set(seen) | self.ids:
                await rt.stop(job_id, timeout=30)
                await rt.forget(job_id)
            for s in (self.jobs_slice, self.agents_slice):
                await manager_call("StopUnit", "ss", [s, "replace"])  # an error if never created: fine
            after = await rt.observe([])
            assert not after, f"units left behind: {sorted(after)}"
            return left


@pytest.fixture
def ctx(user_manager, res_env):
    logs = res_env["state"] / "logs"
    logs.mkdir(parents=True, mode=0o700)
    work = res_env["tmp"] / "work"
    work.mkdir()
    c = Ctx(os.environ["RES_UNIT_PREFIX"], os.environ["RES_JOBS_SLICE"], f"{res_env['tag']}.slice", logs, work)
    yield c
    asyncio.run(c.cleanup())


async def observe_one(rt: SystemdRuntime, job_id: str):
    return (await rt.observe([job_id]))[job_id]


async def wait_exit(rt: SystemdRuntime, job_id: str, timeout: float = 20):
    """Observe until the job has ended and its exit record is there."""
    deadline = time.monotonic() + timeout
    while True:
        obs = await observe_one(rt, job_id)
        if obs.exit is not None and obs.state in ("absent", "inactive", "failed"):
            return obs
        assert time.monotonic() < deadline, f"{job_id} did not end in {timeout} s: {obs}"
        await asyncio.sleep(0.05)


async def run_to_exit(rt: SystemdRuntime, spec: JobSpec):
    """Start the job and observe until it has ended (wait_exit)."""
    await rt.start(spec)
    return await wait_exit(rt, spec.job_id)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# ---------------------------------------------------------------- pure


















# ---------------------------------------------------------------- on a real user manager


@systemd
def test_unit_properties_read_back(ctx):
    env = dict(os.environ, RES_T_VAR="a $HOME %h ${X}", FOO_TOKEN="leak", db_Password="leak")

    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec(["sh", "-c", "exec sleep 30", "$HOME"], mem_gb=0.5, env=env)
            t0 = time.perf_counter()
            await rt.start(spec)
            took = time.perf_counter() - t0
            p = await unit_props(rt.unit_name(spec.job_id))
            menv, mgr_cgroup = await manager_env(), await manager_prop("ControlGroup")
        return spec, p, menv, mgr_cgroup, took

    spec, p, menv, mgr_cgroup, took = asyncio.run(go())
    assert p["ActiveState"] == "active" and p["SubState"] == "running"
    assert p["MemoryMax"] == GB // 2
    assert p["MemoryHigh"] == 2**64 - 1  # none (infinity): on cgroup v2 it would only slow the job (docs/guest.md)
    assert p["MemorySwapMax"] == 0
    assert p["OOMPolicy"] == "continue"  # one process killed at the cap is the job's to handle (v2; docs/guest.md)
    assert p["Nice"] == 10
    assert p["Slice"] == ctx.jobs_slice
    assert p["WorkingDirectory"] == str(ctx.tmp)
    assert p["Type"] == "exec"
    assert p["CollectMode"] == "inactive-or-failed"
    assert p["Description"] == f"test {spec.job_id}"
    unit_env = p["Environment"]
    assert "RES_T_VAR=a $HOME %h ${X}" in unit_env
    assert not [e for e in unit_env if "TOKEN" in e.upper() or "PASSWORD" in e.upper()], unit_env
    same = [k for k, v in os.environ.items() if menv.get(k) == v]
    assert same, "expected some variable shared with the manager (HOME, LANG, ...)"
    assert not [e for e in unit_env if e.split("=", 1)[0] in same], unit_env
    assert f"RES_EXIT_RECORD={spec.exit_path}" in unit_env
    # ExecStart: every $ doubled (systemd turns $$ back into $); ExecStopPost runs the exit record
    (path, argv, ignore, *_rest) = p["ExecStart"][0]
    assert argv == ["sh", "-c", "exec sleep 30", "$$HOME"] and not ignore
    (path, argv, ignore, *_rest) = p["ExecStopPost"][0]
    assert argv == [PY, "-I", "-S", EXIT_RECORD_SCRIPT, str(spec.exit_path)] and ignore
    # the cgroup path the runtime computes for memory readings is systemd's own
    assert p["ControlGroup"] == cgroup.unit_cgroup(mgr_cgroup, ctx.jobs_slice, f"{ctx.prefix}-{spec.job_id}.service")
    assert mode(spec.log_path) == 0o600
    assert took < 2, took


@systemd
def test_argv_and_environment_reach_the_job_verbatim(ctx):
    args = ["%h", "%n", "%%", "$HOME", "${HOME}", "$$", "$", ";", "&&", "|", "'single'", '"double"',
            "a\nb", "", "  spaced  ", "\\n", "*", "~", "ü €"]
    code = "import os,sys,json; print(json.dumps([sys.argv[1:], os.environ.get('RES_T_VAR')]))"

    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec([PY, "-c", code, *args], env=dict(os.environ, RES_T_VAR="$HOME %h\t'x'\nnext"))
            return spec, await run_to_exit(rt, spec)

    spec, obs = asyncio.run(go())
    assert obs.exit.status == "0", spec.log_path.read_text()
    got_args, got_env = json.loads(spec.log_path.read_text())
    assert got_args == args
    assert got_env == "$HOME %h\t'x'\nnext"


@systemd
def test_exit_records_rc0_and_rc3(ctx):
    # a caller that runs in a unit itself passes systemd's variables of its own unit: they must not
    # reach the exit record
    env = dict(os.environ, SERVICE_RESULT="bogus", EXIT_CODE="bogus", EXIT_STATUS="99",
               RES_EXIT_RECORD=str(ctx.tmp / "elsewhere.json"), INVOCATION_ID="0" * 32)

    async def go():
        async with ctx.running() as rt:
            ok = ctx.spec(["true"], env=env)
            bad = ctx.spec(["sh", "-c", "echo out; echo err >&2; exit 3"], env=env)
            await rt.start(ok)
            await rt.start(bad)
            return ok, bad, (await wait_exit(rt, ok.job_id), await wait_exit(rt, bad.job_id))

    ok, bad, (o, b) = asyncio.run(go())
    assert (o.exit.result, o.exit.code, o.exit.status) == ("success", "exited", "0")
    assert (b.exit.result, b.exit.code, b.exit.status) == ("exit-code", "exited", "3")
    for e in (o.exit, b.exit):
        assert e.oom_kills == 0
        assert e.peak_gb is not None and 0 < e.peak_gb < 0.25
        assert abs(e.at - time.time()) < 60
    assert o.state == b.state == "absent"  # CollectMode: no stale units
    assert bad.log_path.read_text() == "out\nerr\n"
    assert mode(bad.exit_path) == 0o600 and mode(bad.log_path) == 0o600
    assert not list(ctx.logs.glob(".*.tmp"))
    assert not (ctx.tmp / "elsewhere.json").exists()


@systemd
def test_stop_records_term_and_observe_reports_memory(ctx):
    code = "import time; b = bytearray(96 * 2**20); print('ready', flush=True); time.sleep(60)"

    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec([PY, "-c", code], mem_gb=0.5)
            await rt.start(spec)
            for _ in range(200):
                if "ready" in spec.log_path.read_text():
                    break
                await asyncio.sleep(0.05)
            other = ctx.spec(["sleep", "30"])
            await rt.start(other)
            running = await rt.observe([spec.job_id, "r-999999"])
            t0 = time.perf_counter()
            await rt.stop(spec.job_id)
            stop_s = time.perf_counter() - t0
            after = await rt.observe([spec.job_id])
            await rt.stop(spec.job_id)  # idempotent: the unit is gone
            await rt.stop("r-999998")  # never existed
        return spec, other, running, after, stop_s

    spec, other, running, after, stop_s = asyncio.run(go())
    me = running[spec.job_id]
    assert me.state == "active" and me.exit is None
    assert 0.09 < me.mem_used_gb < 0.3, me
    assert running[other.job_id].state == "active"  # ours, though not asked for
    assert running["r-999999"].state == "absent" and running["r-999999"].exit is None
    # stop() returns once the unit has ended, exit record written
    assert after[spec.job_id].state == "absent"
    e = after[spec.job_id].exit
    assert (e.code, e.status) == ("killed", "TERM")
    assert e.result == "success"  # a stop asked for is a clean end for systemd
    assert e.peak_gb > 0.09
    assert stop_s < 5


@systemd
def test_memory_max_kill_is_recorded(ctx):
    limit_gb = 64 / 1024

    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec([PY, "-c", "b = bytearray(300 * 2**20); print('survived')"], mem_gb=limit_gb)
            return spec, await run_to_exit(rt, spec)

    spec, obs = asyncio.run(go())
    e = obs.exit
    assert e.status == "KILL" and e.code == "killed", e
    assert e.result in ("signal", "oom-kill"), e  # v1 (here): signal; v2: oom-kill
    assert e.oom_kills >= 1, e
    assert 0.9 * limit_gb <= e.peak_gb <= 1.05 * limit_gb, e
    assert "survived" not in spec.log_path.read_text()


@systemd
def test_exit_is_recorded_while_nobody_watches(ctx):
    async def start():
        async with ctx.running() as rt:
            spec = ctx.spec(["sh", "-c", "sleep 1; exit 3"])
            await rt.start(spec)
            return spec, await observe_one(rt, spec.job_id)

    spec, before = asyncio.run(start())
    assert before.state == "active" and before.exit is None
    deadline = time.monotonic() + 15  # no runtime, no bus connection of ours: the unit writes it
    while not spec.exit_path.exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)

    rt = ctx.runtime()
    asyncio.run(rt.connect())
    obs = asyncio.run(observe_one(rt, spec.job_id))  # one runtime, a second event loop: it reconnects
    asyncio.run(rt.close())
    assert obs.state == "absent"
    assert (obs.exit.result, obs.exit.code, obs.exit.status) == ("exit-code", "exited", "3")


@systemd
def test_start_is_idempotent(ctx):
    marker = ctx.tmp / "starts"

    async def go():
        async with ctx.running() as rt:
            one = ctx.spec(["sh", "-c", f"echo started >> {marker}; exec sleep 30"])
            await rt.start(one)
            pid = (await unit_props(rt.unit_name(one.job_id)))["MainPID"]
            await rt.start(one)
            await asyncio.gather(rt.start(one), rt.start(one))
            pid2 = (await unit_props(rt.unit_name(one.job_id)))["MainPID"]
            # racing first starts, on separate connections, of a job that is not running yet
            two = ctx.spec(["sh", "-c", f"echo two >> {marker}; exec sleep 30"])
            rts = [ctx.runtime() for _ in range(4)]
            await asyncio.gather(*(r.start(two) for r in rts))
            for r in rts:
                await r.close()
            await asyncio.sleep(0.3)
            obs = await rt.observe([])
        return pid, pid2, obs, one, two

    pid, pid2, obs, one, two = asyncio.run(go())
    assert pid == pid2 and pid > 0
    assert marker.read_text().splitlines().count("started") == 1
    assert marker.read_text().splitlines().count("two") == 1
    assert obs[one.job_id].state == obs[two.job_id].state == "active"


@systemd
def test_start_after_an_ended_attempt_clears_the_old_record(ctx):
    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec(["sh", "-c", "exit 4"])
            first = await run_to_exit(rt, spec)
            spec2 = ctx.spec(["sh", "-c", "sleep 0.5; exit 5"], job_id=spec.job_id)
            await rt.start(spec2)
            mid = await observe_one(rt, spec.job_id)
            second = await wait_exit(rt, spec.job_id)
            await rt.forget(spec.job_id)
            gone = await observe_one(rt, spec.job_id)
        return first, mid, second, gone, spec

    first, mid, second, gone, spec = asyncio.run(go())
    assert first.exit.status == "4"
    assert mid.state == "active" and mid.exit is None  # the old record did not survive the new start
    assert second.exit.status == "5"
    assert gone.state == "absent" and gone.exit is None and not spec.exit_path.exists()


@systemd
def test_command_that_exits_at_once_is_not_a_failed_start(ctx):
    async def go():
        async with ctx.running() as rt:
            # the exit may race the start job: never an error
            return [await run_to_exit(rt, ctx.spec(["false"])) for _ in range(5)]

    for obs in asyncio.run(go()):
        assert (obs.exit.result, obs.exit.status) == ("exit-code", "1")


@systemd
@pytest.mark.parametrize("cmd,cwd,expect", [
    (["/nonexistent/res-no-such-binary"], None, "/nonexistent/res-no-such-binary: No such file or directory (status 203/EXEC)"),
    (["res-no-such-command-xyz", "arg"], None, "res-no-such-command-xyz: No such file or directory (status 203/EXEC)"),
    (["sleep", "1"], "/nonexistent-dir-res", "working directory /nonexistent-dir-res: No such file or directory"),
])
def test_failed_start_raises_one_line(ctx, cmd, cwd, expect):
    async def go():
        async with ctx.running() as rt:
            spec = ctx.spec(cmd, cwd=cwd)
            with pytest.raises(RuntimeError) as e:
                await rt.start(spec)
            obs = await observe_one(rt, spec.job_id)
        return spec, str(e.value), obs

    spec, msg, obs = asyncio.run(go())
    assert "\n" not in msg
    assert msg == f"start of {ctx.prefix}-{spec.job_id}.service failed: {expect}"
    assert obs.state == "absent"  # no stale failed unit


@systemd
def test_one_start_is_fast(ctx):
    """A start (state check, StartTransientUnit, waiting for the start job) takes milliseconds."""
    async def go():
        async with ctx.running() as rt:
            await rt.connect()
            times = []
            for _ in range(5):
                spec = ctx.spec(["sleep", "30"])
                t0 = time.perf_counter()
                await rt.start(spec)
                times.append(time.perf_counter() - t0)
        return sorted(times)

    times = asyncio.run(go())
    print(f"start ms: {[round(t * 1000, 1) for t in times]}")
    assert times[len(times) // 2] < 0.25, times


@systemd
def test_exit_record_survives_a_daemon_reload(ctx):
    """systemd 252 turns ExecStartEx/ExecStopPostEx units into `bad-setting` with no commands at a
    daemon-reload, and mangles `$` and `;` in Exec command lines: a reload while the job runs must still
    leave its exit record, even in a directory whose name has both."""
    logs = ctx.tmp / "odd $HOME; dir"
    logs.mkdir()
    args = ["$HOME", "a;b", "%h"]
    code = "import sys, json, time; print(json.dumps(sys.argv[1:]), flush=True); time.sleep(1); sys.exit(7)"

    async def go():
        async with ctx.running(logs) as rt:
            spec = ctx.spec([PY, "-c", code, *args])
            spec = dataclasses.replace(spec, log_path=logs / f"{spec.job_id}.log",
                                       exit_path=logs / f"{spec.job_id}.exit.json")
            await rt.start(spec)
            await manager_reload()
            after = await unit_props(rt.unit_name(spec.job_id))
            obs = await wait_exit(rt, spec.job_id)
            await rt.forget(spec.job_id)
        return spec, after, obs

    spec, after, obs = asyncio.run(go())
    assert after["LoadState"] == "loaded" and after["ActiveState"] == "active"
    assert after["ExecStopPost"], "the exit record command was lost at the reload"
    assert (obs.exit.result, obs.exit.code, obs.exit.status) == ("exit-code", "exited", "7")
    assert json.loads(spec.log_path.read_text().splitlines()[0]) == args
