"""The planner and the executor, whole passes, on the in-memory runtime (tests/fakeruntime.py): the
runtime protocol is all the shell needs to run, stop, settle and requeue jobs. Real files (the state
directory, state.db, queue.toml), no systemd."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.core.models import Phase  # noqa: E402


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def job(title: str, **kw) -> dict:
    return dict(title=title, project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["true"], cwd="/",
                env={"PATH": "/usr/bin", "API_TOKEN": "secret-value"}, created=1.0, **kw)


def run(engine, coro):
    return asyncio.run(coro)


def test_a_job_is_started_observed_and_settled_through_the_protocol(engine):
    e, rt = engine

    async def go():
        await e.connect()
        req = e.writer.add(job("unit tests"))
        await e.tick()
        rec = e.store.get(req.id)
        assert (rec.phase, rec.unit, rec.attempt, rec.invocation) == (Phase.running, f"fake-{req.id}", 1, "inv-1")
        assert [s.job_id for s in rt.specs] == [req.id] and rt.specs[0].cmd[0] == "/usr/bin/true"
        rt.end(req.id, rc=3)
        await e.tick()
        done = e.store.get(req.id)
        assert (done.phase, done.rc, done.why, done.outcome, done.peak_gb) == (Phase.done, 3, "exit code 3", "exited", 0.25)
        assert rt.forgotten == [req.id]

    asyncio.run(go())


def test_a_released_job_is_stopped_and_settled_as_released(engine):
    from reconciler.ops.requests import release

    e, rt = engine

    async def go():
        await e.connect()
        req = e.writer.add(job("e2e"))
        await e.tick()
        code, line, _ = await release(e, e.tick, req.id, True)
        assert rt.stopped == [req.id]
        rec = e.store.get(req.id)
        assert (code, rec.phase, rec.rc, rec.why, rec.outcome) == (0, Phase.done, 143, "released", "released"), line

    asyncio.run(go())


def test_a_start_the_runtime_refuses_is_settled_once_with_why(engine):
    e, rt = engine

    async def go():
        await e.connect()
        rt.refuse_start = "no such slice"
        req = e.writer.add(job("build"))
        await e.tick()
        rec = e.store.get(req.id)
        assert (rec.phase, rec.rc, rec.outcome, rec.why) == (Phase.done, None, "start_failed", "start failed: no such slice")
        await e.tick()
        assert len(rt.specs) == 0 and e.store.get(req.id).phase == Phase.done  # never started twice

    asyncio.run(go())


def test_an_unreachable_runtime_is_acted_on_by_nothing(engine):
    e, rt = engine

    async def go():
        await e.connect()
        req = e.writer.add(job("lint"))
        await e.tick()
        rt.reachable = False
        rt.end(req.id, rc=0)  # it ended, but nobody can see it
        p = await e.tick()
        assert e.store.get(req.id).phase == Phase.running
        assert any("fake runtime is unreachable" in n for n in p.notices), p.notices

    asyncio.run(go())
