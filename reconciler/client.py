"""Talk to a running `res serve` over its unix socket. Import-light: the hot path of `res run`."""
from __future__ import annotations

import json
import socket
from pathlib import Path


class NoDaemon(Exception):
    pass


def ask(sock_path: Path, request: dict, timeout: float) -> dict:
    """Send one JSON request, return the JSON answer. NoDaemon if nobody listens."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError, OSError) as e:
            raise NoDaemon(str(e)) from None
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    if not buf:
        raise NoDaemon("the loop closed the connection without an answer")
    return json.loads(buf)
