"""The writer's lock (DESIGN §4): `Paths.writer_lock`, a flock (config/locks.py: opened without
following symlinks, 0600) held while a desired file is edited, so edits follow one another. Readers
take no lock: the writer replaces files atomically. Import-light (`res run` takes it)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from reconciler.config.locks import LockBusy, acquire, release
from reconciler.config.paths import Paths
from reconciler.desired.disk import Bad, open_dir
from reconciler.desired.reader import DesiredError


@contextmanager
def writer_locked(paths: Paths, timeout: float) -> Iterator[int]:
    """Hold the writer lock, waiting up to `timeout` seconds; yields an fd of the desired directory
    (files are opened relative to it, so a directory swapped for a symlink meanwhile is never
    followed). The state tree is created 0700 first. DesiredError (nothing changed) if it cannot be."""
    try:
        paths.ensure()
    except OSError as e:
        raise DesiredError(" ".join(str(e).split())) from None
    try:
        dfd = open_dir(paths.desired)
    except Bad as b:
        raise DesiredError(b.msg) from None
    except OSError as e:
        raise DesiredError(f"{paths.desired}: {e.strerror}") from None
    lock = paths.writer_lock
    try:
        try:
            lfd = acquire(lock, timeout)
        except LockBusy:
            raise DesiredError(f"{lock}: another writer still holds it after {timeout:g} s; nothing was changed") from None
        except OSError as e:
            raise DesiredError(" ".join(str(e).split())) from None
        try:
            yield dfd
        finally:
            release(lfd)
    finally:
        os.close(dfd)
