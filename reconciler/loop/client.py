"""Talk to a running `res serve` over its unix socket (the protocol: loop/protocol.py). Import-light
(json, socket; no pathlib): the hot path of `res run`, `res status` and the gate."""
from __future__ import annotations

import json
import os
import socket

from reconciler.loop.protocol import request_line


class NoDaemon(Exception):
    pass


class NoAnswer(NoDaemon):
    """The loop took the whole request and ended before answering: it may have acted on it (a
    `res run` may be in the queue already), so the caller must not simply ask again."""


class Unanswered(TimeoutError):
    """No answer in time. `accepted`: the id the loop had already given the request, if it said so
    (the request is in the queue, and may still start)."""

    def __init__(self, accepted: str | None):
        super().__init__("no answer in time")
        self.accepted = accepted


# How long a command that asks for a decision (`run`, `note`, `release`) waits for its answer, whoever
# holds the loop or state.db (RES_ANSWER_WAIT_S: an agent whose own tool times out sooner says so).
ANSWER_WAIT_S = 60.0
ANSWER_WAIT_RANGE = (1.0, 3600.0)


def answer_wait_s(environ=None) -> float:
    """The caller's answer wait: RES_ANSWER_WAIT_S, else ANSWER_WAIT_S. ValueError naming the variable
    when it is not a number of seconds in ANSWER_WAIT_RANGE."""
    import math

    text = (os.environ if environ is None else environ).get("RES_ANSWER_WAIT_S")
    if text is None or not text.strip():
        return ANSWER_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    lo, hi = ANSWER_WAIT_RANGE
    if not (lo <= value <= hi):
        raise ValueError(f"RES_ANSWER_WAIT_S={text[:40]!r}: not a number of seconds from {lo:g} to {hi:g}")
    return value


def grace_s(wait_s: float) -> float:
    """How much of its wait a caller leaves the loop to send the answer it owes: the request's own
    deadline (`answer_by`) is this much before the caller gives up."""
    return min(5.0, wait_s / 4)


def ask(sock_path: str | os.PathLike, request, timeout: float | None, on_idle=None, idle_s: float = 0.1) -> dict:
    """Send one request (a record of loop/protocol.py, or its JSON object), return the JSON answer
    (protocol.Answer's wire form). NoDaemon if nobody listens. `timeout`: for the whole answer (None:
    no limit); Unanswered past it, whatever the loop said meanwhile. `on_idle()` is called every
    `idle_s` while the answer is awaited (e.g. to print a job's log as it grows). A line `{"accepted":
    id, ...}` before the answer (protocol.Accepted) says the request was written under that id (an
    Unanswered then carries it)."""
    import time

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = None if timeout is None else time.monotonic() + timeout
    accepted = None
    try:
        reading = timeout if timeout is not None and on_idle is None else idle_s if on_idle else None
        s.settimeout(reading)
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError, OSError) as e:
            raise NoDaemon(str(e)) from None
        s.settimeout(timeout)  # sending: within the whole answer's time, not the idle step's
        try:
            s.sendall(request_line(request))
        except (BrokenPipeError, ConnectionResetError) as e:
            raise NoDaemon(str(e)) from None  # it never read the whole request: nothing was done
        except TimeoutError:  # a stopped loop whose socket buffer the request filled: not answered
            raise Unanswered(None) from None
        s.settimeout(reading)
        buf = b""
        try:
            while True:
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    answer = json.loads(line)
                    if "accepted" in answer and "code" not in answer:
                        accepted = answer["accepted"] if isinstance(answer["accepted"], str) else None
                        continue
                    if accepted and "accepted" not in answer:
                        answer["accepted"] = accepted
                    return answer
                if deadline is not None and time.monotonic() > deadline:
                    raise Unanswered(accepted)
                if deadline is not None and on_idle is None:
                    s.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    if on_idle is None:
                        raise Unanswered(accepted) from None
                    on_idle()
                    continue
                if not chunk:
                    break
                buf += chunk
        except ConnectionResetError:
            pass
    finally:
        s.close()
    raise NoAnswer("the loop closed the connection without an answer")
