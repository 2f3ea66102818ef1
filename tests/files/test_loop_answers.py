"""The loop's answers, with a fake engine whose passes never end (nothing real is touched)."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from types import SimpleNamespace

import pytest

from reconciler.loop.client import Unanswered, ask
from reconciler.loop.answers import answer_request


def test_a_request_not_decided_in_answer_timeout_s_is_answered_with_its_id():
    said, removed = [], []
    engine = SimpleNamespace(
        policy=SimpleNamespace(answer_timeout_s=0.2, lock_title_words=[]),
        writer=SimpleNamespace(who=None, add=lambda fields, kind: SimpleNamespace(id="r-7", queue=False),
                               remove=lambda ids: removed.extend(ids) or list(ids)),
        store=SimpleNamespace(get=lambda job_id: None), blocked=[], adder=None, last_inputs=None)

    async def never(held=False):  # a pass that does not end (the manager hangs, say)
        await asyncio.sleep(3600)

    ticker = SimpleNamespace(pass_after_now=never)
    answer = asyncio.run(answer_request(engine, ticker, {"op": "submit", "kind": "job", "fields": {}}, say=said.append))
    assert [s["accepted"] for s in said] == ["r-7"] and 0 < said[0]["answer_within"] <= 0.2
    # past the deadline nothing starts it: said so, and withdrawn
    assert answer["code"] == 1 and answer["line"] == (
        "res: r-7 not started: a pass did not end in time; withdrawn: it never starts (ask again)")
    assert removed == ["r-7"]


def _loop_that(sock_path, lines_after: list[tuple[float, dict]]):
    """A one-connection socket server that reads the request, then sends each line after its delay."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    gate = threading.Event()

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            for delay, line in lines_after:
                if gate.wait(delay):
                    return
                conn.sendall(json.dumps(line).encode() + b"\n")
            gate.wait(5)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return server, gate


def test_the_client_keeps_its_own_wait_whatever_the_loop_says(tmp_path):
    """The caller's wait is its own (issue 40): a loop that took the request and says it answers
    later does not keep the caller longer; the caller gives up with the id the loop gave."""
    sock = tmp_path / "s"
    server, gate = _loop_that(sock, [(0, {"accepted": "r-3", "answer_within": 1.0}),
                                     (3, {"code": 0, "line": "r-3 started"})])
    try:
        with pytest.raises(Unanswered) as e:
            ask(sock, {"op": "submit"}, timeout=0.3)
    finally:
        gate.set()
        server.close()
    assert e.value.accepted == "r-3"


def test_the_client_gets_an_answer_that_comes_within_its_wait(tmp_path):
    sock = tmp_path / "s"
    server, gate = _loop_that(sock, [(0, {"accepted": "r-3", "answer_within": 1.0}),
                                     (0.2, {"code": 0, "line": "r-3 started"})])
    try:
        answer = ask(sock, {"op": "submit"}, timeout=5)
    finally:
        gate.set()
        server.close()
    assert answer == {"code": 0, "line": "r-3 started", "accepted": "r-3"}


def test_before_the_loop_takes_a_request_the_clients_own_net_holds(tmp_path):
    sock = tmp_path / "s"
    server, gate = _loop_that(sock, [(3, {"code": 0, "line": "late"})])
    try:
        with pytest.raises(Unanswered) as e:
            ask(sock, {"op": "submit"}, timeout=0.2)
    finally:
        gate.set()
        server.close()
    assert e.value.accepted is None


def test_a_failed_pass_hands_back_no_plan_not_the_one_before():
    from reconciler.core.models import Plan
    from reconciler.loop.serve import Ticker

    calls = []

    async def tick():
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk gone")
        return Plan(notices=[f"pass {len(calls)}"])

    async def go():
        ticker = Ticker(SimpleNamespace(tick=tick, adder=None))
        first = await ticker.pass_after_now()
        failed = await ticker.pass_after_now()
        third = await ticker.pass_after_now()
        return first, failed, third

    first, failed, third = asyncio.run(go())
    assert first.notices == ["pass 1"] and failed is None and third.notices == ["pass 3"]


def test_a_lock_wait_does_not_stop_the_event_loop(tmp_path):
    """The pass's lock is waited for on a worker thread: the loop goes on answering meanwhile."""
    from reconciler.config.locks import acquire, locked_async, release

    path = tmp_path / "tick.lock"
    held = acquire(path)
    beats = []

    async def go():
        async def heartbeat():
            while True:
                beats.append(1)
                await asyncio.sleep(0.01)

        hb = asyncio.ensure_future(heartbeat())
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, release, held)  # the other holder lets go
        async with locked_async(path):
            pass
        hb.cancel()

    asyncio.run(go())
    assert len(beats) >= 5  # the heartbeat ran while the lock was waited for
