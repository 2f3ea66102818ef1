"""Where a user's state lives (DESIGN §4). Import-light: used on the hot path."""
from __future__ import annotations

import os
from pathlib import Path

from reconciler.config.stateroot import state_root


def state_dir() -> Path:
    return Path(state_root(os.environ))


class Paths:
    """A plain class, not a dataclass: importing dataclasses costs ~12 ms on every CLI call."""

    __slots__ = ("root",)

    def __init__(self, root: Path):
        self.root = Path(root)

    def __eq__(self, other) -> bool:
        return isinstance(other, Paths) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Paths({str(self.root)!r})"

    @classmethod
    def default(cls) -> "Paths":
        return cls(state_dir())

    @property
    def desired(self) -> Path:
        return self.root / "desired"

    @property
    def queue(self) -> Path:
        return self.desired / "queue.toml"

    @property
    def game(self) -> Path:
        return self.desired / "game.toml"

    @property
    def writer_lock(self) -> Path:
        """Held while a desired file is edited (the small writer)."""
        return self.desired / ".writer.lock"

    @property
    def db(self) -> Path:
        return self.root / "state.db"

    @property
    def last_good_queue(self) -> Path:
        """The text of the last queue.toml a pass read well (used while queue.toml is broken)."""
        return self.root / "queue.last-good.toml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def job_bin(self) -> Path:
        """First on every job's PATH: res's `systemd-run` for jobs (apply/escape.py), which marks a
        transient service a job starts with the job that started it (docs/escaping.md)."""
        return self.root / "bin"

    def log(self, job_id: str, log_dir: str | None = None) -> Path:
        """A job's log: in the state directory's logs/, or in the directory its record names (a
        cluster job's: the policy's shared directory when it was submitted)."""
        return Path(self.log_text(job_id, log_dir))

    def log_text(self, job_id: str, log_dir: str | None = None) -> str:
        """log() as a string, without a Path made for it (`res status` shows hundreds)."""
        return os.path.join(log_dir or os.path.join(self.root, "logs"), f"{job_id}.log")

    def exit_record(self, job_id: str, log_dir: str | None = None) -> Path:
        return exit_record_path(Path(log_dir) if log_dir else self.logs, job_id)

    def cluster_logs(self, shared_dir: str) -> Path:
        """Where cluster jobs write their logs and exit records: the state directory's logs/, or,
        when the policy names a shared directory, this state directory's own folder in it (by user
        and state directory, so that two users or two state directories never share one)."""
        if not shared_dir:
            return self.logs
        import hashlib

        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        return Path(shared_dir) / f"res-{os.getuid()}-{tag}"

    @property
    def tick_lock(self) -> Path:
        """Held for one reconcile pass: one reconciler acts at a time."""
        return self.root / "tick.lock"

    @property
    def serve_lock(self) -> Path:
        """Held by `res serve` for its lifetime; holds its pid."""
        return self.root / "serve.lock"

    @property
    def gate(self) -> Path:
        """What the gate (`res hook`) reads before every agent shell command, written by the loop: the
        heavy table as the policy makes it, gate_wait_s, what history learned (DESIGN §5.8)."""
        return self.root / "gate.json"

    @property
    def socket(self) -> Path:
        return self.root / "serve.sock"

    def ensure(self) -> None:
        """Create the state tree 0700 (DESIGN §4). Refuses a symlinked state tree."""
        old = os.umask(0o077)
        try:
            for d in (self.root, self.desired, self.logs):
                if d.is_symlink():
                    raise OSError(f"{d} is a symlink; refusing to use it")
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
        finally:
            os.umask(old)


def own_private_dir(path) -> str | None:
    """None when `path` is a directory of ours that only we can enter (0700, not a symlink); else
    why not ("missing" when there is nothing there). A folder in a shared directory that someone
    else made first could hold a planted exit record or a FIFO."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to us"
    if st.st_mode & 0o077:
        return f"is open to others (mode {st.st_mode & 0o777:o}, not 700)"
    return None


def make_private_dir(path, parents: bool = False) -> str | None:
    """Make `path` 0700 if it is missing; None when it then is a private directory of ours, else why
    not (in a shared directory someone may have made it first, or made it in between)."""
    try:
        Path(path).mkdir(mode=0o700, parents=parents, exist_ok=True)
    except OSError as e:
        return f"cannot be made here ({e.strerror})"
    return own_private_dir(path)


def exit_record_path(logs: Path, job_id: str) -> Path:
    """Where a job's unit writes its exit record (exit_record.py): beside its log."""
    return logs / f"{job_id}.exit.json"


def exit_record_fallback(primary: Path, runtime_dir: str | None) -> Path | None:
    """Where the unit writes its exit record when the state directory's disk is full: the user's
    runtime directory (a tmpfs as a rule), named by the primary path, so that two state directories
    never share one. None without a runtime directory."""
    if not runtime_dir:
        return None
    import hashlib

    return Path(runtime_dir) / "res-exit" / f"{hashlib.sha256(str(primary).encode()).hexdigest()[:20]}.json"


def loop_unit_stem(unit_prefix: str) -> str:
    """What the name of every unit that runs res's own loop starts with: `<stem>.service` (`res
    service install`) and `<stem>-<hash of the state directory>.service` (started by the first call,
    loop/start.py). A pass never takes one for an agent's stray service."""
    return f"{unit_prefix}-serve"
