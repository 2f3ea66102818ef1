"""The first `res` call starts the loop (policy `loop_autostart`): a CLI call that needs a decision and
finds no loop listening starts `res serve` for its state directory in the background, waits until it
listens, and asks it, the way build tools start their daemon (Gradle, Bazel). The loop runs as a
transient user unit, so it is not a child of the agent's shell and outlives it; where no user manager
answers (a container, CI), as a detached process in a session of its own, logging to
`<state>/serve.log` (`res serve` then starts a private manager itself, DESIGN §9). Two calls that
start it at once start one: the unit's name is the state directory's, and `serve.lock` admits one
loop. Each call says only what happened to it: the one that started the loop says so; one whose
loop another call started says nothing about it. Import-light (the hot path of `res run`): the
standard library and config only."""
from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import time

from reconciler.config.environ import is_secret
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
    """What the started loop gets of the caller's environment. A unit's Environment is written into
    its transient unit file (0644) and shown by `systemctl show`: a secret (by name or by value, the
    rule every other path uses) never goes there, RES_* or not."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items()
            if (k.startswith("RES_") or k in PASSED) and "\n" not in v and "\0" not in v and not is_secret(k, v)}


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


def autostart(paths: Paths, policy, wait: bool, within: float | None = None) -> tuple[bool, str | None]:
    """Start a loop where the policy says so (loop_autostart): (one now listens, the line to print).
    `wait`: until it listens (a `res wait`, which has time); else the caller decides by itself this
    once, under the same tick lock, while the loop comes up (a `res run` answers as fast as it did
    without a loop, not after the loop's start)."""
    if not policy.loop_autostart:
        return False, None
    return start_loop(paths, policy.unit_prefix, wait, within)


# unit -> how this process started its loop (`res run --wait` starts one, then waits), or BY_ANOTHER
_STARTED: dict[str, str] = {}
BY_ANOTHER = ""  # another call started the loop a moment ago: this one started nothing


def start_loop(paths: Paths, prefix: str, wait: bool = True, within: float | None = None) -> tuple[bool, str | None]:
    """Start `res serve` for `paths` (and with `wait`, wait until it listens): (listening, the line
    that says what this call did or what failed; None when it started nothing, another call having
    started the loop, or when this process started it before and said so)."""
    paths.ensure()
    unit = unit_name(paths, prefix)
    if unit in _STARTED:
        said, how = None, _STARTED[unit]  # started (and said) by this call a moment ago: only wait for it
    else:
        argv = [sys.executable, "-m", "reconciler.cli", "serve"]
        got = _as_unit(unit, argv, paths)
        how = _STARTED[unit] = got if got is not None else _detached(paths, argv)
        said = None if how == BY_ANOTHER else \
            f"res: no reconciler loop was running for {paths.root}: started one ({how}; `res service install` runs one from boot)"
    if not wait:
        return False, said
    ready_s = READY_S if within is None else max(min(READY_S, within), 0.0)  # never past the caller's --timeout
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if listening(paths):
            return True, said
        time.sleep(0.02)
    if how == BY_ANOTHER:
        return False, f"res: the reconciler loop for {paths.root} did not listen in {ready_s:g} s; deciding here"
    return False, f"res: started the reconciler loop ({how}) but it did not listen in {ready_s:g} s; deciding here"


def _as_unit(unit: str, argv: list[str], paths: Paths) -> str | None:
    """Start the loop as transient user unit `unit`: what was done, BY_ANOTHER when the unit is
    there already (another call started it: the unit's name is the state directory's), or None
    without a user manager."""
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
    if "already" in r.stderr:
        return BY_ANOTHER
    return None


def _detached(paths: Paths, argv: list[str]) -> str:
    """Start the loop as a detached process: what was done, or BY_ANOTHER when a loop started this
    way still runs. The started process inherits the flock of `serve-start.lock` and holds it for its
    life, so of several calls at once one starts a loop, and no other spawns one only to see it lose
    `serve.lock` (the unit's name does this for a unit)."""
    try:
        fd = os.open(paths.root / "serve-start.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        fd = -1  # unusable (a planted link): started unguarded; `serve.lock` still admits one loop
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return BY_ANOTHER
        log = open(paths.root / "serve.log", "ab")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                 pass_fds=(fd,) if fd >= 0 else (), env={**os.environ, "RES_STATE_DIR": str(paths.root)},
                                 start_new_session=True)
        finally:
            log.close()
    finally:
        if fd >= 0:
            os.close(fd)
    return f"pid {p.pid}, log {paths.root / 'serve.log'}"
