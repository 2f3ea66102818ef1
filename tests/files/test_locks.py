"""The file lock every writer takes (config/locks.py): a wait with a time limit gives up cleanly and
leaves nothing held, and waiters are served by the kernel, not by a polling race."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from reconciler.config.locks import LockBusy, acquire, release

HOLD = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"


def _held_by_another_process(path):
    """A child process that holds the lock until its stdin closes (flock: per open file, so another
    process is the honest test)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_timed_wait_gives_up_and_leaves_nothing_held(tmp_path):
    path = tmp_path / "lock"
    path.touch()
    holder = _held_by_another_process(path)
    try:
        with pytest.raises(LockBusy):
            acquire(path, timeout=0)
        with pytest.raises(LockBusy):
            acquire(path, timeout=0.3)  # its helper thread still waits in the kernel
    finally:
        holder.stdin.close()
        holder.wait(10)
    # The abandoned waiter got the lock when the holder let go, and let it go at once.
    deadline = time.monotonic() + 5
    while True:
        try:
            fd = acquire(path, timeout=0)
            break
        except LockBusy:
            assert time.monotonic() < deadline, "the given-up wait kept the lock"
            time.sleep(0.01)
    release(fd)
    # and its helper thread ends (a moment after it let go: under load, not at once)
    for t in [t for t in threading.enumerate() if t.name == "res-lock-wait"]:
        t.join(5)
        assert not t.is_alive(), "the given-up wait's thread lives on"


def test_a_timed_wait_gets_the_lock_when_it_is_let_go(tmp_path):
    path = tmp_path / "lock"
    path.touch()
    holder = _held_by_another_process(path)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(acquire(path, timeout=30)))
    waiter.start()
    time.sleep(0.2)
    assert not got  # still waiting
    holder.stdin.close()
    holder.wait(10)
    waiter.join(10)
    assert len(got) == 1
    with pytest.raises(LockBusy):
        acquire(path, timeout=0)  # it holds it now
    release(got[0])
    release(acquire(path, timeout=0))


def test_a_symlinked_lock_is_refused(tmp_path):
    (tmp_path / "real").touch()
    os.symlink(tmp_path / "real", tmp_path / "lock")
    with pytest.raises(OSError, match="symlink"):
        acquire(tmp_path / "lock", timeout=1)
