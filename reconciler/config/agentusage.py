"""What an agent CLI's own files say a finished session used, for the CLIs whose output does not say it
(a record's usage_source, core/agentclis.py): read once, when the job's output has been read to its
end (apply/attach.py), and handed to its digest, which counts it (core/copilot.py).

GitHub Copilot CLI keeps each session's events in `$COPILOT_HOME/session-state/<sessionId>/events.jsonl`
(its `--output-format json` names the session in its last line, never a token count). A resumed
session appends to the same file, so only what was written since the job started is this job's: each
event carries its time. Nothing here trusts the file: a session id that is no plain name, a link, a
FIFO, a line past MAX_LINE or a file past MAX_READ are not read (None: the estimates stand).
"""
from __future__ import annotations

import json
import os
import re
import stat
from datetime import datetime

from reconciler.config.agenthome import config_dir

MAX_READ = 256 << 20  # a session's file this big is read no further (a real one: 30 KB to 1.4 MB)
MAX_LINE = 16 << 20
CHUNK = 1 << 20
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# The lines that count, by their head (the CLI writes each event compact, `type` first)
_COUNTED = re.compile(rb'\{"type":"session\.(usage_record|shutdown)"')


def copilot_session_usage(session_id: str, env: dict[str, str], cwd: str,
                          since: float) -> tuple[list, list] | None:
    """(the `usage` of each session.usage_record, the data of each session.shutdown) the session's file
    holds from `since` (epoch) on; None where it cannot be read."""
    if not _SESSION_ID.fullmatch(session_id or ""):
        return None
    home = config_dir("copilot", env)
    fd = _open_regular(os.path.join(cwd or "/", home, "session-state", session_id, "events.jsonl"))
    if fd is None:
        return None
    records: list = []
    shutdowns: list = []
    try:
        for line in _lines(fd):
            m = _COUNTED.match(line)
            if m is None:
                continue
            try:
                ev = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if type(ev) is not dict or not _since(ev.get("timestamp"), since):
                continue
            data = ev.get("data") if type(ev.get("data")) is dict else {}
            if m.group(1) == b"usage_record":
                records.append(data.get("usage"))
            else:
                shutdowns.append(data)
    finally:
        os.close(fd)
    return records, shutdowns

def _since(stamp, since: float) -> bool:
    if not isinstance(stamp, str):
        return False
    try:
        return datetime.fromisoformat(stamp).timestamp() >= since
    except (ValueError, OverflowError):
        return False


def _open_regular(path: str) -> int | None:
    """A descriptor of a regular file, opened not through a link at its end; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _lines(fd: int):
    """Its complete lines, up to MAX_READ bytes; a line past MAX_LINE is skipped."""
    rest = b""
    read = 0
    skipping = False
    while read < MAX_READ:
        data = os.read(fd, CHUNK)
        if not data:
            break
        read += len(data)
        parts = (rest + data).split(b"\n")
        rest = parts.pop()
        if skipping and parts:  # the long line ended: its end is not a line
            parts.pop(0)
            skipping = False
        if len(rest) > MAX_LINE:
            rest, skipping = b"", True
        yield from parts
