"""Systemd tier, cgroup v2 only (issue 39): what res reads from and asks of the unified hierarchy, on a
real user manager, read back from the kernel's own files. Skipped where memory is on cgroup v1 (this
project's development machines); run by the guest tier (tests/guest, docs/guest.md) in a Debian 12
guest with systemd as PID 1 and a login user's manager.

- a job's peak is its cgroup's `memory.peak`; a kill from outside is told from an OOM kill by
  `memory.events` `oom_kill` (and a worker OOM-killed inside a job that exits 1 is counted too);
- the agents slice's own `memory.pressure`, made real by an allocation throttled at a `MemoryHigh` (as
  res sets on an adopted session's scope), is what admission and the ladder read: new work is refused
  while it holds, held it is the ladder's red (which stops no job within its book), and queued work
  starts once it falls;
- game mode reaches the kernel: the slice's `cpu.weight` and `memory.high` files;
- systemd-oomd: the jobs slice asks for it (`ManagedOOMMemoryPressure=kill`), the agents slice does not.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clihelp import GIB, meminfo_gb, res, serving, unit_props, wait_for  # noqa: F401
from reconciler.core.game import MEMORY_HIGH_STEP
from reconciler.observed.pressure import read_full_avg10

pytestmark = pytest.mark.systemd

PY = sys.executable


def _unified_memory() -> bool:
    """Memory is on cgroup v2 (the project's own reading of /proc/self/mountinfo)."""
    from reconciler.observed.cgroup import parse_memory_mount

    try:
        with open("/proc/self/mountinfo") as f:
            found = parse_memory_mount(f.read())
    except OSError:
        return False
    return found is not None and found.version == 2


if not _unified_memory():
    pytest.skip("memory is not on cgroup v2 here (the guest tier runs these: docs/guest.md)", allow_module_level=True)


def cgroup_dir(unit: str, kind: str) -> str:
    return "/sys/fs/cgroup" + unit_props(unit, kind)["ControlGroup"]


def keyed(path: str) -> dict[str, int]:
    with open(path) as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def job_id(said: str) -> str:
    """The job's id in what `res run` said (`r-3 started; …`, `r-3 queued, …`, `r-3 done …`)."""
    m = re.search(r"\b(r-\d+) (?:started|queued|done)", said)
    assert m, said
    return m.group(1)


def test_peak_is_memory_peak_and_an_oom_kill_is_told_from_a_signal(res):
    serving(res)
    touch = "b = bytearray({mb} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    # 120 MB touched under a 512 MB cap: the record's peak is the cgroup's memory.peak
    r = res("run", "--wait", "--mem", "512M", "--for", "1m", "--cpus", "0.1", "--", PY, "-c", touch.format(mb=120))
    assert r.code == 0, str(r)
    st = res.status(job_id(r.out + r.err))
    assert 120 / 1024 <= st["peak_gb"] <= 250 / 1024, st

    # killed from outside with SIGKILL: a signal, no OOM kill in memory.events
    go = res.tmp / "killed"
    own = textwrap.dedent(f"""
        import os, signal
        open({str(go)!r}, "w").write(str(os.getpid()))
        signal.pause()
    """)
    killed = res.spawn("run", "--wait", "--mem", "256M", "--for", "1m", "--cpus", "0.1", "--", PY, "-c", own)
    wait_for(go.exists, "the job running")
    wait_for(lambda: go.read_text().strip().isdigit(), "its pid written")
    os.kill(int(go.read_text()), 9)  # the job's own process, by the pid it wrote
    out, err = killed.communicate(timeout=120)
    assert killed.returncode == 137, (out, err)
    st = res.status(job_id(out + err))
    assert "memory" not in (st.get("why") or "") and st["reason"]["code"] != "memory_limit", st

    # a worker killed at the job's cap while the job's main process goes on and exits 1: memory.events
    # counted it, and the record says so (the job's cgroup had the OOM kill, not the main process)
    worker = f"{PY} -c 'b = bytearray(300 << 20)'; echo worker gone; exit 1"
    r = res("run", "--wait", "--mem", "64M", "--for", "1m", "--cpus", "0.1", "--", "sh", "-c", worker)
    assert r.code == 1 and "worker gone" in r.out, str(r)
    st = res.status(job_id(r.out + r.err))
    assert "killed at its memory limit" in st["why"] and "1 of its processes" in st["why"], st


HOG = str(Path(__file__).with_name("throttled_alloc.py"))  # (a window of anonymous memory renewed forever)


def test_the_agents_slices_own_memory_pressure_holds_back_new_work_and_lets_it_go(res):
    res.shape(free_gb=1.5)
    res.env.update({"RES_PRESSURE_FULL_PCT": "10", "RES_TICK_S": "0.5"})
    for stand_in in ("RES_PRESSURE_FILE", "RES_SLICE_PRESSURE_FILE"):
        res.env.pop(stand_in, None)  # the kernel's own files
    serving(res)
    steady = res.started("sleep", "600", mem="32M")  # new work starts; it uses less than its book
    hog = f"{res.prefix}-session-hog.service"
    subprocess.run(["systemd-run", "--user", "--quiet", "--unit", hog, "--slice", res.agents_slice,
                    "-p", "MemoryHigh=64M", "-p", "MemorySwapMax=0", PY, HOG],
                   env=res.env, check=True, timeout=60)
    pressure = os.path.join(cgroup_dir(res.agents_slice, "Slice"), "memory.pressure")

    def observed() -> float | None:
        return json.loads(res.ok("observe", "--json").out).get("slice_pressure_full_pct")

    wait_for(lambda: (observed() or 0) > 10, "the slice's pressure over 10 %", 120, step=0.5)
    assert (read_full_avg10(pressure) or 0) > 10  # the kernel's file says the same
    events = keyed(os.path.join(cgroup_dir(hog, "Service"), "memory.events"))
    assert events["high"] > 0 and events["oom_kill"] == 0, events  # throttled, never killed
    r = res.run_job("true", mem="32M")
    assert r.code == 3 and re.match(r"busy: memory pressure \d+ % \(full, 10 s\)", r.one_line()), str(r)
    queued = res("run", "--queue", "--mem", "32M", "--for", "1m", "--cpus", "0.1", "--", "true")
    assert queued.code == 0 and " queued, position 1" in queued.one_line(), str(queued)

    # held over the line (avg10 and avg60): the ladder's red, which stops only a job above its book
    # (DESIGN §5.1): none here, so the steady job goes on
    wait_for(lambda: (res.status_all()["ladder"] or {}).get("rung") == "red", "the ladder at red", 120, step=0.5)
    assert "memory pressure held over pressure_full_pct" in res.status_all()["ladder"]["line"]
    res.passes(2)
    assert res.status(steady)["state"] == "running"

    subprocess.run(["systemctl", "--user", "stop", hog], env=res.env, check=True, timeout=60)
    qid = job_id(queued.out)
    wait_for(lambda: res.status(qid)["state"] == "done", "the queued job run once the pressure fell", 180, step=0.5)
    assert res.status(qid)["rc"] == 0


def test_game_mode_reaches_the_kernels_files(res):
    ram = meminfo_gb("MemTotal")
    res.env.update(RES_USER_RESERVE_GB="2", RES_GAME_RESERVE_GB="3")
    res.started("sleep", "600", mem="64M")  # the slice has a cgroup while something runs in it
    d = cgroup_dir(res.agents_slice, "Slice")

    def files() -> tuple[int, int]:
        with open(os.path.join(d, "cpu.weight")) as w, open(os.path.join(d, "memory.high")) as h:
            return int(w.read()), int(h.read())

    step = MEMORY_HIGH_STEP
    assert files() == (20, -(-int((ram - 2) * GIB) // step) * step)
    res.ok("game", "on", "--for", "1h")
    assert files() == (5, -(-int((ram - 3) * GIB) // step) * step)
    res.ok("game", "off")
    assert files()[0] == 20


def test_systemd_oomd_is_asked_to_watch_the_jobs_slice_and_not_the_agents_slice(res):
    from reconciler.runtime.unitfiles import oomd_present

    if not oomd_present():
        pytest.skip("systemd-oomd is not installed here")
    res.started("sleep", "600", mem="64M")
    assert unit_props(res.jobs_slice, "Slice")["ManagedOOMMemoryPressure"] == "kill"
    assert unit_props(res.agents_slice, "Slice")["ManagedOOMMemoryPressure"] == "auto"
    oomctl = shutil.which("oomctl") or "/usr/bin/oomctl"
    dump = subprocess.run([oomctl, "dump"], capture_output=True, text=True, timeout=30, env=res.env)
    if dump.returncode != 0:
        pytest.skip(f"oomctl dump: {dump.stderr.strip()}")
    jobs = unit_props(res.jobs_slice, "Slice")["ControlGroup"]
    monitored = dump.stdout.split("Memory Pressure Monitored CGroups:", 1)[-1]
    assert f"Path: {jobs}" in monitored, dump.stdout
    agents = unit_props(res.agents_slice, "Slice")["ControlGroup"]
    assert f"Path: {agents}\n" not in monitored, dump.stdout
