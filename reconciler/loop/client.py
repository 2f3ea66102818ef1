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


class Unanswered(TimeoutError):
    """No answer in time. `accepted`: the id the loop had already given the request, if it said so
    (the request is in the queue, and may still start)."""

    def __init__(self, accepted: str | None):
        super().__init__("no answer in time")
        self.accepted = accepted


# Past the time the loop said it answers in (its policy's answer_timeout_s), how long to wait on: the
# loop answers by then itself; this only covers a loop that cannot answer at all.
ANSWER_MARGIN_S = 30.0


def ask(sock_path: Path, request: dict, timeout: float | None, on_idle=None, idle_s: float = 0.1) -> dict:
    """Send one JSON request, return the JSON answer. NoDaemon if nobody listens. `timeout`: for the
    whole answer (None: no limit); Unanswered past it. `on_idle()` is called every `idle_s` while
    the answer is awaited (e.g. to print a job's log as it grows). A line `{"accepted": id,
    "answer_within": s}` before the answer says the request was written under that id and that the
    loop answers within `s` seconds: the wait is then that, plus ANSWER_MARGIN_S."""
    import time

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = None if timeout is None else time.monotonic() + timeout
    accepted = None
    try:
        s.settimeout(timeout if timeout is not None and on_idle is None else idle_s if on_idle else None)
        try:
            s.connect(str(sock_path))
        except (FileNotFoundError, ConnectionRefusedError, OSError) as e:
            raise NoDaemon(str(e)) from None
        try:
            s.sendall(json.dumps(request, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n")
        except (BrokenPipeError, ConnectionResetError) as e:
            raise NoDaemon(str(e)) from None  # it never read the whole request: nothing was done
        buf = b""
        try:
            while True:
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    answer = json.loads(line)
                    if "accepted" in answer and "code" not in answer:
                        accepted = answer["accepted"]
                        within = answer.get("answer_within")
                        if deadline is not None and type(within) in (int, float) and 0 < within < 86400:
                            deadline = time.monotonic() + within + ANSWER_MARGIN_S
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
