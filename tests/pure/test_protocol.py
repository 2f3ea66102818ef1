"""The loop's socket protocol (reconciler/loop/protocol.py): every op's record goes to the wire and back
unchanged; each client's request is, byte for byte, the line it sent before the records (so a loop and
a client of different versions read each other as before); every op has its handler in the loop's
table (loop/answers.HANDLERS), and an op planted without one is named."""
from __future__ import annotations

import json

import pytest

from reconciler.loop import protocol
from reconciler.loop.answers import HANDLERS
from reconciler.loop.protocol import (REQUESTS, Accepted, Answer, Gate, Ping, Release, ReleaseRequest, Request,
                                      Session, Status, Submit, Tick, Wait, Watch, Web, read_request, request_line)

FIELDS = {"title": "t", "cmd": ["true"], "mem_gb": 1, "est_s": 60, "created": 1.0, "queue": False, "lock": None,
          "env": {"A": "b"}, "request_id": "q-1", "answer_by": 2.0}

# Each request as its client builds it, and the JSON object that client sent before the records.
AS_SENT = [
    # commands/run.py: res run, res note; res release; a job withdrawn that did not start in time
    (Submit("job", FIELDS, who="res pid 2 < bash pid 1"),
     {"op": "submit", "kind": "job", "fields": FIELDS, "who": "res pid 2 < bash pid 1"}),
    (Release("r-3", stop=True, who="bash 12"), {"op": "release", "id": "r-3", "stop": True, "who": "bash 12"}),
    (Release("r-3", stop=False, who="bash 12"), {"op": "release", "id": "r-3", "stop": False, "who": "bash 12"}),
    # commands/hook.py: the booking in place, its state, its withdrawal, its release; the gate; a session
    (Submit("note", FIELDS), {"op": "submit", "kind": "note", "fields": FIELDS}),
    (Status("r-4", json=True), {"op": "status", "id": "r-4", "json": True}),
    (Release("r-4", stop=False), {"op": "release", "id": "r-4", "stop": False}),
    (ReleaseRequest("h-0a1b2c"), {"op": "release_request", "request_id": "h-0a1b2c"}),
    (Gate({"mem_gb": 1.0, "cpus": 1.0, "est_s": 300}), {"op": "gate", "size": {"mem_gb": 1.0, "cpus": 1.0, "est_s": 300}}),
    (Session(), {"op": "session"}),
    # commands/status.py
    (Status(None, json=False, all=False), {"op": "status", "id": None, "json": False, "all": False}),
    (Status("r-12", json=True, all=True), {"op": "status", "id": "r-12", "json": True, "all": True}),
    # loop/waiting.py, with and without a deadline
    (Wait("r-1", timeout=4.5), {"op": "wait", "id": "r-1", "timeout": 4.5}),
    (Wait("r-1", timeout=None), {"op": "wait", "id": "r-1", "timeout": None}),
    # loop/tick.py: res reconcile, res adopt
    (Tick(adopt=False), {"op": "tick", "adopt": False}),
    (Tick(adopt=True), {"op": "tick", "adopt": True}),
    # commands/top.py, commands/web.py, commands/service.py
    (Watch(), {"op": "watch"}),
    (Web(), {"op": "web"}),
    (Ping(), {"op": "ping"}),
]


@pytest.mark.parametrize("record, sent", AS_SENT, ids=[f"{r.op}-{i}" for i, (r, _) in enumerate(AS_SENT)])
def test_each_request_is_the_line_its_client_sent_and_comes_back_as_itself(record, sent):
    assert record.to_wire() == sent
    assert list(record.to_wire()) == list(sent)  # the keys in the same order: the same bytes
    old_line = json.dumps(sent, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"
    assert request_line(record) == old_line
    checked, problem = read_request(old_line)  # the loop's check takes it
    assert problem is None and checked == sent
    assert Request.from_wire(checked) == record and type(record).from_wire(checked) == record


def test_every_op_is_sent_by_some_client_above():
    assert {r.op for r, _ in AS_SENT} == set(REQUESTS)


def test_a_request_an_older_client_sends_without_its_optional_keys_reads_as_none():
    """An older client (or a hand-written one) leaves keys out: the record has None there, and the
    handler reads None as it read the key's absence (stop, who, json, all, timeout, adopt)."""
    assert Request.from_wire({"op": "release", "id": "r-1"}) == Release("r-1")
    assert Request.from_wire({"op": "status"}) == Status()
    assert Status().to_wire() == {"op": "status", "id": None, "json": None}
    assert Request.from_wire({"op": "wait", "id": "r-2"}).timeout is None
    assert Request.from_wire({"op": "tick"}).adopt is None


def test_a_record_is_built_only_from_its_keys():
    with pytest.raises(TypeError):
        Submit("job")  # fields is required
    with pytest.raises(TypeError):
        Release("r-1", nonsense=True)
    with pytest.raises(TypeError):
        Ping("x")
    assert Release("r-1", True) == Release("r-1", stop=True) != Release("r-1", stop=False)
    assert Submit("job", {}) != {"op": "submit", "kind": "job", "fields": {}}  # a record, not its JSON


def test_a_surrogate_in_a_callers_command_goes_as_the_byte_it_was():
    line = request_line(Submit("job", {"cmd": ["cat", "caf\udce9"]}))
    assert b"caf\xe9" in line and line.endswith(b"\n")


# ---------------------------------------------------------------- answers

ANSWERS = [
    (Answer(0, "pid 42", code_id="abc"), {"code": 0, "line": "pid 42", "code_id": "abc"}),
    (Answer(0, "noted"), {"code": 0, "line": "noted"}),
    (Answer(2, "res: unknown request 'x'", data=None), {"code": 2, "line": "res: unknown request 'x'", "data": None}),
    (Answer(0, "r-1 started", data={"id": "r-1"}, hint="res: hint"),
     {"code": 0, "line": "r-1 started", "data": {"id": "r-1"}, "hint": "res: hint"}),
    (Answer(0, "r-1 done", problem=None), {"code": 0, "line": "r-1 done", "problem": None}),
    (Answer(0, "", plan={"actions": []}), {"code": 0, "line": "", "plan": {"actions": []}}),
    (Answer(0, "fits now", answer={"fits": "now"}), {"code": 0, "line": "fits now", "answer": {"fits": "now"}}),
    (Answer(0, "http://x", url="http://x"), {"code": 0, "line": "http://x", "url": "http://x"}),
]


@pytest.mark.parametrize("answer, sent", ANSWERS)
def test_each_answer_goes_to_the_wire_with_its_keys_in_order_and_back(answer, sent):
    assert answer.to_wire() == sent and list(answer.to_wire()) == list(sent)
    assert protocol.answer_line(answer) == json.dumps(sent).encode() + b"\n"
    assert Answer.from_wire(sent) == answer


def test_an_answer_has_only_the_keys_an_op_adds():
    with pytest.raises(TypeError):
        Answer(0, "x", nonsense=1)


def test_the_line_before_a_submits_answer():
    said = Accepted("r-7", 0.2)
    assert said.to_wire() == {"accepted": "r-7", "answer_within": 0.2}
    assert Accepted.from_wire(said.to_wire()) == said


# ---------------------------------------------------------------- the loop's table


def ops_without_a_handler(requests: dict, handlers: dict) -> list[str]:
    return sorted(set(requests) - set(handlers))


def test_every_op_has_its_handler_and_every_handler_its_op():
    assert ops_without_a_handler(REQUESTS, HANDLERS) == []
    assert sorted(set(HANDLERS) - set(REQUESTS)) == []


def test_an_op_planted_without_a_handler_is_named(monkeypatch):
    class Shout(Request):
        __slots__ = ("text",)
        op = "shout"
        KEYS = {"text": protocol.Key((str,), required=True)}

    monkeypatch.setitem(REQUESTS, "shout", Shout)
    assert ops_without_a_handler(REQUESTS, HANDLERS) == ["shout"]
    # ... and the loop's check now lets it through to the table, which has nothing for it
    assert read_request(b'{"op": "shout", "text": "hi"}\n') == ({"op": "shout", "text": "hi"}, None)


def test_an_unknown_op_is_refused_in_the_words_it_always_was():
    req, problem = read_request(b'{"op": "shell", "cmd": "rm -rf ~"}\n')
    assert req == {} and problem == ('unknown request "shell" (res sends submit, release, release_request, wait, tick, '
                                     'status, gate, session, watch, web, ping)')
