"""What the loop looks at between passes (DESIGN §6): a few cheap checks every `tick_s` that say
whether something changed that no event of the runtime or the socket tells: a desired or policy file
written by hand, an agent session started (adopt_sessions), the owner of a note gone. A look costs a
few stat calls and one listing of /proc; a pass runs only when it finds something."""
from __future__ import annotations

import os

from reconciler.config.paths import Paths
from reconciler.core.sessions import SESSION_NAME
from reconciler.observed.procs import alive, parse_stat


def _stat_key(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns


def _pids() -> set[int]:
    return {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()}


def _is_session(pid: int, uid: int) -> bool:
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        with open(f"/proc/{pid}/stat") as f:
            return parse_stat(f.read())[0] == SESSION_NAME
    except (OSError, ValueError):
        return False


class Look:
    """`mark()` right before each pass begins (what the pass will read); `changed()` between
    passes: why a pass is needed now, or None."""

    def __init__(self, paths: Paths, policy_key, watch_sessions):
        self.paths = paths
        self.policy_key = policy_key  # () -> the policy files' key (loop.tick.policy_files_key)
        self.watch_sessions = watch_sessions  # () -> whether new agent sessions matter (adopt_sessions)
        self.owners: set[int] = set()  # pids whose end ends a note (set after each pass)
        self.uid = os.getuid()
        self._files: tuple | None = None
        self._pids: set[int] = set()
        self._young: set[int] = set()  # new at the last look: looked at again (a shell may not have exec'd yet)

    def _files_key(self) -> tuple:
        return (_stat_key(self.paths.queue), _stat_key(self.paths.game), self.policy_key())

    def mark(self) -> None:
        self._files = self._files_key()
        self._pids = _pids() if self.watch_sessions() else set()

    def changed(self) -> str | None:
        if self._files is None:
            return "first look"
        if self._files_key() != self._files:
            return "a desired or policy file changed"
        gone = [pid for pid in self.owners if not alive(pid)]
        if gone:
            return f"note owner {gone[0]} ended"
        if self.watch_sessions():
            now = _pids()
            new = now - self._pids
            sessions = {pid for pid in new | (self._young & now) if _is_session(pid, self.uid)}
            self._pids, self._young = now, new - sessions
            if sessions:
                return "an agent session started"
        return None
