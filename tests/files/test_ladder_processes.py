"""Files tier: the pressure ladder's last rung on real processes (DESIGN §5.1, policy
ladder_session_gb): an agent session's own processes outside any job are found by what they use, each
child of the session with everything under it, and stopped by pid only while they are the processes
that were seen; the stop is in the change log and marked for the views."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from reconciler.core.models import Action
from reconciler.loop.world import heavy_children
from reconciler.observed.procs import descendants, processes, start_time
from tests.fakeruntime import fake_engine

HOLD = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'\\1' * len(range(0, len(b), 4096)); print('up', flush=True); time.sleep(600)"


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def _spawn(mb: int, child_mb: int = 0) -> subprocess.Popen:
    """A process of ours holding `mb`, and under it (through a shell) one holding `child_mb`."""
    inner = f"{sys.executable} -c \"{HOLD}\" {child_mb} & exec {sys.executable} -c \"{HOLD}\" {mb}" if child_mb \
        else f"exec {sys.executable} -c \"{HOLD}\" {mb}"
    p = subprocess.Popen(["sh", "-c", inner], stdout=subprocess.PIPE, text=True)
    ups = 0
    while ups < 1 + bool(child_mb):  # (two writers on one pipe: their lines may come as "upup\n\n")
        line = p.stdout.readline()
        assert line, "the holders did not start"
        ups += line.count("up")
    return p


def test_a_session_childs_whole_subtree_is_counted_and_only_the_heavy_ones_are_listed():
    big, small = _spawn(200, child_mb=150), _spawn(20)
    try:
        procs = processes()
        me = __import__("os").getpid()
        found = heavy_children(procs, me, descendants(procs, me), 0.3)
        (heavy,) = [f for f in found if f["pid"] in (big.pid, small.pid)]
        assert heavy["pid"] == big.pid and 0.33 <= heavy["gb"] < 0.6  # 200 + 150 MB, and the interpreters
        assert len(heavy["pids"]) == 2 and heavy["start"] == start_time(big.pid)
        assert small.pid in [f["pid"] for f in heavy_children(procs, me, descendants(procs, me), 0.01)]  # 20 MB and more
    finally:
        for p in (big, small):
            p.kill()
            p.wait(10)


def test_the_stop_kills_the_subtree_seen_records_it_and_spares_a_pid_that_is_another_process_now(engine):
    eng, _ = engine
    p = _spawn(50, child_mb=50)
    procs = processes()
    tree = [p.pid] + descendants(procs, p.pid)
    process = {"pid": p.pid, "start": start_time(p.pid), "name": "python3", "gb": 0.12, "pids": tree,
               "session": 4121, "over_gb": 0.1}
    stale = dict(process, start="1")  # the pid seen then was another process: left alone
    act = Action(kind="evict", id=f"pid-{p.pid}", title=f"python3 pid {p.pid}", reason="over ladder_session_gb",
                 detail={"code": "evicted", "process": stale})
    asyncio.run(eng.executor.apply(act, {}, time.time()))
    assert p.poll() is None
    act.detail = {"code": "evicted", "process": process}
    asyncio.run(eng.executor.apply(act, {}, time.time()))
    p.wait(10)
    deadline = time.monotonic() + 10
    while any(start_time(pid) is not None for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(start_time(pid) is None for pid in tree)  # the shell's other child too
    (row,) = eng.store.changes(files=["processes"])
    assert row[4].startswith(f"stopped python3 pid {p.pid} (2 processes) of agent session pid 4121: ")
    assert eng.store.get_meta_json("process_stops")[-1]["pid"] == p.pid
