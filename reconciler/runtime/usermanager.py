"""A private systemd user manager, for machines where none is reachable: containers, CI, a root shell
over ssh without lingering (DESIGN §9, §12). `res serve` boots one for its state directory when the
policy allows (`private_manager = "auto"`), says so in one line, and every later `res` call of that
state directory (and a restarted loop) finds and reuses it. The test harness boots its manager with
the same code (tests/usermgr.py).

What runs: `dbus-daemon --session --address=unix:path=RUNTIME/bus --nofork` and `systemd --user`,
each in a session of its own (they outlive the `res serve` that started them), with
XDG_RUNTIME_DIR=RUNTIME and DBUS_SESSION_BUS_ADDRESS pointing at that bus. systemd --user only runs
where the system looks booted with systemd: the directory /run/systemd/system must exist (root may
create it; anyone else gets one line saying so).

Where: RUNTIME is `$XDG_RUNTIME_DIR/res-manager` when XDG_RUNTIME_DIR is a directory of ours (a root
shell over ssh has /run/user/0 but no manager in it), else `/tmp/res-manager-<uid>-<hash of the state
dir>` (socket paths must stay short). The state directory's `manager/` holds the runtime directory's
path and the two pids; `stop` ends those two processes, by pid.

    python3 -m reconciler.runtime.usermanager start STATE_DIR [CONFIG_HOME]  -> `export VAR=…` lines
    python3 -m reconciler.runtime.usermanager env STATE_DIR                  -> the same, for a running one
    python3 -m reconciler.runtime.usermanager stop STATE_DIR
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from reconciler.observed.procs import alive

SYSTEMD_CANDIDATES = ("/lib/systemd/systemd", "/usr/lib/systemd/systemd")
BOOTED_MARK = "/run/systemd/system"
UP_S = 30.0


class ManagerError(Exception):
    """A private manager could not be started; one line saying why."""


def systemd_binary() -> str | None:
    return next((p for p in SYSTEMD_CANDIDATES if os.path.exists(p)), None)


def record_dir(state_root: Path) -> Path:
    return Path(state_root) / "manager"


def _own_dir(path: Path) -> bool:
    from reconciler.config.paths import own_private_dir

    return own_private_dir(path) is None


def runtime_dir_for(state_root: Path, env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and _own_dir(Path(xdg)):
        return Path(xdg) / "res-manager"
    digest = hashlib.sha256(str(Path(state_root).resolve()).encode()).hexdigest()[:8]
    return Path("/tmp") / f"res-manager-{os.getuid()}-{digest}"


def recorded_runtime_dir(state_root: Path) -> Path | None:
    """The runtime directory of the private manager recorded for this state directory, if any."""
    try:
        text = (record_dir(state_root) / "runtime_dir").read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def bus_address(state_root: Path) -> str | None:
    """The bus of this state directory's private manager, if its socket is there."""
    runtime = recorded_runtime_dir(state_root)
    if runtime is None or not (runtime / "bus").exists():
        return None
    return f"unix:path={runtime / 'bus'}"


def environment(state_root: Path) -> dict[str, str]:
    runtime = recorded_runtime_dir(state_root)
    if runtime is None:
        raise ManagerError(f"no private user manager recorded in {record_dir(state_root)}")
    return {"XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime / 'bus'}"}


def pids(state_root: Path) -> dict[str, int]:
    out = {}
    for name in ("systemd", "dbus"):
        try:
            out[name] = int((record_dir(state_root) / f"{name}.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def running(state_root: Path) -> bool:
    p = pids(state_root)
    return bool(p) and all(alive(pid) for pid in p.values()) and bus_address(state_root) is not None


def _answers(env: dict) -> bool:
    try:
        r = subprocess.run(["systemctl", "--user", "is-system-running"], env=env, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.stdout.strip() in ("running", "degraded")


def start(state_root: Path, config_home: Path | None = None, env: dict | None = None) -> dict[str, str]:
    """Boot dbus-daemon and systemd --user for `state_root` (or return the running one's environment).
    `config_home`: the manager's XDG_CONFIG_HOME (default: the caller's, so that the unit files res
    writes are where the manager looks). ManagerError with one line when it cannot."""
    state_root = Path(state_root)
    if running(state_root):
        return environment(state_root)
    binary = systemd_binary()
    if binary is None:
        raise ManagerError("systemd is not installed (no /lib/systemd/systemd)")
    if shutil.which("dbus-daemon") is None:
        raise ManagerError("dbus-daemon is not installed")
    if not os.path.isdir(BOOTED_MARK):
        try:
            os.makedirs(BOOTED_MARK, exist_ok=True)  # systemd --user refuses to run without it
        except OSError as e:
            raise ManagerError(f"systemd --user needs {BOOTED_MARK}, which cannot be created here ({e.strerror}); "
                               f"as root: mkdir -p {BOOTED_MARK}") from None
    stop(state_root)  # what is left of an earlier one (one of the two died)
    base = dict(os.environ if env is None else env)
    runtime = runtime_dir_for(state_root, base)
    old = os.umask(0o077)
    try:
        runtime.mkdir(mode=0o700, exist_ok=True)
        record = record_dir(state_root)
        record.mkdir(mode=0o700, parents=True, exist_ok=True)
    finally:
        os.umask(old)
    if not _own_dir(runtime):
        raise ManagerError(f"{runtime} is not a directory of ours with mode 0700; refusing to use it")
    bus = runtime / "bus"
    if bus.exists() or bus.is_symlink():
        bus.unlink()
    env2 = dict(base, XDG_RUNTIME_DIR=str(runtime), DBUS_SESSION_BUS_ADDRESS=f"unix:path={bus}")
    if config_home is not None:
        env2["XDG_CONFIG_HOME"] = str(config_home)
        (Path(config_home) / "systemd" / "user").mkdir(parents=True, exist_ok=True)
    (record / "runtime_dir").write_text(f"{runtime}\n")
    with open(record / "manager.log", "ab") as log:
        dbus = subprocess.Popen(["dbus-daemon", "--session", f"--address=unix:path={bus}", "--nofork", "--nopidfile"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env2, start_new_session=True)
        (record / "dbus.pid").write_text(f"{dbus.pid}\n")
        deadline = time.monotonic() + 5
        while not bus.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        sd = subprocess.Popen([binary, "--user"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env2,
                              start_new_session=True)
        (record / "systemd.pid").write_text(f"{sd.pid}\n")
    deadline = time.monotonic() + UP_S
    while time.monotonic() < deadline:
        if sd.poll() is not None:
            stop(state_root)
            raise ManagerError(f"systemd --user exited with status {sd.returncode}; see {record / 'manager.log'}")
        if _answers(env2):
            return environment(state_root)
        time.sleep(0.1)
    stop(state_root)
    raise ManagerError(f"systemd --user did not come up in {UP_S:g} s; see {record / 'manager.log'}")


def end_pid(pid: int, sig: int = signal.SIGTERM, wait_s: float = 5.0) -> None:
    """Send `sig` to a process we started (by its pid), wait up to `wait_s` for it to end (reaping it
    if it is our child), then SIGKILL it."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        except ChildProcessError:
            pass
        if not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(state_root: Path) -> list[int]:
    """End this state directory's private manager: the pids it recorded, SIGTERM then SIGKILL."""
    record = record_dir(state_root)
    stopped = []
    for name, pid in pids(state_root).items():
        if alive(pid):
            end_pid(pid)
            stopped.append(pid)
        (record / f"{name}.pid").unlink(missing_ok=True)
    return stopped


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("start", "env", "stop"):
        print("usage: python3 -m reconciler.runtime.usermanager start|env|stop STATE_DIR [CONFIG_HOME]", file=sys.stderr)
        return 2
    root = Path(argv[2]).resolve()
    try:
        if argv[1] == "stop":
            stop(root)
            return 0
        env = start(root, Path(argv[3]).resolve() if len(argv) > 3 else None) if argv[1] == "start" else environment(root)
    except ManagerError as e:
        print(f"res: {e}", file=sys.stderr)
        return 1
    for k, v in env.items():
        print(f"export {k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
