"""Boot a private `dbus-daemon --session` + `systemd --user` (DESIGN §9, §12).

Used by .ci/run and by the test session when no user manager is reachable.
Everything started here is stopped by the pid recorded at start, never by name.

    python3 tests/usermgr.py start DIR   -> prints `export VAR=...` lines
    python3 tests/usermgr.py stop DIR    -> stops what `start DIR` started
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

_CHILDREN: list[subprocess.Popen] = []  # kept so they are reaped, not garbage-collected while running
SYSTEMD = next((p for p in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if os.path.exists(p)), None)


def manager_reachable(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ if env is None else env)
    if not env.get("DBUS_SESSION_BUS_ADDRESS") and not env.get("XDG_RUNTIME_DIR"):
        return False
    r = subprocess.run(["systemctl", "--user", "is-system-running"], env=env,
                       capture_output=True, text=True, timeout=10)
    return r.stdout.strip() in ("running", "degraded")


def start(base: Path) -> dict[str, str]:
    """Start dbus-daemon and systemd --user under BASE; return the environment to use them."""
    if SYSTEMD is None:
        raise RuntimeError("systemd is not installed (no /lib/systemd/systemd)")
    base.mkdir(parents=True, exist_ok=True)
    runtime = base / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.chmod(runtime, 0o700)
    # systemd --user refuses to run unless the system looks booted with systemd.
    os.makedirs("/run/systemd/system", exist_ok=True)
    bus = runtime / "bus"
    # Its own config directory: unit files that tests install (slices, the loop's service) land in
    # BASE/config/systemd/user and go away with BASE, never in the user's ~/.config.
    config = base / "config"
    (config / "systemd" / "user").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), DBUS_SESSION_BUS_ADDRESS=f"unix:path={bus}",
               XDG_CONFIG_HOME=str(config))
    log = open(base / "usermgr.log", "ab")
    dbus = subprocess.Popen(["dbus-daemon", "--session", f"--address=unix:path={bus}", "--nofork", "--nopidfile"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
    _CHILDREN.append(dbus)
    (base / "dbus.pid").write_text(str(dbus.pid))
    for _ in range(100):
        if bus.exists():
            break
        time.sleep(0.02)
    sd = subprocess.Popen([SYSTEMD, "--user"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                          start_new_session=True)
    _CHILDREN.append(sd)
    log.close()  # the children hold their own copies
    (base / "systemd.pid").write_text(str(sd.pid))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sd.poll() is not None:
            raise RuntimeError(f"systemd --user exited with {sd.returncode}; see {base / 'usermgr.log'}")
        if manager_reachable(env):
            return {k: env[k] for k in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME")}
        time.sleep(0.1)
    raise RuntimeError(f"systemd --user did not come up in 30 s; see {base / 'usermgr.log'}")


def stop(base: Path) -> None:
    """Stop what start(BASE) started, by the pids it recorded."""
    for name in ("systemd.pid", "dbus.pid"):
        pidfile = base / name
        if not pidfile.exists():
            continue
        pid = int(pidfile.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pidfile.unlink()
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            try:  # reap if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pidfile.unlink()
    for child in [c for c in _CHILDREN if c.poll() is not None]:
        _CHILDREN.remove(child)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print("usage: usermgr.py start|stop DIR", file=sys.stderr)
        return 2
    base = Path(argv[2]).resolve()
    if argv[1] == "start":
        env = start(base)
        for k, v in env.items():
            print(f"export {k}={v}")
    else:
        stop(base)
        shutil.rmtree(base / "runtime", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
