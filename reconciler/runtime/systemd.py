"""The systemd runtime: jobs as transient units of the user manager, over D-Bus (DESIGN §6, §12).

SystemdRuntime is the Runtime and the UserSide (runtime/__init__.py) of a workstation's own user
manager: a job started, stopped, forgotten and observed by its unit, and beyond jobs the agents
slice's properties, scopes and unit files. It is made of two modules beside this one:
managerbus.py, the connection to the manager and its calls (its base class, ManagerBus), and
jobunit.py, what a job's unit is given (StartTransientUnit's properties: the command verbatim, the
exit record the unit writes itself) and why a start failed. These three are the only modules that
import dbus_fast (about 90 ms): callers import them lazily.
"""
from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from dbus_fast import Variant

from reconciler.observed import cgroup
from reconciler.config.paths import exit_record_fallback, exit_record_path
from reconciler.core.models import ExitObs, JobObs
from reconciler.render.text import squeezed
from reconciler.runtime import JobSpec, RuntimeUnavailable, read_exit_record
from reconciler.runtime.jobunit import job_properties, path_problem, setup_failure, start_error
from reconciler.runtime.managerbus import PROPERTIES, SYSTEMD, DBusCallError, ManagerBus

JOB_ID = re.compile(r"^r-[0-9]+$")

START_WAIT_S = 5.0
STOP_WAIT_S = 120.0  # systemd's default TimeoutStopSec (90 s) + the exit record

ACTIVE_STATES = {
    "active": "active",
    "reloading": "active",
    "refreshing": "active",
    "activating": "activating",
    "deactivating": "deactivating",
    "inactive": "inactive",
    "failed": "failed",
}


# The protocol's error (runtime/__init__.py), its name kept here for older importers.
from reconciler.runtime import UnitExists  # noqa: E402,F401


class SystemdRuntime(ManagerBus):
    name = "systemd"

    def __init__(self, unit_prefix: str, jobs_slice: str, logs_dir: Path | None = None,
                 bus_address: str | None = None, state_root: Path | None = None):
        if logs_dir is None:
            from reconciler.config.paths import Paths

            logs_dir = Paths.default().logs
        super().__init__(unit_prefix, bus_address, state_root)
        self.jobs_slice = jobs_slice
        self.logs_dir = Path(logs_dir)

    def user_side(self) -> "SystemdRuntime":
        """The user manager is the workstation's own: slices, scopes and unit files are here too."""
        return self

    # ------------------------------------------------------------------ names and states

    def unit_name(self, job_id: str) -> str:
        if not JOB_ID.match(job_id):
            raise ValueError(f"not a job id: {job_id!r}")
        return f"{self.prefix}-{job_id}.service"

    def exit_path(self, job_id: str) -> Path:
        return exit_record_path(self.logs_dir, job_id)

    def _runtime_dir(self) -> str | None:
        """The user's runtime directory as the manager has it (where a unit's fallback exit record goes)."""
        return self._manager_env.get("XDG_RUNTIME_DIR") or os.environ.get("XDG_RUNTIME_DIR")

    def fallback_exit_path(self, job_id: str) -> Path | None:
        return exit_record_fallback(self.exit_path(job_id), self._runtime_dir())

    def _read_exit(self, job_id: str) -> ExitObs | None:
        return read_exit_record(self.exit_path(job_id), self._runtime_dir())

    async def _unit_state(self, unit: str) -> tuple[str, str]:
        """(load state, active state) of one unit; ("not-found", "inactive") when not loaded."""
        (rows,) = await self._manager("ListUnitsByNames", "as", [[unit]])
        if not rows:
            return "not-found", "inactive"
        return rows[0][2], rows[0][3]

    # ------------------------------------------------------------------ start

    def _prepare_files(self, unit: str, spec: JobSpec) -> None:
        """The log exists 0600 before systemd opens it (systemd would create it 0644; a symlink is
        refused); exit records of an earlier attempt are gone, so the one found later is this one's."""
        try:
            spec.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
        except OSError as e:
            raise RuntimeError(squeezed(f"start of {unit} failed: {e.filename or spec.log_path}: {e.strerror}")) from None
        for path in (spec.exit_path, self.fallback_exit_path(spec.job_id)):
            try:
                if path is not None:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise RuntimeError(squeezed(f"start of {unit} failed: {path}: {e.strerror}")) from None

    async def _clear_ended(self, unit: str) -> None:
        """Wait out a stopping unit and reset a failed/inactive one, so its name can be used again."""
        for _ in range(100):  # ~5 s
            load, active = await self._unit_state(unit)
            if active != "deactivating":
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"start of {unit} failed: an earlier instance is still stopping")
        if load != "not-found":
            try:
                await self._manager("ResetFailedUnit", "s", [unit])
            except DBusCallError:
                pass

    async def start(self, spec: JobSpec) -> str | None:
        unit = self.unit_name(spec.job_id)
        await self._start(unit, spec)
        return await self.invocation(unit)

    async def invocation(self, unit: str) -> str | None:
        """The unit's InvocationID (hex): what its exit record must carry to count as its own. None
        when it cannot be told (the unit already ended and was collected)."""
        try:
            (path,) = await self._manager("LoadUnit", "s", [unit])
            (value,) = await self._call_raw(SYSTEMD, path, PROPERTIES, "Get", "ss", ["org.freedesktop.systemd1.Unit",
                                                                                     "InvocationID"])
        except Exception:  # noqa: BLE001 - unknown is allowed: any record of an ended unit then counts
            return None
        raw = bytes(value.value or b"")
        return raw.hex() if any(raw) else None

    async def _start(self, unit: str, spec: JobSpec) -> None:
        await self._ensure()  # the environment filter needs the manager's environment
        # bad input fails before anything changes
        props = job_properties(spec, self.jobs_slice, self._manager_env, self.fallback_exit_path(spec.job_id))
        if spec.cwd and not os.path.isdir(spec.cwd):
            # Checked here because systemd's own failure (status 200/CHDIR) would hit the exit
            # record too (ExecStopPost runs in the same directory): no record, no reason.
            problem = path_problem(spec.cwd, want_dir=True) or "not a directory"
            raise RuntimeError(squeezed(f"start of {unit} failed: working directory {spec.cwd}: {problem}"))
        load, active = await self._unit_state(unit)
        if active in ("active", "activating", "reloading", "refreshing"):
            return  # already running: the name is the idempotency key
        if load != "not-found" or active != "inactive":
            await self._clear_ended(unit)
        self._prepare_files(unit, spec)
        for attempt in range(40):
            try:
                (job,) = await self._manager("StartTransientUnit", "ssa(sv)a(sa(sv))", [unit, "fail", props, []])
                break
            except DBusCallError as e:
                if e.name != "org.freedesktop.systemd1.UnitExists":
                    raise RuntimeError(squeezed(f"start of {unit} failed: {e.text}")) from None
            # Someone else started it meanwhile (fine), or an ended instance is not collected yet.
            load, active = await self._unit_state(unit)
            if active in ("active", "activating", "reloading", "refreshing"):
                return
            await self._clear_ended(unit)
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"start of {unit} failed: an ended instance of the unit does not go away")
        result = await self._wait_job(job, START_WAIT_S)
        if result == "done":
            return
        if result is None:
            load, active = await self._unit_state(unit)
            if active in ("active", "activating", "reloading", "refreshing") or load == "not-found":
                return  # running, or already ran and ended (its exit record tells how)
            raise RuntimeError(f"start of {unit} did not finish in {START_WAIT_S:g} s (unit {active})")
        ended = self._read_exit(spec.job_id)
        if ended is not None and not setup_failure(ended):
            return  # the command ran and ended at once (e.g. `false`): a job that exited, not a failed start
        raise RuntimeError(start_error(unit, spec, result, ended, self._manager_env.get("PATH")))

    # ------------------------------------------------------------------ stop, forget

    async def stop(self, job_id: str, kill: bool = False, timeout: float = STOP_WAIT_S) -> None:
        unit = self.unit_name(job_id)
        if kill:
            # SIGKILL to every process of the unit at once, not waited for: the unit's end (and its
            # exit record) comes as the state change the loop watches for.
            try:
                await self._manager("KillUnit", "ssi", [unit, "all", 9])
            except DBusCallError as e:
                if e.name not in ("org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed",
                                  "org.freedesktop.systemd1.NoSuchProcess"):
                    raise RuntimeError(squeezed(f"kill of {unit} failed: {e.text}")) from None
            return
        try:
            (job,) = await self._manager("StopUnit", "ss", [unit, "replace"])
        except DBusCallError as e:
            if e.name in ("org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed"):
                return
            raise RuntimeError(squeezed(f"stop of {unit} failed: {e.text}")) from None
        if await self._wait_job(job, timeout) is None:
            raise RuntimeError(f"stop of {unit} did not finish in {timeout:g} s")

    async def forget(self, job_id: str) -> None:
        unit = self.unit_name(job_id)
        try:
            await self._manager("ResetFailedUnit", "s", [unit])
        except (DBusCallError, RuntimeUnavailable):
            pass
        for path in (self.exit_path(job_id), self.fallback_exit_path(job_id)):
            try:
                if path is not None:
                    os.unlink(path)
            except FileNotFoundError:
                pass

    # ------------------------------------------------------------------ observe

    async def failed_units(self) -> list[str]:
        """Names of our units in the failed state (for `res clean`'s reset-failed)."""
        (rows,) = await self._manager("ListUnitsByPatterns", "asas", [["failed"], [f"{self.prefix}-*"]])
        return [row[0] for row in rows]

    async def reset_failed_unit(self, name: str) -> None:
        await self._manager("ResetFailedUnit", "s", [name])

    async def observe(self, job_ids: list[str]) -> dict[str, JobObs]:
        try:
            (rows,) = await self._manager("ListUnitsByPatterns", "asas", [[], [f"{self.prefix}-r-*.service"]])
        except DBusCallError as e:
            raise RuntimeUnavailable(squeezed(f"systemd user manager: cannot list units: {e.text}")) from None
        out: dict[str, JobObs] = {}
        for row in rows:
            name, load, active = row[0], row[2], row[3]
            m = self._unit_re.match(name)
            if not m or load == "not-found" and active == "inactive":
                continue
            job_id = m.group(1)
            state = ACTIVE_STATES.get(active, "activating")  # unknown: alive, not ended (act on nothing)
            used, cache, pressure = 0.0, 0.0, None
            if state in ("active", "activating", "deactivating"):
                path = cgroup.unit_cgroup(self._manager_cgroup, self.jobs_slice, name)
                used = (cgroup.memory_used_bytes(path) or 0) / 1024**3
                # (page cache the kernel takes back: not what the ladder holds against its book)
                cache = min((cgroup.memory_file_cache_bytes(path) or 0) / 1024**3, used)
                pressure = cgroup.memory_pressure_some_avg60(path)
            out[job_id] = JobObs(state=state, mem_used_gb=used, mem_cache_gb=cache, pressure_avg60=pressure,
                                 exit=self._read_exit(job_id))
        for job_id in job_ids:
            if job_id not in out:
                out[job_id] = JobObs(state="absent", exit=self._read_exit(job_id))
        return out

    # ------------------------------------------------------------------ slices, scopes, unit files
    # Beyond jobs: the agents slice's properties for game mode, agent sessions adopted into
    # scopes, unit files reloaded. systemd only; callers reach them through this runtime.

    @property
    def manager_cgroup(self) -> str:
        return self._manager_cgroup

    async def manager_property(self, name: str):
        await self._ensure()
        return await self._manager_property(name)

    async def daemon_reload(self) -> None:
        """Reload unit files (the reply comes once the reload is done)."""
        await self._manager("Reload", "", [])

    async def unit_properties(self, unit: str, interface: str) -> dict:
        """Every property of `interface` (e.g. "Slice", "Scope", "Unit") of `unit`, loading it if
        needed; values unwrapped."""
        (path,) = await self._manager("LoadUnit", "s", [unit])
        try:
            (props,) = await self._call_raw(SYSTEMD, path, PROPERTIES, "GetAll", "s",
                                            [f"org.freedesktop.systemd1.{interface}"])
        except (DBusCallError, RuntimeUnavailable):
            raise
        except Exception as e:  # noqa: BLE001 - the connection broke
            raise RuntimeUnavailable(squeezed(f"systemd user manager: reading {unit} failed: {e}")) from None
        return {k: v.value for k, v in props.items()}

    async def set_unit_properties(self, unit: str, values: dict[str, int]) -> None:
        """SetUnitProperties at runtime (not persisted past a reboot). Integers only: the weights and
        memory limits are all D-Bus `t`."""
        props = [[k, Variant("t", int(v))] for k, v in values.items()]
        await self._manager_or(f"setting {', '.join(values)} of {unit}", "SetUnitProperties", "sba(sv)",
                               [unit, True, props])

    async def start_scope(self, name: str, slice_name: str, pids: list[int], description: str,
                          values: dict[str, int]) -> None:
        """A new scope `name` in `slice_name` holding the running `pids` (moved, not restarted)."""
        props = [["Description", Variant("s", squeezed(description)[:400])],
                 ["Slice", Variant("s", slice_name)],
                 ["PIDs", Variant("au", [int(p) for p in pids])],
                 ["CollectMode", Variant("s", "inactive-or-failed")]]
        props += [[k, Variant("t", int(v))] for k, v in values.items()]
        try:
            (job,) = await self._manager("StartTransientUnit", "ssa(sv)a(sa(sv))", [name, "fail", props, []])
        except DBusCallError as e:
            if e.name == "org.freedesktop.systemd1.UnitExists":
                raise UnitExists(name) from None
            raise RuntimeError(squeezed(f"start of {name} failed: {e.text}")) from None
        result = await self._wait_job(job, START_WAIT_S)
        if result not in ("done", None):
            raise RuntimeError(f"start of {name} failed: job {result}")

    async def enable_unit_files(self, names: list[str]) -> None:
        await self._manager_or(f"enabling {' '.join(names)}", "EnableUnitFiles", "asbb", [names, False, True])

    async def disable_unit_files(self, names: list[str]) -> None:
        await self._manager_or(f"disabling {' '.join(names)}", "DisableUnitFiles", "asb", [names, False])

    async def start_unit(self, name: str, timeout: float = START_WAIT_S) -> str | None:
        """StartUnit (mode "replace"); the job's result, None if it did not finish in `timeout`."""
        (job,) = await self._manager_or(f"start of {name}", "StartUnit", "ss", [name, "replace"])
        return await self._wait_job(job, timeout)

    async def stop_unit(self, name: str, timeout: float = STOP_WAIT_S) -> str | None:
        """StopUnit (mode "replace") of any unit; its job's result, or None if it was not loaded."""
        try:
            (job,) = await self._manager("StopUnit", "ss", [name, "replace"])
        except DBusCallError as e:
            if e.name in ("org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed"):
                return None
            raise RuntimeError(squeezed(f"stop of {name} failed: {e.text}")) from None
        return await self._wait_job(job, timeout)
