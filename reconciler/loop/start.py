"""The first `res` call starts the loop (policy `loop_autostart`): a CLI call that needs a decision and
finds no loop listening starts `res serve` for its state directory in the background, waits until it
listens, and asks it, the way build tools start their daemon (Gradle, Bazel). The loop runs as a
transient user unit, so it is not a child of the agent's shell and outlives it; where no user manager
answers (a container, CI), as a detached process in a session of its own, logging to
`<state>/serve.log` (`res serve` then starts a private manager itself, DESIGN §9). Two calls that
start it at once start one: the unit's name is the state directory's, and `serve.lock` admits one
loop. Import-light (the hot path of `res run`): the standard library only."""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time

from reconciler.config.paths import Paths, loop_unit_stem

READY_S = 10.0  # how long a started loop may take to listen (imports, the manager, the first pass)
# What the loop needs of the caller's environment: res's own settings, where the policy and unit
# files are, how this Python finds res (a checkout on PYTHONPATH), and where the Slurm tools find
# the cluster (the loop submits and asks for the caller's cluster jobs).
PASSED = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "PYTHONPATH", "HOME", "PATH", "TZ",
          "SLURM_CONF", "SLURM_CLUSTERS")


def unit_name(paths: Paths, prefix: str) -> str:
    digest = hashlib.sha256(str(paths.root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{loop_unit_stem(prefix)}-{digest}.service"


def loop_environment(environ=None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items()
            if (k.startswith("RES_") or k in PASSED) and "\n" not in v and "\0" not in v}


def listening(paths: Paths) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(str(paths.socket))
        return True
    except OSError:
        return False
    finally:
        s.close()


def autostart(paths: Paths, policy, wait: bool) -> tuple[bool, str | None]:
    """Start a loop where the policy says so (loop_autostart): (one now listens, the line to print).
    `wait`: until it listens (a `res wait`, which has time); else the caller decides by itself this
    once, under the same tick lock, while the loop comes up (a `res run` answers as fast as it did
    without a loop, not after the loop's start)."""
    if not policy.loop_autostart:
        return False, None
    return start_loop(paths, policy.unit_prefix, wait)


_STARTED: dict[str, str] = {}  # unit -> how: the loops this process started (`res run --wait` starts one, then waits)


def start_loop(paths: Paths, prefix: str, wait: bool = True) -> tuple[bool, str | None]:
    """Start `res serve` for `paths` (and with `wait`, wait until it listens): (listening, the line
    that says what was done or what failed; None when this process started it before and said so)."""
    paths.ensure()
    unit = unit_name(paths, prefix)
    if unit in _STARTED:
        said, how = None, _STARTED[unit]  # started (and said) by this call a moment ago: only wait for it
    else:
        argv = [sys.executable, "-m", "reconciler.cli", "serve"]
        how = _STARTED[unit] = _as_unit(unit, argv, paths) or _detached(paths, argv)
        said = f"res: no reconciler loop was running for {paths.root}: started one ({how}; `res service install` runs one from boot)"
    if not wait:
        return False, said
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if listening(paths):
            return True, said
        time.sleep(0.02)
    return False, f"res: started the reconciler loop ({how}) but it did not listen in {READY_S:g} s; deciding here"


def _as_unit(unit: str, argv: list[str], paths: Paths) -> str | None:
    """Start the loop as transient user unit `unit`; what was done, or None without a user manager."""
    passed = {**loop_environment(), "RES_STATE_DIR": str(paths.root)}
    env = [f"--setenv={k}={v}" for k, v in sorted(passed.items())]
    try:
        r = subprocess.run(["systemd-run", "--user", "--quiet", "--collect", f"--unit={unit}",
                            f"--description=res reconciler loop", "--working-directory=/", *env, "--", *argv],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode == 0:
        return f"user unit {unit}"
    if "already" in r.stderr:  # another call started it a moment ago
        return f"user unit {unit}, started by another call"
    return None


def _detached(paths: Paths, argv: list[str]) -> str:
    log = open(paths.root / "serve.log", "ab")
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                             env={**os.environ, "RES_STATE_DIR": str(paths.root)}, start_new_session=True)
    finally:
        log.close()
    return f"pid {p.pid}, log {paths.root / 'serve.log'}"
