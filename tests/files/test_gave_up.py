"""A caller that gives up never gets its job run (issue 40 item 1): real files and state.db, the
in-memory runtime, a socket whose loop never answers, and `res` itself against it. Nothing asserts
on time: each wait is bounded generously and the exit codes, lines and records are what is checked."""
from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import fake_engine  # noqa: E402

from reconciler.desired.reader import DesiredError  # noqa: E402
from reconciler.loop.answers import answer_request  # noqa: E402
from reconciler.ops import requests as ops  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JOB = dict(title="build", project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["true"], cwd="/", created=1.0)


@pytest.fixture
def engine(tmp_path, monkeypatch):
    yield from fake_engine(tmp_path, monkeypatch)


def _started(runtime) -> list[str]:
    return [s.job_id for s in runtime.specs]


def test_a_request_written_and_undecided_past_its_deadline_never_starts(engine):
    e, runtime = engine
    e.writer.add({**JOB, "request_id": "q-1", "answer_by": time.time() + 0.2})
    time.sleep(0.3)  # the loop was stopped meanwhile: its caller is gone
    p = asyncio.run(e.tick())
    assert [(a.kind, a.detail["code"]) for a in p.for_id("r-1")] == [("refuse", "caller_gone")]
    assert _started(runtime) == [] and e.store.get("r-1").phase.value == "refused"


def test_a_plan_made_before_the_deadline_and_carried_out_after_it_starts_nothing(engine):
    e, runtime = engine
    e.writer.add({**JOB, "title": "slow to start"})
    e.writer.add({**JOB, "request_id": "q-2", "answer_by": time.time() + 0.5})
    real = runtime.start

    async def slow_start(spec):  # the first start of the pass takes longer than r-2's caller waits
        if spec.job_id == "r-1":
            await asyncio.sleep(1.0)
        return await real(spec)

    runtime.start = slow_start
    p = asyncio.run(e.tick())
    assert [a.kind for a in p.for_id("r-2")] == ["start"]  # planned before its deadline
    rec = e.store.get("r-2")
    assert _started(runtime) == ["r-1"] and rec.phase.value == "refused" and rec.detail["code"] == "caller_gone"


def test_the_writer_does_not_write_a_request_whose_caller_is_gone(engine):
    e, _ = engine
    with pytest.raises(DesiredError, match=r"^request q-3 reached res after its caller stopped waiting; not written"):
        e.writer.add({**JOB, "request_id": "q-3", "answer_by": time.time() - 1})
    assert 'request_id = "q-3"' not in (e.paths.queue.read_text() if e.paths.queue.exists() else "")


def test_asking_again_with_the_same_request_id_is_answered_never_a_second_job(engine):
    e, runtime = engine
    fields = {**JOB, "request_id": "q-4", "answer_by": time.time() + 30}
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", dict(fields)))
    assert code == 0 and line.startswith("r-1 started"), line
    for _ in range(2):  # its caller did not hear, and asks again (twice)
        code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**fields, "answer_by": time.time() + 30}))
        assert code == 0 and line.startswith("r-1 started"), line
    runtime.end("r-1")
    asyncio.run(e.tick())
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**fields, "answer_by": time.time() + 30}))
    assert code == 0 and line.startswith("r-1 done rc=0"), line
    assert _started(runtime) == ["r-1"] and 'id = "r-2"' not in e.paths.queue.read_text()


def test_asking_again_after_a_withdrawn_attempt_is_a_new_attempt_still_one_job(engine):
    e, runtime = engine
    e.writer.add({**JOB, "request_id": "q-5", "answer_by": time.time() + 0.1})
    time.sleep(0.2)
    asyncio.run(e.tick())  # the first attempt: its caller gone, refused
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**JOB, "request_id": "q-5", "answer_by": time.time() + 30}))
    assert code == 0 and line.startswith("r-2 started"), line
    assert _started(runtime) == ["r-2"]


def test_a_second_entry_of_a_held_request_id_written_by_hand_or_a_race_never_starts(engine):
    e, runtime = engine
    e.writer.add({**JOB, "request_id": "q-6"})
    asyncio.run(e.tick())
    e.writer.add({**JOB, "request_id": "q-6"})  # another process's writer, not asking first
    p = asyncio.run(e.tick())
    assert [(a.kind, a.detail["code"]) for a in p.for_id("r-2")] == [("refuse", "same_request")]
    assert _started(runtime) == ["r-1"]
    code, line, _ = ops.outcome(e, "r-2", p)  # its answer is the entry that holds the id
    assert code == 0 and line.startswith("r-1 started"), line


def test_the_loop_writes_nothing_for_a_request_that_arrives_after_its_deadline(engine):
    e, runtime = engine
    answer = asyncio.run(answer_request(e, None, {"op": "submit", "kind": "job", "fields": {
        **JOB, "request_id": "q-7", "answer_by": time.time() - 1}}))
    assert answer["code"] == 1 and answer["line"] == (
        "res: request q-7 reached the reconciler loop after its caller stopped waiting; not written, never started")
    assert not e.paths.queue.exists() or "q-7" not in e.paths.queue.read_text()


def test_a_queued_request_undecided_at_its_deadline_is_told_queued_and_waits(engine):
    e, runtime = engine
    runtime.reachable = False  # no pass can decide anything
    asyncio.run(e.connect())
    code, line, data = asyncio.run(ops.submit(e, e.tick, "job", {**JOB, "queue": True, "request_id": "q-8",
                                                                  "answer_by": time.time() + 1}))
    assert code == 0 and re.match(r"r-1 queued, not decided yet: .+; cancel: res release r-1$", line), line
    time.sleep(1.1)
    runtime.reachable = True
    asyncio.run(e.connect())
    asyncio.run(e.tick())
    assert _started(runtime) == ["r-1"]  # --queue, and told so: it waits, then runs


def test_a_request_asked_for_now_that_nothing_can_decide_is_withdrawn(engine):
    e, runtime = engine
    runtime.reachable = False
    asyncio.run(e.connect())
    code, line, data = asyncio.run(ops.submit(e, e.tick, "job", {**JOB, "request_id": "q-9",
                                                                  "answer_by": time.time() + 30}))
    assert code == 1 and line.endswith("; withdrawn: it never starts (ask again)") and data["state"] == "withdrawn"
    assert 'id = "r-1"' not in e.paths.queue.read_text()


# ---------------------------------------------------------------- res against a loop that never answers


def _silent_loop(sock: Path) -> tuple[socket.socket, threading.Event, list]:
    """A socket the kernel accepts on and nobody answers (a SIGSTOPped loop); what each caller sent."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock))
    server.listen(64)
    stop, got = threading.Event(), []

    def serve():
        server.settimeout(0.1)
        conns = []
        while not stop.is_set():
            try:
                c, _ = server.accept()
            except OSError:
                continue
            c.settimeout(5)
            try:
                got.append(json.loads(c.recv(1 << 20).split(b"\n")[0]))
            except (OSError, ValueError):
                pass
            conns.append(c)
        for c in conns:
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, stop, got


def _res(tmp_path: Path, *args: str, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "RES_STATE_DIR": str(tmp_path / "state"),
         "XDG_CONFIG_HOME": str(tmp_path / "config"), "RES_LOOP_AUTOSTART": "false", **env}
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], env=e, capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))


@pytest.mark.parametrize("queue", [False, True])
def test_a_caller_that_gives_up_is_told_which_request_and_what_becomes_of_it(tmp_path, queue):
    (tmp_path / "state").mkdir()
    server, stop, got = _silent_loop(tmp_path / "state" / "serve.sock")
    try:
        r = _res(tmp_path, "run", "--mem", "64M", "--for", "1m", *(["--queue"] if queue else []),
                 "--request-id", "agent-7.try", "--", "true", RES_ANSWER_WAIT_S="2")
    finally:
        stop.set()
        server.close()
    assert r.returncode == 1 and r.stdout == "", r
    (line,) = r.stderr.splitlines()
    assert line.startswith("res: no answer from the reconciler loop in 2 s (stopped or stuck?): request agent-7.try ")
    if queue:
        assert re.search(r"waits in the queue if the loop took it by \d\d:\d\d:\d\d \(--queue\), else it never starts", line)
    else:
        assert re.search(r"is not started after \d\d:\d\d:\d\d unless it already was", line)
    assert line.endswith("ask again with --request-id agent-7.try to learn which (the same request: never a second job)")
    (sent,) = got
    fields = sent["fields"]
    assert fields["request_id"] == "agent-7.try" and fields["answer_by"] < time.time()  # a deadline it carried


def test_a_made_up_request_id_is_named_when_no_answer_comes(tmp_path):
    (tmp_path / "state").mkdir()
    server, stop, got = _silent_loop(tmp_path / "state" / "serve.sock")
    try:
        r = _res(tmp_path, "run", "--mem", "64M", "--for", "1m", "--", "true", RES_ANSWER_WAIT_S="1")
    finally:
        stop.set()
        server.close()
    rid = got[0]["fields"]["request_id"]
    assert re.fullmatch(r"q-[0-9a-f]{12}", rid) and f"request {rid} " in r.stderr and r.returncode == 1, r


@pytest.mark.parametrize("value", ["0", "abc", "1e9", "nan"])
def test_a_bad_answer_wait_is_a_usage_error(tmp_path, value):
    r = _res(tmp_path, "run", "--mem", "64M", "--for", "1m", "--", "true", RES_ANSWER_WAIT_S=value)
    assert r.returncode == 2 and r.stderr.startswith(f"res: RES_ANSWER_WAIT_S='{value}': not a number of seconds"), r


@pytest.mark.parametrize("value", ["", "-x", "a b", "x" * 65, "é"])
def test_a_request_id_of_another_form_is_a_usage_error(tmp_path, value):
    r = _res(tmp_path, "run", "--mem", "64M", "--for", "1m", "--request-id", value, "--", "true")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("res: "), r


def test_a_loop_from_before_request_ids_is_asked_again_without_them(tmp_path):
    """An upgrade the running loop was not restarted for: it refuses the new fields (in pydantic's
    words, as it said them) and writes nothing; the caller asks again without them."""
    sock = tmp_path / "state" / "serve.sock"
    sock.parent.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock))
    server.listen(4)
    got = []

    def serve():
        for _ in range(2):
            c, _ = server.accept()
            with c:
                req = json.loads(c.recv(1 << 20).split(b"\n")[0])
                got.append(req)
                if "request_id" in req["fields"]:
                    line = ("res: job: request_id: Extra inputs are not permitted (got 'q-1'); nothing was written")
                    c.sendall(json.dumps({"code": 1, "line": line}).encode() + b"\n")
                else:
                    c.sendall(json.dumps({"code": 0, "line": "r-1 started; log x; ETA ~12:00"}).encode() + b"\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        r = _res(tmp_path, "run", "--mem", "64M", "--for", "1m", "--", "true", RES_ANSWER_WAIT_S="20")
    finally:
        t.join(30)
        server.close()
    assert r.returncode == 0 and r.stdout.startswith("r-1 started"), r
    assert "request_id" in got[0]["fields"] and "request_id" not in got[1]["fields"]
    assert "answer_by" not in got[1]["fields"]


def test_a_queued_request_told_undecided_is_the_same_request_when_asked_again(engine):
    e, runtime = engine
    runtime.reachable = False  # nothing can be decided; --queue: told it waits
    asyncio.run(e.connect())
    fields = {**JOB, "queue": True, "request_id": "q-10"}
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**fields, "answer_by": time.time() + 30}))
    assert code == 0 and line.startswith("r-1 queued, not decided yet: "), line
    code, line, _ = asyncio.run(ops.submit(e, e.tick, "job", {**fields, "answer_by": time.time() + 30}))
    assert code == 0 and line.startswith("r-1 queued"), line  # the same entry, not r-2
    assert 'id = "r-2"' not in e.paths.queue.read_text()
    runtime.reachable = True
    asyncio.run(e.connect())
    asyncio.run(e.tick())
    assert _started(runtime) == ["r-1"]
