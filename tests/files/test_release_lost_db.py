"""A job stopped with `res release --stop` while state.db was lost (issue 40 item 6) says it was
stopped on request, never `lost`; a release never answers "released" for a unit that still runs.
Real files and state.db, the in-memory runtime."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.core.models import JobObs  # noqa: E402
from reconciler.loop.tick import Engine  # noqa: E402
from reconciler.ops import requests as ops  # noqa: E402
from reconciler.recorded.errors import StoreReplaced  # noqa: E402

JOB = dict(title="build", project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["sleep", "1000"], cwd="/", created=1.0)


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def _running(engine) -> str:
    e, runtime = engine
    made = e.writer.add(JOB)
    asyncio.run(e.tick())
    asyncio.run(e.tick())
    assert e.store.get(made.id).phase.value == "running" and runtime.units[made.id].state == "active"
    return made.id


def _lose_state_db(e) -> None:
    for p in e.paths.root.glob("state.db*"):
        p.unlink()


def test_a_release_on_a_loop_whose_state_db_is_gone_says_so_and_changes_nothing(engine):
    e, runtime = engine
    job = _running(engine)
    _lose_state_db(e)
    with pytest.raises(StoreReplaced):
        asyncio.run(ops.release(e, e.tick, job, True))
    assert f'id = "{job}"' in e.paths.queue.read_text()  # nothing was removed
    assert runtime.stopped == []


def test_after_state_db_is_lost_release_stop_stops_the_job_and_says_released(engine):
    e, runtime = engine
    job = _running(engine)
    _lose_state_db(e)
    fresh = Engine(e.paths, e.policy, runtime=runtime)  # the next instance: a new, empty state.db
    try:
        code, line, data = asyncio.run(ops.release(fresh, fresh.tick, job, True))
        assert runtime.stopped == [job], (code, line)
        assert code == 0 and line.startswith(f"{job} released (done"), line
        rec = fresh.store.get(job)
        assert rec.detail["code"] == "released" and "lost" not in (rec.why or ""), rec
    finally:
        asyncio.run(fresh.close())


def test_a_stopped_job_whose_unit_left_no_exit_record_is_released_not_lost(engine):
    e, runtime = engine
    job = _running(engine)

    async def vanish(job_id, kill=False):  # the unit goes, its exit record with it (a wiped state dir)
        runtime.stopped.append(job_id)
        runtime.units[job_id] = JobObs(state="absent")

    runtime.stop = vanish
    code, line, _ = asyncio.run(ops.release(e, e.tick, job, True))
    rec = e.store.get(job)
    assert rec.phase.value == "done" and rec.detail["code"] == "released", rec
    assert rec.rc is None and "without an exit record of its own" in rec.why and "lost" not in rec.why, rec.why
    assert code == 0 and line == f"{job} released (done)", line


def test_an_id_neither_file_knows_whose_unit_runs_is_stopped_on_request(engine):
    e, runtime = engine
    job = _running(engine)
    _lose_state_db(e)
    e.paths.queue.write_text("next_id = 9\n")  # its entry gone too (a release whose pass never ran)
    fresh = Engine(e.paths, e.policy, runtime=runtime)
    try:
        fresh.connected = True
        code, line, _ = asyncio.run(ops.release(fresh, fresh.tick, job, False))
        assert code == 1 and "--stop to stop it" in line and runtime.stopped == []
        code, line, _ = asyncio.run(ops.release(fresh, fresh.tick, job, True))
        assert code == 0 and line.startswith(f"{job} stopped: state.db had no record of it"), line
        assert runtime.stopped == [job]
        code, line, _ = asyncio.run(ops.release(fresh, fresh.tick, "r-99", True))
        assert (code, line) == (1, "res: no such entry: r-99")
    finally:
        asyncio.run(fresh.close())
