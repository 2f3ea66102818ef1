"""Boot a private `dbus-daemon --session` + `systemd --user` for the tests (DESIGN §9, §12), with the
same code `res serve` uses on a machine with no user manager (reconciler/runtime/usermanager.py): the state
directory DIR/state records it, DIR/config is its XDG_CONFIG_HOME (unit files the tests install land
there and go away with DIR). Everything started here is stopped by the pid recorded at start.

    python3 tests/usermgr.py start DIR   -> prints `export VAR=...` lines
    python3 tests/usermgr.py stop DIR    -> stops what `start DIR` started
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reconciler.runtime import usermanager  # noqa: E402


def manager_reachable(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ if env is None else env)
    if not env.get("DBUS_SESSION_BUS_ADDRESS") and not env.get("XDG_RUNTIME_DIR"):
        return False
    r = subprocess.run(["systemctl", "--user", "is-system-running"], env=env,
                       capture_output=True, text=True, timeout=10)
    return r.stdout.strip() in ("running", "degraded")


def start(base: Path) -> dict[str, str]:
    """Start dbus-daemon and systemd --user under BASE; return the environment to use them (and
    RES_TEST_MANAGER_STATE: the state directory that records them, for the tests of reuse)."""
    base = Path(base)
    config = base / "config"
    try:
        env = usermanager.start(base / "state", config_home=config)
    except usermanager.ManagerError as e:
        raise RuntimeError(str(e)) from None
    return {**env, "XDG_CONFIG_HOME": str(config), "RES_TEST_MANAGER_STATE": str(base / "state")}


def stop(base: Path) -> None:
    """Stop what start(BASE) started, by its recorded pids, and remove its runtime directory."""
    runtime = usermanager.recorded_runtime_dir(Path(base) / "state")
    usermanager.stop(Path(base) / "state")
    if runtime is not None:
        shutil.rmtree(runtime, ignore_errors=True)


def main(argv: list[str]) -> int:
    from bootcli import main as boot_main

    return boot_main(argv, start, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
