"""What tells the loop that something changed, so an idle loop need not look every few seconds
(issue 24, criterion 7): the kernel, not a timer.

- inotify on the directories of the desired files and the policy files: a file written (or replaced
  by a rename, as the writer and editors do) wakes the loop, which then looks (loop/look.py) and runs
  a pass if the look finds a change;
- a pidfd per note owner: readable when that process ends;
- agent sessions announce themselves through their CLI's SessionStart hook (`res hook`, op `session`
  on the socket): no /proc listing needed to find them.

Where the kernel lacks inotify or pidfd (or a limit is hit), `ok` is False and the loop keeps looking
every few seconds, as before. Linux only; ctypes for inotify (the standard library has none), the
standard library's os.pidfd_open for pidfds.
"""
from __future__ import annotations

import asyncio
import logging
import os

log = logging.getLogger("res.loop")

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x002, 0x004, 0x008
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x040, 0x080, 0x100, 0x200
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MODIFY


class Events:
    """`on_change()` is called (on the event loop) when a watched directory's entries change or a
    watched process ends. `owners(pids)` sets the processes watched."""

    def __init__(self, dirs: list[str], on_change):
        self.on_change = on_change
        self.loop = asyncio.get_running_loop()
        self.fd: int | None = None
        self.pidfds: dict[int, int] = {}
        self.ok = False
        try:
            self._inotify(dirs)
            self.ok = True
        except OSError as e:
            log.info("no inotify here (%s): the loop looks every few seconds", e)
            self.close()

    def _inotify(self, dirs: list[str]) -> None:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd = fd
        for d in dict.fromkeys(dirs):
            if libc.inotify_add_watch(fd, os.fsencode(d), MASK) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"inotify_add_watch {d}: {os.strerror(err)}")
        self.loop.add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass
        except OSError:
            return
        self.on_change()

    def owners(self, pids: set[int]) -> bool:
        """Watch these processes' ends (and no others); False if one could not be watched (the loop
        then looks for it every few seconds)."""
        all_ok = True
        for pid in list(self.pidfds):
            if pid not in pids:
                self._unwatch(pid)
        for pid in pids:
            if pid in self.pidfds:
                continue
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self.loop.call_soon(self.on_change)  # already gone: the look says so
                continue
            except (OSError, AttributeError):
                all_ok = False
                continue
            self.pidfds[pid] = fd
            self.loop.add_reader(fd, self._ended, pid)
        return all_ok

    def _ended(self, pid: int) -> None:
        self._unwatch(pid)
        self.on_change()

    def _unwatch(self, pid: int) -> None:
        fd = self.pidfds.pop(pid, None)
        if fd is not None:
            self.loop.remove_reader(fd)
            os.close(fd)

    def close(self) -> None:
        for pid in list(self.pidfds):
            self._unwatch(pid)
        if self.fd is not None:
            try:
                self.loop.remove_reader(self.fd)
            except (ValueError, OSError):
                pass
            os.close(self.fd)
            self.fd = None
