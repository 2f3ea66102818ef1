"""A job's transient unit: the properties StartTransientUnit is given, and why a start failed.

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

import errno
import os
import re
import shutil
import sys
from pathlib import Path

from dbus_fast import Variant

from reconciler.config.environ import SECRET_NAME, is_secret
from reconciler.core.models import ExitObs
from reconciler.render.text import squeezed
from reconciler.runtime import JobSpec

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


def job_properties(spec: JobSpec, jobs_slice: str, manager_env: dict[str, str],
                   fallback_exit: Path | None) -> list:
    """StartTransientUnit's properties of `spec`'s unit in `jobs_slice`; `manager_env` is the user
    manager's environment (what the job gets anyway), `fallback_exit` where the exit record goes when
    the state directory's disk is full. A ValueError for what systemd could not be given."""
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
    env = job_environment(spec.env, manager_env)
    env.append(f"{EXIT_RECORD_ENV}={spec.exit_path}")
    if fallback_exit is not None:
        env.append(f"{EXIT_FALLBACK_ENV}={fallback_exit}")
    unset = manager_only(spec.env, manager_env)
    # A gated job's guessed size is booked, not enforced: the slices' own limits hold it, as they
    # would have held the command without the gate. No MemoryHigh under the cap: with no swap
    # (MemorySwapMax=0) the kernel cannot take a job's own memory back, so on cgroup v2 a job past
    # it is only slowed on its way to the cap (measured in the guest tier: 10-97 s to be killed at
    # 64 MB with MemoryHigh at 90 %, under 1 s without; docs/guest.md). An agent waits
    # on that past its tool's timeout; the kill at the cap is a clear exit record at once.
    memory = [["MemoryMax", Variant("t", mem)]] if spec.enforce_mem else []
    props = [
        ["Description", Variant("s", squeezed(spec.description or " ".join(cmd))[:400])],
        ["Slice", Variant("s", jobs_slice)],
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


def setup_failure(ended: ExitObs) -> bool:
    """The unit's main process could not be set up (one of systemd's own statuses): a failed start,
    not a command that ran and ended at once."""
    return ended.code == "exited" and ended.status.isdigit() and int(ended.status) in SETUP_STATUS


def start_error(unit: str, spec: JobSpec, result: str, ended: ExitObs | None, manager_path: str | None) -> str:
    """One line saying why a start failed, as precisely as can be told from outside (`manager_path`:
    the PATH of the user manager's environment, where the job's own has none)."""
    if ended is None or not setup_failure(ended):
        why = f"job {result}"
        if ended is not None:
            why += f", {ended.result} (status {ended.status})"
        return squeezed(f"start of {unit} failed: {why}")
    status = int(ended.status)
    tag = f"status {status}/{SETUP_STATUS[status]}"
    why = ""
    if status == 203:
        why = _exec_problem(spec.cmd[0], spec.cwd, spec.env.get("PATH") or manager_path)
    elif status == 200 and spec.cwd:
        why = f"{spec.cwd}: {path_problem(spec.cwd, want_dir=True) or 'cannot change into it'}"
    elif status in (209, 222):
        why = f"{spec.log_path}: cannot open the log"
    return squeezed(f"start of {unit} failed: {why + ' ' if why else ''}({tag})")


def path_problem(path: str, want_dir: bool = False) -> str | None:
    """What is wrong with `path` as a program to run (or a directory to run in), as strerror says it;
    None when nothing is seen from here."""
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
        problem = path_problem(full)
    else:
        problem = None if shutil.which(program, path=search_path) else os.strerror(errno.ENOENT)
    return f"{program}: {problem or 'cannot execute'}"
