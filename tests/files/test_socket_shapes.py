"""Hostile requests on the loop's socket (issue 40 item 5): each shape res never sends gets one line
naming what is wrong with it (exit 2, nothing done), in res's words, and leaves at most one line in
the loop's log, never a traceback. The loop's own request handler on a real unix socket; an engine
that must never be reached."""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from reconciler.loop.protocol import read_request
from reconciler.loop.serve import Requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clihelp import ask_raw  # noqa: E402

LIBRARY = re.compile(r"codec can't|object has no attribute|Error binding|unhashable|recursion|Traceback|"
                     r"Expecting value|JSONDecodeError|NoneType|KeyError|TypeError")

SHAPES = {
    "garbage bytes": (b"\xff\xfe\x00garbage\x80\n", "not UTF-8 text"),
    "a JSON list": (b'[{"op": "ping"}]\n', "a list, not a JSON object"),
    "an id given as an object": (b'{"op": "wait", "id": {"$gt": ""}}\n', "id is an object, not text"),
    "an id given as a list": (b'{"op": "release", "id": ["r-1"], "stop": true}\n', "id is a list, not text"),
    "100,000 nested arrays": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested deeper"),
    "not JSON": (b"GET / HTTP/1.1\n", "not JSON"),
    "no op": (b'{"id": "r-1"}\n', "has no op"),
    "an op that is a number": (b'{"op": 1}\n', "op is a number"),
    "an unknown op": (b'{"op": "shell", "cmd": "rm -rf ~"}\n', 'unknown request "shell"'),
    "a string where a table goes": (b'{"op": "submit", "kind": "job", "fields": "x"}\n', "fields is text"),
    "a field of the wrong type": (b'{"op": "submit", "kind": "job", "fields": {"cmd": {"a": 1}}}\n',
                                  "cmd is an object, not a list"),
    "a command of numbers": (b'{"op": "submit", "kind": "job", "fields": {"cmd": [1, {}]}}\n',
                             "cmd holds something other than text"),
    "an id that is not an entry's": (b'{"op": "status", "id": "../../etc/passwd"}\n', "not an entry id"),
    "a timeout that is not a time": (b'{"op": "wait", "id": "r-1", "timeout": -5}\n', "timeout"),
    "nan": (b'{"op": "wait", "id": "r-1", "timeout": NaN}\n', "timeout"),
}


class Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"a hostile request reached the engine ({name})")


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_hostile_shape_gets_one_line_and_the_log_one_at_most(tmp_path, caplog, name):
    data, words = SHAPES[name]
    path = str(tmp_path / "s")
    engine = Untouchable()
    ticker = SimpleNamespace()

    async def main() -> list[bytes]:
        server = await asyncio.start_unix_server(Requests(engine, ticker).handle, path=path, limit=64 << 10)
        try:
            return await asyncio.to_thread(ask_raw, path, data)
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.DEBUG, logger="res"):
        lines = asyncio.run(main())
    assert len(lines) == 1, lines
    answer = json.loads(lines[0])
    assert answer["code"] == 2, answer
    line = answer["line"]
    assert line.startswith("res: ") and line.endswith("; nothing was done") and words in line, line
    assert not LIBRARY.search(line), line
    logged = [r for r in caplog.records if r.name.startswith("res")]
    assert len(logged) <= 1 and all(r.exc_info is None for r in logged), [r.getMessage() for r in logged]
    assert all("\n" not in r.getMessage() for r in logged)


def test_a_flood_of_garbage_is_one_log_line_not_one_each(tmp_path, caplog):
    path = str(tmp_path / "s")

    async def main() -> None:
        server = await asyncio.start_unix_server(Requests(Untouchable(), SimpleNamespace()).handle, path=path)
        try:
            for _ in range(50):
                await asyncio.to_thread(ask_raw, path, b"\xff\n")
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.DEBUG, logger="res"):
        asyncio.run(main())
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("res")]
    assert len(logged) == 1 and logged[0].startswith("refused 1 request on the socket"), logged


@pytest.mark.parametrize("req", [
    {"op": "ping"}, {"op": "status", "id": None, "json": False, "all": False}, {"op": "status", "id": "r-12"},
    {"op": "wait", "id": "r-1", "timeout": None}, {"op": "wait", "id": "r-1", "timeout": 4.5},
    {"op": "release", "id": "r-3", "stop": True, "who": "bash 12"}, {"op": "tick", "adopt": False},
    {"op": "gate", "size": {"mem_gb": 1}}, {"op": "session"}, {"op": "watch"}, {"op": "web"},
    {"op": "submit", "kind": "job", "fields": {"title": "t", "cmd": ["true"], "mem_gb": 1, "est_s": 60,
                                               "created": 1.0, "queue": False, "lock": None, "env": {"A": "b"},
                                               "request_id": "q-1", "answer_by": 2.0}, "who": None},
])
def test_every_request_res_sends_passes_the_check(req):
    assert read_request(json.dumps(req).encode() + b"\n") == (req, None)
