"""What the loop looks at between passes (DESIGN §6): a few cheap checks every `tick_s` that say
whether something changed that no event of the runtime or the socket tells: a desired or policy file
written by hand, an agent session started (adopt_sessions), the owner of a note gone. A look costs a
few stat calls and a read of /proc/loadavg (and a listing of /proc when a process started since the
last look); a pass runs only when it finds something."""
from __future__ import annotations

import os

from reconciler.config.paths import Paths
from reconciler.core.agents import is_session
from reconciler.observed.procs import alive, parse_stat


def stat_key(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns


def _pids() -> set[int]:
    return {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()}


def _last_pid() -> bytes | None:
    """The pid most recently given out (the last field of /proc/loadavg): while it stays the same no
    process has started, and the listing of /proc is spared."""
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 256).rsplit(None, 1)[-1]
        finally:
            os.close(fd)
    except (OSError, IndexError):
        return None


def _is_session(pid: int, uid: int) -> bool:
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        with open(f"/proc/{pid}/stat") as f:
            return is_session(parse_stat(f.read())[0])
    except (OSError, ValueError):
        return False


class Look:
    """`mark()` right before each pass begins (what the pass will read); `changed()` between
    passes: why a pass is needed now, or None."""

    def __init__(self, paths: Paths, policy_key, watch_sessions):
        self.paths = paths
        self.policy_key = policy_key  # () -> what the policy files are now (their stats): a change is seen
        self.watch_sessions = watch_sessions  # () -> whether new agent sessions matter (adopt_sessions)
        self.owners: set[int] = set()  # pids whose end ends a note (set after each pass)
        self.uid = os.getuid()
        self._queue, self._game = str(paths.queue), str(paths.game)
        self._files: tuple | None = None
        self._pids: set[int] = set()
        self._last_pid: bytes | None = None
        self._young: set[int] = set()  # new at the last look: looked at again (a shell may not have exec'd yet)

    def _files_key(self) -> tuple:
        return (stat_key(self._queue), stat_key(self._game), self.policy_key())

    def mark(self) -> None:
        self._files = self._files_key()
        if self.watch_sessions():
            self._last_pid = _last_pid()
            self._pids = _pids()
        else:
            self._last_pid, self._pids = None, set()

    def changed(self) -> str | None:
        if self._files is None:
            return "first look"
        if self._files_key() != self._files:
            return "a desired or policy file changed"
        gone = [pid for pid in self.owners if not alive(pid)]
        if gone:
            return f"note owner {gone[0]} ended"
        if self.watch_sessions():
            last = _last_pid()
            if last is not None and last == self._last_pid and not self._young:
                return None  # no process started since the last look
            self._last_pid = last
            now = _pids()
            new = now - self._pids
            sessions = {pid for pid in new | (self._young & now) if _is_session(pid, self.uid)}
            self._pids, self._young = now, new - sessions
            if sessions:
                return "an agent session started"
        return None
