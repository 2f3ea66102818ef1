"""How long this process may wait for what others hold (issue 40: a --timeout is a timeout whoever
holds state.db or the loop). Import-light: `res run` sets its deadline here before it asks the loop.

`busy_s`: the longest one SQLite statement waits for another process's lock (the loop's is short: a
blocked statement must not stop it answering everyone); `deadline` (time.monotonic()): past it,
nothing waits at all (a command's --timeout, or the time it answers by). recorded/store.py applies
both to every statement; the tick lock's wait uses `remaining()`."""
from __future__ import annotations

import time

# A command's statement waits at most this for another process's write: res's own transactions take
# milliseconds, so a lock held longer is someone else's open transaction, said rather than waited out
# (it was 30 s: a `res run` then answered "database is locked" after half a minute).
BUSY_TIMEOUT_S = 5.0
_LIMITS: dict[str, float | None] = {"busy_s": BUSY_TIMEOUT_S, "deadline": None}


def wait_limits(busy_s: float | None = None, deadline: float | None = None) -> None:
    """Bound every wait of this process for state.db: `busy_s` per statement (None: leave it), and
    `deadline`, a time.monotonic() past which no statement waits (None: leave it; see clear_deadline)."""
    if busy_s is not None:
        _LIMITS["busy_s"] = busy_s
    if deadline is not None:
        _LIMITS["deadline"] = deadline


class bounded:
    """`with bounded(until):` no wait of this process for state.db goes past `until` (time.monotonic())
    or the deadline already set, whichever is sooner; the deadline set before is back after."""

    def __init__(self, until: float) -> None:
        self.until, self.before = until, None

    def __enter__(self) -> None:
        self.before = _LIMITS["deadline"]
        _LIMITS["deadline"] = self.until if self.before is None else min(self.before, self.until)

    def __exit__(self, *exc) -> None:
        _LIMITS["deadline"] = self.before


def clear_deadline() -> None:
    _LIMITS["deadline"] = None


def remaining() -> float | None:
    """Seconds left before this process's deadline (None: it has none)."""
    deadline = _LIMITS["deadline"]
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def wait_s() -> float:
    """What a statement may wait now for another process's lock."""
    busy = float(_LIMITS["busy_s"] or 0.0)
    left = remaining()
    return busy if left is None else max(0.0, min(busy, left))
