"""Talk to a running `res serve` over its unix socket. Import-light: the hot path of `res run`."""
from __future__ import annotations

import json
import socket
from pathlib import Path


class NoDaemon(Exception):
    pass


class NoAnswer(NoDaemon):
    """The loop took the whole request and ended before answering: it may have acted on it (a
    `res run` may be in the queue already), so the caller must not simply ask again."""


def ask(sock_path: Path, request: dict, timeout: float | None, on_idle=None, idle_s: float = 0.1) -> dict:
    """Send one JSON request, return the JSON answer. NoDaemon if nobody listens. `timeout`: for the
    whole answer (None: no limit); TimeoutError past it. `on_idle()` is called every `idle_s` while
    the answer is awaited (e.g. to print a job's log as it grows)."""
    import time

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout if on_idle is None else idle_s)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError, OSError) as e:
            raise NoDaemon(str(e)) from None
        try:
            s.sendall(json.dumps(request).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError) as e:
            raise NoDaemon(str(e)) from None  # it never read the whole request: nothing was done
        buf = b""
        try:
            while not buf.endswith(b"\n"):
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    if on_idle is None or (deadline is not None and time.monotonic() > deadline):
                        raise
                    on_idle()
                    continue
                if not chunk:
                    break
                buf += chunk
        except ConnectionResetError:
            buf = b""
    finally:
        s.close()
    if not buf.endswith(b"\n"):
        raise NoAnswer("the loop closed the connection without an answer")
    return json.loads(buf)
