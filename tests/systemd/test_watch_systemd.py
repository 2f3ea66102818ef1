"""The loop's `watch` op on a real loop (`res serve` on a private state directory) with a real job in
a real unit: the views streamed on the socket name the job, with the memory its cgroup really uses,
while it runs, and not once it is released; the loop keeps its history; a client that hangs up
leaves the loop answering, and a loop that stops ends the streams."""
from __future__ import annotations

import json
import socket
import time

import pytest

from clihelp import res, serving, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd



class Watching:
    """A `watch` client: one JSON view per line."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(path))
        self.sock.sendall(b'{"op": "watch"}\n')
        self.buf = b""
        self.seen = 0

    def next(self) -> dict:
        while b"\n" not in self.buf:
            part = self.sock.recv(1 << 16)
            assert part, "the loop ended the stream"
            self.buf += part
        line, self.buf = self.buf.split(b"\n", 1)
        self.seen += 1
        return json.loads(line)

    def until(self, pred, what: str, limit_s: float = 90) -> dict:
        """The first view for which pred holds (a bound on waiting, not an assertion on time)."""
        deadline = time.monotonic() + limit_s
        while True:
            view = self.next()
            if pred(view):
                return view
            assert time.monotonic() < deadline, f"no view {what} in {limit_s} s; the last: {view['owners']}"

    def close(self) -> None:
        self.sock.close()


def owner(view: dict, key: str) -> dict | None:
    return next((o for o in view["owners"] if o["key"] == key), None)


def test_a_watch_client_sees_a_running_job_and_not_after_its_release(res):
    serve = serving(res)
    job = res.started("sleep", "30", mem="256M", est="1m")
    w = Watching(res.state / "serve.sock")
    try:
        first = w.next()
        assert first["v"] == 1 and first["loop"]["pid"] == serve.pid
        assert {"you", "res"} <= {o["key"] for o in first["owners"]}
        view = w.until(lambda v: (owner(v, f"job:{job}") or {}).get("gb", 0) > 0, f"with {job} using memory")
        mine = owner(view, f"job:{job}")
        assert mine["kind"] == "job" and mine["label"].startswith(f'{job} "')
        assert mine["gb"] < 0.25  # a sleep, inside its 256 MB
        assert owner(view, "res")["gb"] > 0
        assert [r["outcome"] for r in view["timeline"] if r["id"] == job] == ["running"]
        assert any(j["id"] == job and j["state"] == "running" for j in view["status"]["jobs"])

        res.ok("release", job, "--stop")
        after = w.until(lambda v: owner(v, f"job:{job}") is None, f"without {job}")
        assert [r["outcome"] for r in after["timeline"] if r["id"] == job] == ["cancelled"]  # released
        assert after["at"] > view["at"]
    finally:
        w.close()
    # Views keep coming while someone watches (each pass, and every VIEW_EVERY_S), and the loop took
    # the history's samples: the first while nobody watched, at its first pass.
    assert w.seen >= 3
    history = json.loads((res.state / "history.json").read_text())
    assert history and set(history[0]["gb"]) == {"sessions", "jobs", "you", "res", "cache"}
    # The client hung up: the loop goes on answering.
    assert res.ok("status", "--json").out
    # A loop asked to stop while someone watches ends the stream and stops.
    w = Watching(res.state / "serve.sock")
    try:
        w.next()
        serve.terminate()
        assert serve.wait(30) == 0
        with pytest.raises(AssertionError, match="ended the stream"):
            while True:
                w.next()
    finally:
        w.close()
