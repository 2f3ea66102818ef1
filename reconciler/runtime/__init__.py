"""The one small interface between the shell and whatever runs jobs.

systemd (user manager over D-Bus) is the first implementation; a cluster engine (Slurm) is meant to be
the second, so nothing above this interface may assume systemd: callers speak job ids, the runtime
chooses unit names, cgroup paths and the like. Every call the shell makes on a runtime is in `Runtime`;
what only a workstation's own manager has (slices, scopes, unit files: the user's side, DESIGN §5.6)
is in `UserSide`, which `Runtime.user_side()` gives where there is one. No caller probes a runtime
for a method (`hasattr`): what it may call is what these say. May import the floors below it
(the table in tests/pure/test_layers.py): observed, recorded, render, config and the core; never
desired, on its own floor.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from reconciler.core.errors import RetryLater
from reconciler.core.models import ExitObs, JobObs


# ---------------------------------------------------------------- what a runtime raises


class RuntimeUnavailable(RetryLater):
    """The runtime could not be reached or did not answer: nothing it runs can be observed. `absent`:
    there is none to reach at all (not one that is slow or broken). `not_started`: raised by a start
    that certainly started nothing (the runtime said no, rather than not answering): the job goes back
    to the queue at once, rather than after its lease."""

    def __init__(self, line: str, absent: bool = False, not_started: bool = False):
        super().__init__(line)
        self.absent, self.not_started = absent, not_started


class RuntimeBusy(RetryLater):
    """The runtime cannot start the job now (a cluster, and it was asked for now, not --queue):
    `detail` is the refusal's structured reason (code `busy`, resource `cluster`)."""

    def __init__(self, detail: dict):
        super().__init__(detail.get("why", "busy"))
        self.detail = detail


class UnitExists(RuntimeError):
    """A unit of that name is loaded already (a transient unit's name is taken)."""

    def __init__(self, name: str):
        super().__init__(f"start of {name} failed: a unit of that name exists")
        self.unit = name


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    cmd: list[str]  # argv, verbatim: no shell, no specifier or $VAR expansion
    cwd: str
    env: dict[str, str]  # the caller's environment (secrets already removed)
    mem_gb: float
    cpus: float
    log_path: Path  # output is appended here
    exit_path: Path  # the unit writes its exit record here when it ends
    description: str = ""
    cpu_quota: bool = False  # cap the job at `cpus` CPUs (not only a share of them when contended)
    est_s: int = 0  # --for: a cluster's time limit
    queue: bool = True  # False: asked for now; a cluster that cannot start it now refuses it (RuntimeBusy)
    enforce_mem: bool = True  # False (a gated job's guessed size): no memory limit at mem_gb


class Runtime(Protocol):
    name: str
    # What it talks to, for the lines that say where (the D-Bus address of the user manager it is
    # connected to); None when there is none to name (not connected yet, or a runtime whose tools find
    # their controller themselves).
    address: str | None

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def unit_name(self, job_id: str) -> str:
        """The runtime's name for the job: the idempotency key of a start."""
        ...

    async def start(self, spec: JobSpec) -> str | None:
        """Start the job. Idempotent: a job already running under its name is left alone; a stale
        ended instance of the same name is cleared first. Raises on a start that failed. Returns the
        id of this run (an exit record counts only if it carries it), or None if it cannot tell."""
        ...

    async def stop(self, job_id: str, kill: bool = False) -> None:
        """Stop the job if it runs (idempotent). Its exit record is still written. `kill`: at once
        (SIGKILL to all its processes, not waited for): memory is about to run out."""
        ...

    async def observe(self, job_ids: list[str]) -> dict[str, JobObs]:
        """State, memory in use and exit record of every job of ours the runtime knows, plus each id
        asked for (as `absent` if unknown). Raises RuntimeUnavailable if it cannot tell."""
        ...

    async def forget(self, job_id: str) -> None:
        """Drop what the runtime keeps of an ended, settled job (failed unit, exit record)."""
        ...

    async def watch(self, callback: Callable[[str, str], object]) -> None:
        """Call `callback(job_id, state)` whenever a job of ours changes state, from now on (a runtime
        that cannot tell does nothing: the loop's sweep interval still finds every change)."""
        ...

    def user_side(self) -> "UserSide | None":
        """The workstation's own side (slices, scopes, unit files), or None for a runtime without one."""
        ...


class UserSide(Protocol):
    """What only the user's own service manager has: the agents slice and its values, agent sessions
    moved into scopes, the slices' unit files, units left failed."""

    @property
    def manager_cgroup(self) -> str:
        """The manager's own cgroup (its ControlGroup): the root under which its slices live."""
        ...

    async def daemon_reload(self) -> None: ...

    async def unit_properties(self, unit: str, interface: str) -> dict: ...

    async def set_unit_properties(self, unit: str, values: dict[str, int]) -> None: ...

    async def start_scope(self, name: str, slice_name: str, pids: list[int], description: str,
                          props: dict[str, int]) -> None: ...

    async def failed_units(self) -> list[str]:
        """Names of the runtime's own units left in the failed state."""
        ...

    async def reset_failed_unit(self, name: str) -> None: ...


LONGEST_LINE = 16 << 20  # a log line longer than this is cut: never a stall, never much memory


def read_output(log_path: Path, offset: int, limit: int = 1 << 20, longest: int = LONGEST_LINE) -> tuple[bytes, int]:
    """Bytes of a job's log from `offset`, about `limit` of them, up to the end of the last complete
    line in them; returns (data, new offset). A line that does not end within `limit` is read on to
    its end (an agent's line can hold a whole file it wrote), up to `longest` bytes, past which it
    is cut (returned without its newline)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            data = f.read(limit)
            end = data.rfind(b"\n")
            while end < 0 and len(data) >= limit and len(data) < longest:
                more = f.read(min(len(data), longest - len(data)))  # twice as much each time
                if not more:
                    break
                end = more.rfind(b"\n")
                if end >= 0:
                    end += len(data)
                data += more
    except FileNotFoundError:
        return b"", offset
    if end < 0:
        if len(data) < longest:
            return b"", offset  # a line still being written
        return data, offset + len(data)  # a line longer than `longest` is cut, never a stall
    return data[: end + 1], offset + end + 1


def read_exit_record(path: Path, runtime_dir: str | None = None) -> ExitObs | None:
    """The unit's exit record, or None if there is none (or it cannot be read). The one reader of it:
    `path` is where the unit writes it (beside its log); given `runtime_dir` (the user's runtime
    directory, as the unit's manager has it), where the unit writes it instead when the state
    directory's disk is full (config/paths.exit_record_fallback) is read when `path` gives nothing."""
    found = _read_exit_file(path)
    if found is not None or not runtime_dir:
        return found
    from reconciler.config.paths import exit_record_fallback

    fallback = exit_record_fallback(path, runtime_dir)
    return None if fallback is None else _read_exit_file(fallback)


def _read_exit_file(path: Path) -> ExitObs | None:
    """One exit record file as written by exit_record.py; None if it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
        peak, cpu = data.get("peak_bytes"), data.get("cpu_usec")
        return ExitObs(
            result=str(data.get("result") or ""),
            code=str(data.get("code") or ""),
            status=str(data.get("status") if data.get("status") is not None else ""),
            peak_gb=None if peak is None else int(peak) / 1024**3,
            cpu_s=None if cpu is None else max(0, int(cpu)) / 1e6,
            oom_kills=int(data.get("oom_kills") or 0),
            at=float(data.get("at") or 0),
            invocation=str(data.get("invocation") or "") or None,
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None
