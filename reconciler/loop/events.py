"""What tells the loop that something changed, so an idle loop need not look every few seconds
(issue 24, criterion 7): the kernel, not a timer.

- inotify on the directories of the desired files and the policy files: a file written (or replaced
  by a rename, as the writer and editors do) wakes the loop, which then looks (loop/look.py) and runs
  a pass if the look finds a change;
- a pidfd per note owner: readable when that process ends;
- agent sessions announce themselves through their CLI's SessionStart hook (`res hook`, op `session`
  on the socket): no /proc listing needed to find them;
- a PSI trigger on /proc/pressure/memory (`watch_pressure`, DESIGN §5.9): the kernel wakes the loop
  when memory pressure rises past the policy's threshold, so a pass publishes it at once (`res
  status`, the gate) and a quiet machine costs nothing; no timer reads the file. Triggers fire only
  on rising stalls: the fall is seen by the passes that run anyway (every tick_s while anything
  waits, core/wake.py), each of which reads the file (observed/pressure.py).

Where the kernel lacks inotify or pidfd (or a limit is hit), `ok` is False and the loop keeps looking
every few seconds, as before; where it refuses the PSI trigger, the loop says so once in its log and
does nothing more (each pass reads the pressure anyway). Linux only; ctypes for inotify (the standard
library has none), the standard library's os.pidfd_open for pidfds, select.epoll for the trigger.
"""
from __future__ import annotations

import asyncio
import logging
import os
import select

log = logging.getLogger("res.loop")

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x002, 0x004, 0x008
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x040, 0x080, 0x100, 0x200
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MODIFY


class Events:
    """`on_change()` is called (on the event loop) when a watched directory's entries change or a
    watched process ends. `owners(pids)` sets the processes watched; `watch_pressure(pct, on_event)`
    the PSI trigger (the loop calls both after every pass)."""

    def __init__(self, dirs: list[str], on_change):
        self.on_change = on_change
        self.loop = asyncio.get_running_loop()
        self.fd: int | None = None
        self.pidfds: dict[int, int] = {}
        self.trigger: PressureTrigger | None = None
        self._pressure_key: tuple | None = None  # what watch_pressure was last asked (re-armed on a change)
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

    def watch_pressure(self, pct: float, on_event, path: str | None = None) -> bool:
        """Wake `on_event()` when memory pressure (`full`) passes `pct` % (policy pressure_full_pct;
        0: PSI ignored, no trigger). Called after every pass: re-armed only when `pct` or the file
        changed (a policy reload). False when no trigger is armed (said once in the log per cause)."""
        from reconciler.observed.pressure import is_kernel_file, system_file

        path = path or system_file()
        key = (pct, path)
        if key == self._pressure_key:
            return self.trigger is not None
        self._pressure_key = key
        if self.trigger is not None:
            self.trigger.close()
            self.trigger = None
        if not pct or pct <= 0:
            return False
        if not is_kernel_file(path):
            log.info("memory pressure is read from %s (RES_PRESSURE_FILE): no PSI trigger on a stand-in file; "
                     "each pass reads it", path)
            return False
        try:
            self.trigger = PressureTrigger(path, pct, on_event, self.loop)
        except OSError as e:
            # Said once (until the threshold changes): the loop goes on without it.
            log.warning("no PSI trigger on %s (%s): memory pressure is read at each pass only, and a rise "
                        "of it wakes no pass", path, e.strerror or e)
            return False
        log.debug("PSI trigger armed on %s: %s", path, self.trigger.line.rstrip(b"\0").decode())
        return True

    def close(self) -> None:
        if self.trigger is not None:
            self.trigger.close()
            self.trigger = None
        for pid in list(self.pidfds):
            self._unwatch(pid)
        if self.fd is not None:
            try:
                self.loop.remove_reader(self.fd)
            except (ValueError, OSError):
                pass
            os.close(self.fd)
            self.fd = None


# The trigger's window: 10 s, the window of the `avg10` the threshold is compared with, and a multiple
# of 2 s, which the kernel requires of a process without CAP_SYS_RESOURCE (Linux >= 6.5; before it,
# such a process may not arm a trigger at all). Events come at most once a window while pressure lasts.
TRIGGER_WINDOW_US = 10_000_000


def trigger_line(pct: float, window_us: int = TRIGGER_WINDOW_US) -> bytes:
    """`full <stall us> <window us>` + NUL, as the kernel reads a trigger (Documentation/accounting/
    psi.rst): `pct` % of the window stalled in `full`. The kernel overwrites the last byte written with
    NUL, so the NUL is sent (as psi.rst's example writes strlen + 1)."""
    stall = min(window_us, max(1, round(window_us * pct / 100)))
    return f"full {stall} {window_us}".encode() + b"\0"


class PressureTrigger:
    """A PSI trigger on `path` (/proc/pressure/memory, or a cgroup2 memory.pressure): opened
    O_RDWR | O_NONBLOCK, the threshold and window written, then polled for POLLPRI. The kernel reports
    a trigger's event as EPOLLPRI only, which the event loop's readers (EPOLLIN) never see, so the
    file sits in an epoll set of its own whose fd (readable when an event is pending) is the reader.
    OSError when the kernel refuses (no PSI, no permission, a window it does not accept)."""

    def __init__(self, path: str, pct: float, on_event, loop=None):
        self.path, self.on_event = path, on_event
        self.loop = loop or asyncio.get_running_loop()
        self.line = trigger_line(pct)
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.poller: select.epoll | None = None
        try:
            os.write(self.fd, self.line)
            self.poller = select.epoll()
            self.poller.register(self.fd, select.EPOLLPRI)
            self.loop.add_reader(self.poller.fileno(), self._fired)
        except BaseException:
            self.close()
            raise

    def _fired(self) -> None:
        try:
            events = self.poller.poll(0) if self.poller is not None else []
        except OSError:
            events = []
        if any(mask & (select.EPOLLERR | select.EPOLLHUP) for _, mask in events):
            log.info("the PSI trigger on %s is gone (its source went away); memory pressure is read at each pass",
                     self.path)
            self.close()
            return
        self.on_event()

    def close(self) -> None:
        if self.poller is not None:
            try:
                self.loop.remove_reader(self.poller.fileno())
            except (ValueError, OSError, RuntimeError):
                pass
            self.poller.close()
            self.poller = None
        if self.fd is not None:
            os.close(self.fd)  # the kernel removes the trigger with its file
            self.fd = None
