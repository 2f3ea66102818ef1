"""The systemd runtime: jobs as transient units of the user manager, over D-Bus (DESIGN §6, §12).

Low-level dbus-fast `Message` calls on org.freedesktop.systemd1 /org/freedesktop/systemd1
(interface org.freedesktop.systemd1.Manager); no introspection. This is the only module that imports
dbus_fast (about 90 ms): callers import it lazily.

What a unit gets (StartTransientUnit, mode "fail"):

    Description, Slice, Type=exec, ExecStart, ExecStopPost, WorkingDirectory, Environment,
    MemoryMax, MemorySwapMax=0, OOMPolicy=continue, CPUWeight (100 x --cpus), Nice=10 (no MemoryHigh:
    below, why),
    CPUQuotaPerSecUSec (--cpus x 1 s) where the policy sets cpu_quota,
    StandardOutputFileToAppend, StandardErrorFileToAppend, CollectMode=inactive-or-failed

The command reaches the job verbatim. Measured on systemd 252: an ExecStart set over D-Bus is never
`%`-expanded, but `$VAR`, `${VAR}` and `$$` are expanded when the command is executed; `$$` becomes
`$`, so every `$` is sent doubled. Not `ExecStartEx` with "no-env-expand" (equally verbatim): 252
writes it into the transient unit file under a key its own parser does not know, so after any
`daemon-reload` the unit is `bad-setting` and has lost its ExecStart *and* ExecStopPost(Ex) — the exit
record would never be written. Plain ExecStart/ExecStopPost survive a reload, except that 252 puts a
backslash before every `$` and `;` in them on the way (harmless for the running job, whose command
was executed already; for the exit record it is avoided, see below).

The unit writes its own exit record (reconciler/exit_record.py as ExecStopPost), so an exit is known
even when no reconciler runs at the moment the job ends; CollectMode makes ended units vanish. The
record's path also goes in the unit's environment (RES_EXIT_RECORD; Environment= survives a reload
intact), and the script prefers it to its argv.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import os
import re
import shutil
import sys
from pathlib import Path

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from reconciler.observed import cgroup
from reconciler.config.environ import SECRET_NAME, is_secret
from reconciler.config.paths import exit_record_fallback, exit_record_path
from reconciler.core.models import ExitObs, JobObs
from reconciler.render.text import squeezed
from reconciler.runtime import JobSpec, RuntimeUnavailable, read_exit_record

SYSTEMD = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT_PATH = "/org/freedesktop/systemd1/unit"
PROPERTIES = "org.freedesktop.DBus.Properties"

EXIT_RECORD_SCRIPT = str(Path(__file__).resolve().parent.parent / "exit_hook.py")  # runs exit_record.py
EXIT_RECORD_ENV = "RES_EXIT_RECORD"  # where the exit record goes; wins over the script's argv[1]
EXIT_FALLBACK_ENV = "RES_EXIT_FALLBACK"  # where it goes when the state directory's disk is full

# Set by systemd for each process it runs. Environment= would override them (it is merged last), so a
# caller that itself runs in a unit (an agent session) must not pass its own: a stale SERVICE_RESULT or
# EXIT_STATUS would be written into the exit record, a stale NOTIFY_SOCKET would talk to the wrong unit.
SYSTEMD_NAMES = frozenset({
    "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID",
    "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC", "MANAGERPID", "MAINPID", "SERVICE_RESULT",
    "EXIT_CODE", "EXIT_STATUS", "MONITOR_SERVICE_RESULT", "MONITOR_EXIT_CODE", "MONITOR_EXIT_STATUS",
    "MONITOR_INVOCATION_ID", "MONITOR_UNIT", "TRIGGER_UNIT", "TRIGGER_PATH", "TRIGGER_TIMER_REALTIME_USEC",
    "TRIGGER_TIMER_MONOTONIC_USEC", "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY",
    "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY", "CREDENTIALS_DIRECTORY", EXIT_RECORD_ENV, EXIT_FALLBACK_ENV,
})
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JOB_ID = re.compile(r"^r-[0-9]+$")

CALL_TIMEOUT_S = 10.0
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

# systemd's own exit statuses for a main process that could not be set up (systemd.exec(5)).
SETUP_STATUS = {
    200: "CHDIR", 201: "NICE", 202: "FDS", 203: "EXEC", 204: "MEMORY", 205: "LIMITS", 206: "OOM_ADJUST",
    207: "SIGNAL_MASK", 208: "STDIN", 209: "STDOUT", 210: "CHROOT", 211: "IOPRIO", 212: "TIMERSLACK",
    213: "SECUREBITS", 214: "SETSCHEDULER", 215: "CPUAFFINITY", 216: "GROUP", 217: "USER",
    218: "CAPABILITIES", 219: "CGROUP", 220: "SETSID", 221: "CONFIRM", 222: "STDERR", 224: "PAM",
    225: "NETWORK", 226: "NAMESPACE", 227: "NO_NEW_PRIVILEGES", 228: "SECCOMP", 229: "SELINUX_CONTEXT",
    230: "PERSONALITY", 231: "APPARMOR_PROFILE", 232: "ADDRESS_FAMILIES", 233: "RUNTIME_DIRECTORY",
    235: "CHOWN", 236: "SMACK_PROCESS_LABEL", 237: "KEYRING", 238: "STATE_DIRECTORY",
    239: "CACHE_DIRECTORY", 240: "LOGS_DIRECTORY", 241: "CONFIGURATION_DIRECTORY",
    242: "NUMA_POLICY", 243: "CREDENTIALS",
}


# The protocol's error (runtime/__init__.py), its name kept here for older importers.
from reconciler.runtime import UnitExists  # noqa: E402,F401


class DBusCallError(RuntimeError):
    """An error reply from the bus: `name` is the D-Bus error name."""

    def __init__(self, name: str, text: str):
        super().__init__(f"{name}: {text}")
        self.name = name
        self.text = text


def bus_label_escape(text: str) -> str:
    """A unit name as systemd puts it in an object path: every byte but [A-Za-z0-9] as _XX (and a
    leading digit too)."""
    out = []
    for i, b in enumerate(text.encode()):
        c = chr(b)
        out.append(c if (c.isascii() and c.isalnum() and not (i == 0 and c.isdigit())) else f"_{b:02x}")
    return "".join(out)


def bus_label_unescape(label: str) -> str:
    return re.sub(r"_([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), label)


def default_bus_address() -> str | None:
    """The user bus: DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus if it exists."""
    addr = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if addr:
        return addr
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return f"unix:path={os.path.join(runtime, 'bus')}"
    return None


def job_environment(env: dict[str, str], manager_env: dict[str, str]) -> list[str]:
    """`NAME=value` entries of `env` that the unit would not get anyway (they differ from the user
    manager's environment): never a secret-looking name, never a name systemd would refuse, never one
    that systemd sets itself for the unit's processes."""
    out = []
    for name, value in env.items():
        if is_secret(name, value) or not ENV_NAME.match(name) or name in SYSTEMD_NAMES:
            continue
        if "\0" in value or manager_env.get(name) == value:
            continue
        out.append(f"{name}={value}")
    return out


def manager_only(env: dict[str, str], manager_env: dict[str, str]) -> list[str]:
    """Names in the manager's environment that the caller does not have: unset for the job, so that
    it sees the caller's environment, not what the manager was started with (a PYENV_VERSION, a
    DISPLAY the caller dropped). Secret-looking names, which the caller's copy never carries, and
    systemd's own are left as the manager has them."""
    return sorted(name for name in manager_env
                  if name not in env and ENV_NAME.match(name) and not SECRET_NAME.search(name) and name not in SYSTEMD_NAMES)


def cpu_weight(cpus: float) -> int:
    """systemd's CPUWeight (1–10000) for a job that asked for `cpus`."""
    return min(max(round(100 * cpus), 1), 10000)


class SystemdRuntime:
    name = "systemd"

    def __init__(self, unit_prefix: str, jobs_slice: str, logs_dir: Path | None = None,
                 bus_address: str | None = None, state_root: Path | None = None):
        if logs_dir is None:
            from reconciler.config.paths import Paths

            logs_dir = Paths.default().logs
        self.prefix = unit_prefix
        self.jobs_slice = jobs_slice
        self.logs_dir = Path(logs_dir)
        self._address = bus_address
        self._state_root = state_root  # where a private manager of this state directory is recorded
        self.address: str | None = None  # the bus connected to
        self._bus: MessageBus | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manager_env: dict[str, str] = {}
        self._manager_cgroup = ""
        self._unit_re = re.compile(rf"^{re.escape(unit_prefix)}-(r-[0-9]+)\.service$")
        # JobRemoved: results that arrived before anyone waited for them, and waiters.
        self._job_results: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._job_waiters: dict[str, asyncio.Future] = {}
        # watch(): told when a job unit of ours changes state; our units' object paths start so.
        self._watch = None
        self._unit_path_prefix = f"{UNIT_PATH}/{bus_label_escape(unit_prefix + '-r-')}"

    # ------------------------------------------------------------------ connection

    async def connect(self) -> None:
        """Open the user bus and read what is cached per connection (the manager's environment and
        control group). Raises RuntimeUnavailable with one line."""
        if self._bus is not None and self._bus.connected and self._loop is asyncio.get_running_loop():
            return
        self._drop()
        if self._address:
            candidates = [self._address]
        else:
            # The session's own manager first; else the private one `res serve` started for this
            # state directory (reconciler/runtime/usermanager.py), if there is one.
            candidates = [a for a in (default_bus_address(), self._private_bus()) if a]
            candidates = list(dict.fromkeys(candidates))
        if not candidates:
            raise RuntimeUnavailable("systemd user manager unreachable: DBUS_SESSION_BUS_ADDRESS is not set "
                                     "and $XDG_RUNTIME_DIR/bus does not exist", absent=True)
        errors = []
        for address in candidates:
            try:
                await self._connect_to(address)
                self.address = address
                return
            except RuntimeUnavailable as e:
                errors.append(e)
        raise RuntimeUnavailable(str(errors[0]), absent=all(e.absent for e in errors))

    def _private_bus(self) -> str | None:
        if self._state_root is None:
            return None
        from reconciler.runtime.usermanager import bus_address

        return bus_address(self._state_root)

    async def _connect_to(self, address: str) -> None:
        bus = None
        try:
            bus = MessageBus(bus_address=address)
            await asyncio.wait_for(bus.connect(), CALL_TIMEOUT_S)
            self._bus, self._loop = bus, asyncio.get_running_loop()
            bus.add_message_handler(self._on_message)
            await self._call_raw("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                 "AddMatch", "s",
                                 [f"type='signal',sender='{SYSTEMD}',path='{SYSTEMD_PATH}',"
                                  f"interface='{MANAGER}',member='JobRemoved'"])
            env = await self._manager_property("Environment")
            self._manager_cgroup = await self._manager_property("ControlGroup")
            if self._watch is not None:
                await self._subscribe()
        except Exception as e:  # noqa: BLE001 - every way of not getting there is the same to callers
            self._bus = None
            if bus is not None:
                try:
                    bus.disconnect()
                except Exception:  # noqa: BLE001
                    pass
            what = e.text if isinstance(e, DBusCallError) else (str(e) or type(e).__name__)
            if isinstance(e, asyncio.TimeoutError):
                what = "no answer in time"
            # No manager there at all (no socket, nobody listening, no systemd on that bus), as opposed
            # to one that is slow or broken: only then may a private one be started beside it.
            absent = isinstance(e, (FileNotFoundError, ConnectionRefusedError)) or (
                isinstance(e, DBusCallError) and e.name in ("org.freedesktop.DBus.Error.ServiceUnknown",
                                                            "org.freedesktop.DBus.Error.NameHasNoOwner"))
            raise RuntimeUnavailable(squeezed(f"systemd user manager unreachable at {address}: {what}"),
                                     absent=absent) from None
        self._manager_env = dict(kv.split("=", 1) for kv in env if "=" in kv)

    def _drop(self) -> MessageBus | None:
        """Forget the connection (and what waits on it); return it if it belongs to this loop."""
        bus, self._bus = self._bus, None
        loop, self._loop = self._loop, None
        for fut in self._job_waiters.values():
            if not fut.done():
                fut.cancel()
        self._job_waiters.clear()
        self._job_results.clear()
        try:
            same = loop is asyncio.get_running_loop()
        except RuntimeError:
            same = False
        if bus is not None and not same:
            # Its event loop (an earlier asyncio.run) is gone, so it cannot be waited for the usual
            # way: disconnect() shuts the socket down at once, without a loop (the manager sees this
            # client gone), and the bus's file is closed when the bus is collected.
            bus.disconnect()
            return None
        return bus

    async def close(self) -> None:
        bus = self._drop()
        if bus is None:
            return
        try:
            bus.disconnect()
            await asyncio.wait_for(bus.wait_for_disconnect(), 2)
        except Exception:  # noqa: BLE001 - closing a broken connection is closing it
            pass

    def user_side(self) -> "SystemdRuntime":
        """The user manager is the workstation's own: slices, scopes and unit files are here too."""
        return self

    async def watch(self, callback) -> None:
        """From now on (and across reconnects), call `callback(job_id, state)` whenever one of our job
        units changes its ActiveState ("inactive", "failed", …) or is collected ("removed"): what
        lets a loop act on a job's end at once instead of at its next timer."""
        self._watch = callback
        if self._bus is not None and self._bus.connected:
            await self._subscribe()

    async def _subscribe(self) -> None:
        """Unit signals are only sent to clients that called Subscribe; only our units' are kept."""
        for rule in (f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',member='PropertiesChanged',"
                     f"path_namespace='{UNIT_PATH}',arg0='org.freedesktop.systemd1.Unit'",
                     f"type='signal',sender='{SYSTEMD}',path='{SYSTEMD_PATH}',interface='{MANAGER}',member='UnitRemoved'"):
            await self._call_raw("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                 "AddMatch", "s", [rule])
        await self._call_raw(SYSTEMD, SYSTEMD_PATH, MANAGER, "Subscribe", "", [])

    def _unit_signal(self, msg: Message) -> None:
        job_id = state = None
        if msg.member == "PropertiesChanged" and (msg.path or "").startswith(self._unit_path_prefix):
            changed = msg.body[1] if len(msg.body) > 1 and isinstance(msg.body[1], dict) else {}
            if "ActiveState" in changed:
                m = self._unit_re.match(bus_label_unescape(msg.path.rsplit("/", 1)[1]))
                job_id, state = (m.group(1) if m else None), changed["ActiveState"].value
        elif msg.member == "UnitRemoved" and msg.body:
            m = self._unit_re.match(str(msg.body[0]))
            job_id, state = (m.group(1) if m else None), "removed"
        if job_id is not None:
            try:
                self._watch(job_id, state)
            except Exception:  # noqa: BLE001 - a watcher's failure must not break the connection
                pass

    def _on_message(self, msg: Message):
        if msg.message_type is MessageType.SIGNAL and self._watch is not None and msg.member in ("PropertiesChanged", "UnitRemoved"):
            self._unit_signal(msg)
            return None
        if (msg.message_type is MessageType.SIGNAL and msg.member == "JobRemoved"
                and msg.interface == MANAGER and len(msg.body) == 4):
            _, job, unit, result = msg.body
            waiter = self._job_waiters.pop(job, None)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(result)
            elif unit.startswith(self.prefix + "-"):
                # Our own job, finished before its caller got to wait for it (the reply and the
                # signal can arrive in one read).
                self._job_results[job] = result
                while len(self._job_results) > 256:
                    self._job_results.popitem(last=False)
        return None

    async def _call_raw(self, destination: str, path: str, interface: str, member: str, signature: str,
                        body: list):
        bus = self._bus
        if bus is None or not bus.connected:
            raise RuntimeUnavailable("systemd user manager: not connected")
        msg = Message(destination=destination, path=path, interface=interface, member=member,
                      signature=signature, body=body)
        reply = await asyncio.wait_for(bus.call(msg), CALL_TIMEOUT_S)
        if reply.message_type is MessageType.ERROR:
            text = reply.body[0] if reply.body else ""
            raise DBusCallError(reply.error_name or "unknown", str(text))
        return reply.body

    async def _ensure(self) -> None:
        """Connect if needed: first use, a broken connection, or a new event loop (asyncio.run again)."""
        if self._bus is None or not self._bus.connected or self._loop is not asyncio.get_running_loop():
            await self.connect()

    async def _manager(self, member: str, signature: str, body: list):
        """A Manager method call. Transport failures become RuntimeUnavailable; error replies raise
        DBusCallError."""
        await self._ensure()
        try:
            return await self._call_raw(SYSTEMD, SYSTEMD_PATH, MANAGER, member, signature, body)
        except (DBusCallError, RuntimeUnavailable):
            raise
        except asyncio.TimeoutError:
            raise RuntimeUnavailable(f"systemd user manager did not answer {member} in {CALL_TIMEOUT_S:g} s") from None
        except Exception as e:  # noqa: BLE001 - the connection broke
            raise RuntimeUnavailable(squeezed(f"systemd user manager: {member} failed: {e or type(e).__name__}")) from None

    async def _manager_or(self, what: str, member: str, signature: str, body: list):
        """A Manager call whose error reply becomes one line: `<what> failed: <systemd's text>`."""
        try:
            return await self._manager(member, signature, body)
        except DBusCallError as e:
            raise RuntimeError(squeezed(f"{what} failed: {e.text}")) from None

    async def _manager_property(self, name: str):
        body = await self._call_raw(SYSTEMD, SYSTEMD_PATH, PROPERTIES, "Get", "ss", [MANAGER, name])
        return body[0].value

    async def _wait_job(self, job: str, timeout: float) -> str | None:
        """The result of a queued job (JobRemoved), or None if it did not finish in `timeout`."""
        if job in self._job_results:
            return self._job_results.pop(job)
        fut = asyncio.get_running_loop().create_future()
        self._job_waiters[job] = fut
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._job_waiters.pop(job, None)

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

    def _properties(self, spec: JobSpec) -> list:
        cmd = list(spec.cmd)
        if not cmd or not cmd[0]:
            raise ValueError("empty command")
        if spec.cwd and not os.path.isabs(spec.cwd):
            raise ValueError(f"working directory must be absolute: {spec.cwd!r}")
        path = cmd[0]
        if "/" in path and not os.path.isabs(path):  # ./run.sh: systemd wants it absolute
            path = os.path.normpath(os.path.join(spec.cwd or os.getcwd(), path))
        mem = int(spec.mem_gb * 1024**3)
        log = str(spec.log_path)
        stop_post = [sys.executable, "-I", "-S", EXIT_RECORD_SCRIPT, str(spec.exit_path)]
        for part in stop_post[:4]:
            if "$" in part or ";" in part:
                raise ValueError(f"cannot run the exit record from {part!r}: systemd loses '$' and ';' "
                                 "in commands across a daemon-reload")
        env = job_environment(spec.env, self._manager_env)
        env.append(f"{EXIT_RECORD_ENV}={spec.exit_path}")
        fallback = self.fallback_exit_path(spec.job_id)
        if fallback is not None:
            env.append(f"{EXIT_FALLBACK_ENV}={fallback}")
        unset = manager_only(spec.env, self._manager_env)
        # A gated job's guessed size is booked, not enforced: the slices' own limits hold it, as they
        # would have held the command without the gate. No MemoryHigh under the cap: with no swap
        # (MemorySwapMax=0) the kernel cannot take a job's own memory back, so on cgroup v2 a job past
        # it is only slowed on its way to the cap (measured in the guest tier: 10-97 s to be killed at
        # 64 MB with MemoryHigh at 90 %, under 1 s without; docs/guest.md). An agent waits
        # on that past its tool's timeout; the kill at the cap is a clear exit record at once.
        memory = [["MemoryMax", Variant("t", mem)]] if spec.enforce_mem else []
        props = [
            ["Description", Variant("s", squeezed(spec.description or " ".join(cmd))[:400])],
            ["Slice", Variant("s", self.jobs_slice)],
            ["Type", Variant("s", "exec")],
            ["ExecStart", Variant("a(sasb)", [[path, [a.replace("$", "$$") for a in cmd], False]])],
            ["ExecStopPost", Variant("a(sasb)", [[stop_post[0], stop_post, True]])],  # True: ignore its failure
            ["Environment", Variant("as", env)],
            ["UnsetEnvironment", Variant("as", unset)],
            *memory,
            ["MemorySwapMax", Variant("t", 0)],
            # One process killed at the cap (a test worker, one compiler) is the job's to handle, as on
            # cgroup v1, where systemd never hears of it: on v2 systemd's default (OOMPolicy=stop)
            # would stop the whole job and lose the test runner's own report. The exit record still
            # counts the kill (memory.events) and says so (docs/guest.md).
            ["OOMPolicy", Variant("s", "continue")],
            # --cpus as a share: what the kernel gives each job when CPUs are contended (100 = one
            # CPU's worth against systemd's default of 100); a hard cap only where the policy asks.
            ["CPUWeight", Variant("t", cpu_weight(spec.cpus))],
            ["Nice", Variant("i", 10)],
            ["StandardOutputFileToAppend", Variant("s", log)],
            ["StandardErrorFileToAppend", Variant("s", log)],
            ["CollectMode", Variant("s", "inactive-or-failed")],
        ]
        if spec.cpu_quota:
            props.append(["CPUQuotaPerSecUSec", Variant("t", max(int(spec.cpus * 1_000_000), 10_000))])
        if spec.cwd:
            props.append(["WorkingDirectory", Variant("s", spec.cwd)])
        return props

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
        props = self._properties(spec)  # bad input fails before anything changes
        if spec.cwd and not os.path.isdir(spec.cwd):
            # Checked here because systemd's own failure (status 200/CHDIR) would hit the exit
            # record too (ExecStopPost runs in the same directory): no record, no reason.
            problem = _path_problem(spec.cwd, want_dir=True) or "not a directory"
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
        if ended is not None and not self._setup_failure(ended):
            return  # the command ran and ended at once (e.g. `false`): a job that exited, not a failed start
        raise RuntimeError(self._start_error(unit, spec, result, ended))

    @staticmethod
    def _setup_failure(ended: ExitObs) -> bool:
        return ended.code == "exited" and ended.status.isdigit() and int(ended.status) in SETUP_STATUS

    def _start_error(self, unit: str, spec: JobSpec, result: str, ended: ExitObs | None) -> str:
        """One line saying why a start failed, as precisely as can be told from outside."""
        if ended is None or not self._setup_failure(ended):
            why = f"job {result}"
            if ended is not None:
                why += f", {ended.result} (status {ended.status})"
            return squeezed(f"start of {unit} failed: {why}")
        status = int(ended.status)
        tag = f"status {status}/{SETUP_STATUS[status]}"
        why = ""
        if status == 203:
            why = _exec_problem(spec.cmd[0], spec.cwd, spec.env.get("PATH") or self._manager_env.get("PATH"))
        elif status == 200 and spec.cwd:
            why = f"{spec.cwd}: {_path_problem(spec.cwd, want_dir=True) or 'cannot change into it'}"
        elif status in (209, 222):
            why = f"{spec.log_path}: cannot open the log"
        return squeezed(f"start of {unit} failed: {why + ' ' if why else ''}({tag})")

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


def _path_problem(path: str, want_dir: bool = False) -> str | None:
    try:
        st = os.stat(path)
    except OSError as e:
        return os.strerror(e.errno or errno.ENOENT)
    if want_dir:
        return None if os.path.isdir(path) else os.strerror(errno.ENOTDIR)
    if os.path.isdir(path):
        return os.strerror(errno.EISDIR)
    if not os.access(path, os.X_OK) or not (st.st_mode & 0o111):
        return os.strerror(errno.EACCES)
    return None


def _exec_problem(program: str, cwd: str, search_path: str | None) -> str:
    """Why `program` could not be executed, told from here: "NAME: No such file or directory"."""
    if "/" in program:
        full = program if os.path.isabs(program) else os.path.join(cwd or os.getcwd(), program)
        problem = _path_problem(full)
    else:
        problem = None if shutil.which(program, path=search_path) else os.strerror(errno.ENOENT)
    return f"{program}: {problem or 'cannot execute'}"
