"""A stand-in for the loop's watchers (loop/watch.py's interface) with a view shaped like
docs/watching.md's, the page's server (loop/web.py) run on it in a thread, and a raw HTTP client:
what tests/files/test_web_server.py and tests/systemd/test_web_browser.py share."""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from types import SimpleNamespace

from reconciler.config.paths import Paths
from reconciler.loop import web


def a_view(marker: str = "first") -> dict:
    """A view shaped like the contract (docs/watching.md)."""
    return {
        "v": 1, "at": time.time(), "loop": {"pid": os.getpid(), "last_pass_at": time.time() - 1},
        "memory": {"total_gb": 23.5, "available_gb": 14.2, "free_gb": 3.1, "cache_gb": 9.8,
                   "agents_budget_gb": 8.0, "reserve_gb": 4.0, "pressure_full_pct": 0.0,
                   "rung": "amber", "rung_why": {"room_gb": 0.3, "guard_gb": 0.5, "because": "room"}},
        "cpu": {"nproc": 2, "busy_pct": 37.5},
        "owners": [
            {"key": "job:r-4", "kind": "job", "label": 'r-4 "dotnet e2e"', "project": "proj-a", "gb": 7.5,
             "cpu_pct": 180.0, "session": "session:4121", "book_gb": 6.0, "cap_gb": 8.0,
             "booked_from": "5 runs of dotnet test"},
            {"key": "you", "kind": "you", "label": "your programs", "gb": 3.0, "cpu_pct": 12.0},
            {"key": "session:4121", "kind": "session", "label": "claude pid 4121", "gb": 1.2, "cpu_pct": 3.0,
             "jobs": ["r-4"], "spend_today_usd": 0.52},
            {"key": "res", "kind": "res", "label": "res", "gb": 0.05, "cpu_pct": 0.1},
        ],
        "status": {"jobs": [{"id": "r-5", "state": "queued", "title": "<script>alert(1)</script>", "mem_gb": 4.0,
                             "position": 1, "est_start": time.time() + 600, "waits": "waits for r-4 (lock e2e)"}],
                   "budget": {}, "notices": [], "held": [], "changes": [],
                   "game": {"on": False, "until": None, "left_s": None, "lines": []},
                   "pressure": {"full_avg10_pct": 0.0, "limit_pct": 10, "line": None}, "warnings": []},
        "locks": [{"lock": "e2e@proj-a", "holder": "r-4", "until": time.time() + 1200, "waiting": ["r-5"]}],
        "spend": [{"day": "2026-12-03", "session": 'r-2 "claude fix bug"', "usd": 0.52}],
        "timeline": [{"id": "r-4", "title": "dotnet e2e", "queued": time.time() - 900, "started": time.time() - 800,
                      "ended": None, "outcome": "running"},
                     {"id": "r-3", "title": "build", "queued": time.time() - 3000, "started": time.time() - 2900,
                      "ended": time.time() - 2000, "outcome": "oom"}],
        "marks": [{"at": time.time() - 2000, "kind": "oom", "id": "r-3", "line": "r-3 killed at its memory limit"},
                  {"at": time.time() - 1000, "kind": "evicted", "id": "r-4",
                   "line": "r-4 stopped by res above its book (7.10 GB used, 6.00 GB booked), run again"}],
        "actions": False,
        "marker": marker,
    }


def a_history(hours: float) -> list[dict]:
    now = time.time()
    return [{"t": now - i * 60, "gb": {"sessions": 1.2, "jobs": 7.5 if i < 15 else 2.0, "you": 3.0, "res": 0.05, "cache": 9.8},
             "budget": 8.0, "reserve": 4.0} for i in range(int(hours * 60), -1, -5)]


class FakeWatchers:
    """loop/watch.py's Watchers as web.py uses them: view(), subscribe() (a queue of size 1 holding
    the current view at once, where the newest view replaces an unread one; None: the loop ends),
    unsubscribe(), history()."""

    def __init__(self):
        self.current = a_view()
        self.queues: set[asyncio.Queue] = set()
        self.asked_hours: list[float] = []

    async def view(self) -> dict:
        return dict(self.current)

    def subscribe(self) -> asyncio.Queue:
        q = asyncio.Queue(maxsize=1)
        q.put_nowait(self.current)  # the first at once
        self.queues.add(q)
        return q

    def unsubscribe(self, q) -> None:
        self.queues.discard(q)

    def history(self, hours: float) -> list[dict]:
        self.asked_hours.append(hours)
        return a_history(hours)

    def push(self, view: dict | None) -> None:
        self.current = view
        for q in self.queues:
            if q.full():
                q.get_nowait()
            q.put_nowait(view)


class Served:
    """A WebServer on an asyncio loop in a thread; `call(coro)` runs a coroutine there."""

    def __init__(self, paths: Paths, policy, engine=None, ticker=None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.watchers = FakeWatchers()
        self.server = web.WebServer(paths, self.watchers, engine, ticker, policy=policy)
        self.url = self.call(self.server.start())
        self.port, self.token = self.server.port, self.server.token

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def soon(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def close(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def policy(**kw):
    base = {"web_port": 0, "web_actions": False, "game_hours": 4.0, "time_zone": "UTC"}
    return SimpleNamespace(**{**base, **kw})


def http(port: int, target: str, method: str = "GET", headers: dict | None = None, body: bytes = b"",
         host: str | None = None, raw: bytes | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request, sent as bytes (nothing normalised on the way)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        if raw is None:
            lines = [f"{method} {target} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
            lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
            if body:
                lines.append(f"Content-Length: {len(body)}")
            raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        s.sendall(raw)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:  # closed with our bytes unread (a head past the limit)
                break
            if not chunk:
                break
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head:
        return 0, {}, b""
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    got = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        got.setdefault(k.strip().lower(), []).append(v.strip())
    return int(status_line.split()[1]), got, rest
