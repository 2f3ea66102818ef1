"""The machine view's readings on this machine's real /proc and cgroup files (observed/usage.py,
ops/view.read_usage): shapes and invariants, not values. And the watchers (loop/watch.py) on an
engine over real files: nothing built while nobody watches but the history's sample, a view per
pass while someone does, the history saved and a broken one started afresh."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.core import history as hist  # noqa: E402
from reconciler.loop import watch  # noqa: E402
from reconciler.observed import usage  # noqa: E402
from reconciler.observed.cgroup import process_unit_cgroup  # noqa: E402
from reconciler.ops import view as opsview  # noqa: E402
from reconciler.ops.view import read_usage  # noqa: E402
from ruleset import policy  # noqa: E402


def test_meminfo_whole():
    m = usage.meminfo()
    assert set(m) == {"total_gb", "available_gb", "free_gb"}
    assert 0 < m["free_gb"] <= m["total_gb"] and 0 < m["available_gb"] <= m["total_gb"]
    with pytest.raises(ValueError, match="MemAvailable"):
        usage.parse_meminfo("MemTotal: 100 kB\nMemFree: 50 kB\n")


def test_cpu_totals_only_grow_and_busy_is_part_of_total():
    busy, total = usage.cpu_times()
    assert 0 <= busy <= total
    end = time.process_time() + 0.2
    while time.process_time() < end:  # burn a little CPU: the busy count must move
        pass
    busy2, total2 = usage.cpu_times()
    assert busy2 > busy and total2 > total and busy2 <= total2
    assert usage.parse_cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\n") == (150 / usage.CLK_TCK, 1000 / usage.CLK_TCK)


def test_this_process_rss_and_cpu_time():
    rss, cpu = usage.self_usage()
    assert rss > 1 << 20 and cpu > 0
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert usage.self_usage()[1] > cpu


def test_a_process_tree_is_the_sum_of_its_processes():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(60)"],
                             stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while (usage.process_usage(child.pid) or (0, 0))[0] < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        own, tree = usage.process_usage(os.getpid()), usage.tree_usage(os.getpid())
        assert tree[0] >= own[0] + (64 << 20) and tree[1] >= own[1]
    finally:
        child.kill()
        child.wait()
    assert usage.process_usage(child.pid) is None and usage.tree_usage(child.pid) is None  # gone


def test_cgroup_readings_of_this_machine():
    with open("/proc/self/cgroup") as f:
        mine = process_unit_cgroup(f.read())
    for cg in ("/", mine):
        cpu = usage.cgroup_cpu_s(cg)
        assert cpu is None or cpu > 0
        mem = usage.cgroup_memory_bytes(cg)
        assert mem is None or mem > 0
    assert usage.cgroup_memory_bytes("/no-such-cgroup-here.slice/x.service") is None
    assert usage.cgroup_cpu_s("/no-such-cgroup-here.slice/x.service") is None
    assert usage.parse_usage_usec("usage_usec 2500000\nuser_usec 1\n") == 2500000
    assert usage.parse_usage_usec("user_usec 1\n") is None


def test_readings_walk_proc_only_when_asked(monkeypatch):
    """The cheap readings (the history's sample while nobody watches) never walk /proc: a session not
    in a scope is read only by a deep reading, from its process tree."""
    snap = {"world": {"sessions": [{"pid": os.getpid(), "in_slice": False}]}}
    import reconciler.observed.procs as procs

    def walked():
        raise AssertionError("walked /proc")

    monkeypatch.setattr(procs, "processes", walked)
    cheap = read_usage(policy(), None, {}, snap, deep=False)
    assert f"session:{os.getpid()}" not in cheap.use and cheap.cpu_busy_s is None
    assert cheap.use["res"].gb > 0 and cheap.use["res"].cpu_s is None
    monkeypatch.undo()
    deep = read_usage(policy(), None, {}, snap, deep=True)
    me = deep.use[f"session:{os.getpid()}"]
    assert me.gb > 0 and me.cpu_s > 0 and deep.cpu_busy_s <= deep.cpu_total_s
    assert 0 < deep.free_gb <= deep.total_gb and deep.nproc >= 1


# ---------------------------------------------------------------- the watchers


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def test_nobody_watching_builds_nothing_but_a_sample_at_most_every_30s(engine, monkeypatch):
    e, _ = engine
    built = []
    real = opsview.build_view
    monkeypatch.setattr(opsview, "build_view", lambda *a, **k: built.append(1) or real(*a, **k))
    w = watch.Watchers(e)
    w.after_pass()
    w.after_pass()  # within HISTORY_MIN_S: no second sample
    assert built == [] and len(w.samples) == 1
    saved = json.loads((e.paths.root / "history.json").read_text())
    assert saved == w.samples and set(saved[0]["gb"]) == {"sessions", "jobs", "you", "res", "cache"}
    assert saved[0]["gb"]["you"] > 0
    assert watch.Watchers(e).samples == saved  # loaded at start
    assert w.history(1) == saved and w.history(0) == []


def test_watchers_get_a_view_at_once_then_one_per_pass(engine, monkeypatch):
    e, _ = engine
    monkeypatch.setattr(watch, "VIEW_EVERY_S", 3600.0)  # only a pass wakes the push here

    async def scenario():
        w = watch.Watchers(e)
        q = w.subscribe()
        first = await asyncio.wait_for(q.get(), 30)
        assert first["v"] == 1 and first["loop"]["pid"] == os.getpid() and first["cpu"]["busy_pct"] is None
        assert {o["key"] for o in first["owners"]} >= {"you", "res"}
        await asyncio.sleep(0.3)  # /proc/stat counts in ticks: some must pass between the two readings
        w.after_pass()
        second = await asyncio.wait_for(q.get(), 30)
        assert second["at"] > first["at"] and second["cpu"]["busy_pct"] is not None  # CPU from two readings
        assert len(w.samples) == 1  # the pass's sample, from the view
        other = w.subscribe()
        assert other.get_nowait() is second  # a later watcher gets the last view at once
        w.unsubscribe(q)
        assert w.task is not None
        w.unsubscribe(other)
        assert w.task is None  # the last one gone: no task
        view = await w.view()
        assert view["at"] > second["at"]

    asyncio.run(scenario())


def test_a_broken_history_file_starts_empty_with_one_line(tmp_path, caplog):
    path = tmp_path / "history.json"
    for text in ("{not json", '{"t": 1}', '[{"t": "x", "gb": {}}]', "\xff"):
        path.write_bytes(text.encode("latin-1"))
        with caplog.at_level(logging.WARNING, logger="res.watch"):
            caplog.clear()
            assert watch.load_history(path) == []
        assert len(caplog.records) == 1 and "starting it empty" in caplog.records[0].getMessage()


def test_the_saved_history_is_bounded(tmp_path):
    now = time.time()
    samples = [{"t": now - 3000 + i, "gb": {"you": 1.0, "pad": "x" * 400}, "budget": 1.0, "reserve": 1.0}
               for i in range(3000)]
    watch.save_history(tmp_path / "history.json", hist.add(samples[:-1], samples[-1]))
    assert (tmp_path / "history.json").stat().st_size <= hist.MAX_BYTES
    assert len(watch.load_history(tmp_path / "history.json")) > 0
