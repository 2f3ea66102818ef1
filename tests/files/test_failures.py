"""Files tier: how the loop treats a failure (core/errors.py), on the in-memory runtime
(tests/fakeruntime.py). One the world may not meet next time is tried again by the next pass, which
comes in tick_s; one that needs a person is said in every pass's notices, as before, but not tried
again in a loop, and asks for no pass of its own."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.apply.executor import Executor  # noqa: E402
from reconciler.core.lifecycle import IllegalTransition  # noqa: E402
from reconciler.core.models import Phase  # noqa: E402
from reconciler.loop.tick import PERSON_RETRY_S  # noqa: E402


@pytest.fixture
def engine(tmp_path, monkeypatch):
    for e, _runtime in fake_engine(tmp_path, monkeypatch):
        yield e


def job(title: str) -> dict:
    return dict(title=title, project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["true"], cwd="/",
                env={"PATH": "/usr/bin"}, created=1.0)


def failing(error: Exception, calls: list):
    async def handler(self, a, req, rec, now):
        calls.append(a.id)
        raise error
    return handler


def test_an_action_that_may_pass_next_time_is_tried_by_the_next_pass_soon(engine, monkeypatch):
    calls: list[str] = []
    monkeypatch.setitem(Executor.HANDLERS, "start", failing(OSError(5, "Input/output error"), calls))

    async def go():
        await engine.connect()
        req = engine.writer.add(job("build"))
        for _ in range(2):
            p = await engine.tick()
            assert f"start {req.id} failed: [Errno 5] Input/output error" in p.notices
            assert engine.next_at == pytest.approx(time.time() + engine.policy.tick_s, abs=1.0)
        assert calls == [req.id, req.id] and engine.store.get(req.id) is None  # nothing recorded, nothing started

    asyncio.run(go())


def test_an_action_that_needs_a_person_is_said_every_pass_and_not_tried_in_a_loop(engine, monkeypatch):
    calls: list[str] = []
    monkeypatch.setitem(Executor.HANDLERS, "start", failing(IllegalTransition(Phase.done, "start"), calls))

    async def go():
        await engine.connect()
        req = engine.writer.add(job("build"))
        line = f"start {req.id} failed: start is not allowed from done"
        first = await engine.tick()
        second = await engine.tick()
        assert line in first.notices and line in second.notices  # said, as every failure is
        assert calls == [req.id]  # tried once
        # Past PERSON_RETRY_S it is tried again (a fix may have come meanwhile).
        engine.needs_person = {k: (n, at - PERSON_RETRY_S) for k, (n, at) in engine.needs_person.items()}
        await engine.tick()
        assert calls == [req.id, req.id]

    asyncio.run(go())


def test_a_failed_pass_asks_for_the_next_as_its_failure_says(engine, monkeypatch):
    async def go():
        await engine.connect()
        await engine.tick()
        for error, due in ((OSError(28, "No space left on device"), True), (TypeError("a bug"), False)):
            def broken(error=error):
                raise error
            monkeypatch.setattr(engine.store, "check_same", broken)
            with pytest.raises(type(error)):
                await engine.tick()
            if due:  # the world's: tried again in tick_s
                assert engine.next_at == pytest.approx(time.time() + engine.policy.tick_s, abs=1.0)
            else:  # a person's: by no clock (events and the loop's safety net still ask), never a hot loop
                assert engine.next_at is None

    asyncio.run(go())
