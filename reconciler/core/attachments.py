"""The id of an attachment's holder (DESIGN §5.4): `host/pid/nonce/start`, made and read here only.

The process start time lets another instance on the same host tell that the holder is gone even when
its pid has been reused; an older id without it (`host/pid/nonce`) is still read.
"""
from __future__ import annotations

from typing import NamedTuple


class HolderId(NamedTuple):
    host: str
    pid: int | None  # None: not a pid (an id this code did not make)
    nonce: str
    start: str | None  # the process's start time (/proc/PID/stat field 22); None: not recorded


def holder_id(host: str, pid: int, nonce: str, start: str | None) -> str:
    return f"{host}/{pid}/{nonce}/{start or '?'}"


def parse_holder(text: str) -> HolderId | None:
    parts = text.split("/")
    if len(parts) < 3:
        return None
    start = parts[3] if len(parts) >= 4 and parts[3] != "?" else None
    return HolderId(parts[0], int(parts[1]) if parts[1].isdigit() else None, parts[2], start)


def holder_name(text: str | None) -> str:
    """`host/pid` of a holder id, as lines name it."""
    return "/".join((text or "?").split("/")[:2])


def gone(text: str, host: str, start_of) -> bool:
    """Whether the holder `text` is a process on `host` that is gone: its pid is not alive
    (`start_of(pid)` is None) or is another process (another start time). A holder on another host,
    or an id that names no pid, is never judged gone."""
    h = parse_holder(text)
    if h is None or h.host != host or h.pid is None:
        return False
    started = start_of(h.pid)
    return started is None or (h.start is not None and h.start != started)
