"""s: the loop's CPU while the page is open: `res serve` with nothing to do, one browser's /events
stream (a view at least every VIEW_EVERY_S, docs/watching.md) read for 60 s (10 with --smoke), as a
share of one core. The reader is a thread here (its CPU is not the loop's); the loop is measured by
its threads' run time (attach_bench._run_s)."""
from __future__ import annotations

import re
import socket
import threading
import time

from attach_bench import _run_s
from common import Broken, Figure, Report, ResEnv

TARGET = 0.01  # 1 % of a core


class Events(threading.Thread):
    """Reads an SSE stream, counting its `data:` lines, until the socket closes."""

    def __init__(self, port: int, token: str):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(f"GET /events?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        self.views = 0
        self.bytes = 0
        self.head = b""

    def run(self) -> None:
        buf = b""
        self.sock.settimeout(None)
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return
                self.bytes += len(chunk)
                buf += chunk
                if not self.head and b"\r\n\r\n" in buf:
                    self.head, _, buf = buf.partition(b"\r\n\r\n")
                while b"\n\n" in buf:
                    event, _, buf = buf.partition(b"\n\n")
                    if event.startswith(b"data: "):
                        self.views += 1
        except OSError:
            return

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def bench_web_events(report: Report, smoke: bool) -> None:
    seconds = 10 if smoke else 60
    env = ResEnv("s")
    reader = None
    try:
        env.start_serve()
        pid = env.serve_proc.pid
        _, r = env.res("web")
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", r.stdout.strip())
        if r.returncode != 0 or not m:
            raise Broken(f"res web: {r.stdout.strip()} {r.stderr.strip()}")
        reader = Events(int(m.group(1)), m.group(2))
        reader.start()
        time.sleep(3)  # the first passes and views are not the steady state
        c0, v0, t0 = _run_s(pid), reader.views, time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        cpu, views = (_run_s(pid) - c0) / wall, reader.views - v0
        if not reader.head.startswith(b"HTTP/1.1 200") or views == 0:
            raise Broken(f"no view came on /events in {seconds} s ({reader.head[:40]!r})")
        report.figures.append(Figure(
            "s", "loop CPU with the page open / 1 % of a core", cpu / TARGET,
            f"{cpu * 100:.3f} % of a core over {seconds} s, {views} views streamed "
            f"({reader.bytes / max(reader.views, 1) / 1024:.1f} KB each)", "≤ 1×", cpu <= TARGET))
    finally:
        if reader is not None:
            reader.close()
            reader.join(10)
        env.close()
