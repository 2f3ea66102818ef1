"""File locks: opened without following symlinks, mode 0600 (DESIGN §4). Import-light."""
from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path


class LockBusy(Exception):
    """The lock is held by someone else (and we were not to wait, or waited long enough)."""


def open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(f"{path} is a symlink; refusing to lock through it") from None
        raise


def acquire(path: Path, timeout: float | None = None) -> int:
    """An exclusive flock on PATH; returns the fd that holds it. timeout None: wait as long as it
    takes; 0: do not wait. Waiting polls with a jittered backoff, so many writers do not lock-step."""
    fd = open_lock(path)
    if timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LockBusy(str(path)) from None
            time.sleep(delay * (0.5 + (time.monotonic_ns() % 997) / 997))
            delay = min(delay * 2, 0.02)


def release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path, timeout: float | None = None):
    fd = acquire(path, timeout)
    try:
        yield fd
    finally:
        release(fd)


@asynccontextmanager
async def locked_async(path: Path, timeout: float | None = None):
    """`locked` for a coroutine: the wait happens on a worker thread, so an event loop (`res serve`)
    goes on answering while another process holds the lock."""
    import asyncio

    waiting = asyncio.ensure_future(asyncio.to_thread(acquire, path, timeout))
    try:
        fd = await asyncio.shield(waiting)
    except asyncio.CancelledError:  # the thread still gets the lock: let it go the moment it does
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception() is not None or release(f.result()))
        raise
    try:
        yield fd
    finally:
        release(fd)
