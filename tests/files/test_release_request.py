"""Admission in place, the release (issue 37, docs/agent-hooks.md): a post-tool event releases what its
pre-tool event booked under its request id (core.hooks.hold_id) through the loop's `release_request`
op: the booking ends, asked twice or for an id nothing holds it is nothing to do, and a job is never
stopped this way. A real Engine over real files on the fake runtime; the socket's checks as the loop
makes them."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.loop.protocol import read_request  # noqa: E402
from reconciler.ops import requests as ops  # noqa: E402

NOTE = {"title": "pytest -q (admitted in place)", "project": "proj", "mem_gb": 0.5, "cpus": 1.0, "est_s": 300,
        "created": 0.0, "owner_pid": os.getpid(), "owner_name": "python3"}
JOB = {"title": "t", "project": "proj", "mem_gb": 0.1, "cpus": 0.1, "est_s": 60, "created": 0.0, "cmd": ["true"],
       "cwd": "/tmp", "env": {}}


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def test_a_booking_is_released_by_its_request_id_once(engine):
    e, _ = engine
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "note", {**NOTE, "created": time.time(), "request_id": "h-0a1b2c"}))
    assert code == 0 and line.startswith("r-1 noted: 512 MB"), line
    code, line, data = asyncio.run(ops.release_request(e, e.tick, "h-0a1b2c"))
    assert code == 0 and data["id"] == "r-1", line
    asyncio.run(e.tick())
    assert e.store.get("r-1").phase.value in ("done", "cancelled"), e.store.get("r-1")
    code, line, data = asyncio.run(ops.release_request(e, e.tick, "h-0a1b2c"))  # the event came twice
    assert (code, line, data) == (0, "nothing held under request h-0a1b2c", None)
    assert asyncio.run(ops.release_request(e, e.tick, "h-none"))[0] == 0  # never booked: nothing to do


def test_a_job_is_never_stopped_by_a_release_of_its_request_id(engine):
    e, runtime = engine
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**JOB, "created": time.time(), "request_id": "h-77"}))
    assert code == 0 and line.startswith("r-1 started"), line
    code, line, _ = asyncio.run(ops.release_request(e, e.tick, "h-77"))
    assert code == 1 and "is running" in line, line
    assert e.store.get("r-1").phase.value == "running"


def test_the_socket_takes_a_release_request_only_with_a_request_id():
    assert read_request(b'{"op": "release_request", "request_id": "h-0a1b2c"}')[1] is None
    for bad, said in ((b'{"op": "release_request"}', "without request_id"),
                      (b'{"op": "release_request", "request_id": 7}', "request_id is a number"),
                      (b'{"op": "release_request", "request_id": "../x"}', "is not a request id")):
        got, why = read_request(bad)
        assert got == {} and said in why, (bad, why)
