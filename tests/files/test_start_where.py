"""Where a job starts is the start action's own field (`Action.where`, set by the planner: a cluster
start's is "cluster"), and the executor starts it there: on the cluster's runtime (Slurm in the loop,
a second in-memory runtime here) or this machine's. The detail's `where` is the plan reader's copy and
steers nothing. Real files (state.db), the in-memory runtime (tests/fakeruntime.py)."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import FakeRuntime, fake_engine  # noqa: E402

from reconciler.core.models import Action, Phase, Request  # noqa: E402


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def _req(n: int) -> Request:
    return Request(id=f"r-{n}", title=f"job {n}", mem_gb=0.5, est_s=60, created=time.time(), cmd=["true"], cwd="/")


def test_the_executor_starts_a_job_where_its_action_says(engine):
    e, here = engine
    cluster = FakeRuntime()
    cluster.logs_dir = e.paths.logs  # its nodes write where this machine does: no log_dir of its own
    e.executor.cluster = cluster
    requests = {r.id: r for r in (_req(1), _req(2), _req(3))}
    actions = [
        Action(kind="start", id="r-1", where="cluster", detail={"code": "submit", "where": "cluster"}),
        Action(kind="start", id="r-2"),  # a local start says nothing of where in its detail
        # the display's copy alone moves nothing: the typed field is the executor's word
        Action(kind="start", id="r-3", detail={"code": "submit", "where": "cluster"}),
    ]

    async def go():
        await e.connect()
        e.executor.begin_pass({})
        for a in actions:
            await e.executor.apply(a, requests, time.time())

    asyncio.run(go())
    assert [s.job_id for s in cluster.specs] == ["r-1"]
    assert [s.job_id for s in here.specs] == ["r-2", "r-3"]
    assert [(e.store.get(i).phase, e.store.get(i).where) for i in ("r-1", "r-2", "r-3")] == [
        (Phase.running, "cluster"), (Phase.running, "local"), (Phase.running, "local")]
