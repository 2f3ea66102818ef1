"""What the benchmarks share: figures and how they print, and a private `res` (its own state
directory, slices and unit prefix) driven as a real command."""
from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent


class Broken(Exception):
    """The thing measured did not work (an entry lost, a run not started): the benchmark fails."""


@dataclass
class Figure:
    """One benchmark line: a ratio, the raw numbers behind it, and a target if there is one."""

    key: str  # "a", "b", ...
    name: str
    ratio: float
    raw: str
    target: str = ""  # e.g. "≤ 10×"; empty: for context only
    met: bool | None = None

    def line(self) -> str:
        verdict = "" if self.met is None else ("met" if self.met else "MISSED")
        target = f"target {self.target}: {verdict}" if self.target else "(context)"
        return f"{self.key}  {self.name:<46} {self.ratio:>7.2f}×  {target:<22} {self.raw}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)  # more raw numbers, printed after the ratios
    broken: list[str] = field(default_factory=list)  # what makes the run fail
    notes: list[str] = field(default_factory=list)  # skipped benchmarks, profiles, ...


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def p90_ms(seconds: list[float]) -> float:
    """Nearest-rank 90th percentile, in ms."""
    s = sorted(seconds)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)] * 1000


def spread(seconds: list[float], p90: bool = False) -> str:
    ms = sorted(s * 1000 for s in seconds)
    at90 = f", p90 {p90_ms(seconds):.1f}" if p90 else ""
    return f"median {statistics.median(ms):.1f} ms{at90}, min {ms[0]:.1f}, max {ms[-1]:.1f}, n={len(ms)}"


def timed(argv: list[str], env: dict | None = None, cwd: str | None = None, timeout: float = 60,
          stdin: str | int | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, the finished command). `stdin`: text written to the command's stdin, else what
    subprocess takes for it (None: this process's stdin; subprocess.DEVNULL: none)."""
    feed = stdin if isinstance(stdin, str) else None
    t0 = time.perf_counter()
    r = subprocess.run(argv, input=feed, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       stdin=None if feed is not None else stdin)
    return time.perf_counter() - t0, r


def manager_reachable() -> bool:
    if not (os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get("XDG_RUNTIME_DIR")):
        return False
    try:
        r = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.stdout.strip() in ("running", "degraded")


def res_argv() -> list[str]:
    """The `res` console script pip installed beside this interpreter (what a user runs), else
    whatever `res` PATH finds, else the module. Beside the interpreter first: on PATH it may be a
    version manager's shim (pyenv's is a bash script that costs ~45 ms a call here), whose cost is
    not res's and which systemd-run, the yardstick, does not pay either (bench a reports it apart)."""
    beside = Path(PY).parent / "res"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    exe = shutil.which("res")
    return [exe] if exe else [PY, "-m", "reconciler.cli"]



def terminate(p: subprocess.Popen, wait_s: float = 30) -> bool:
    """Stop a process we started, by its pid: SIGTERM, then SIGKILL if it has not ended within
    `wait_s`. True if SIGTERM was enough."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(wait_s)
        return True
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        return False

class ResEnv:
    """A private `res`: its own state directory, policy path, slices and unit prefix, so that nothing
    here touches a user's own state or another run's units. Always `close()` it."""

    def __init__(self, name: str, **policy: str):
        self.tag = f"rb{name}{secrets.token_hex(3)}"  # unit prefix: letters, digits, _
        self.dir = Path(tempfile.mkdtemp(prefix=f"res-bench-{name}-"))
        self.state = self.dir / "state"
        self.work = self.dir / "work"
        self.work.mkdir()
        self.env = dict(os.environ)
        self.env.update({
            "RES_STATE_DIR": str(self.state),
            "RES_POLICY_FILE": str(self.dir / "policy.toml"),  # absent: the shipped defaults
            "RES_AGENTS_SLICE": f"{self.tag}.slice",
            "RES_JOBS_SLICE": f"{self.tag}-jobs.slice",
            "RES_UNIT_PREFIX": self.tag,
            "RES_LOOP_AUTOSTART": "false",  # a benchmark starts the loop it measures itself
        })
        self.env.update({f"RES_{k.upper()}": str(v) for k, v in policy.items()})
        self.serve_proc: subprocess.Popen | None = None

    def res(self, *args: str, timeout: float = 60) -> tuple[float, subprocess.CompletedProcess]:
        return timed(res_argv() + list(args), env=self.env, cwd=str(self.work), timeout=timeout)

    def unit(self, job_id: str) -> str:
        return f"{self.tag}-{job_id}.service"

    # ------------------------------------------------------------ res serve

    def start_serve(self) -> None:
        self.serve_proc = subprocess.Popen(res_argv() + ["serve"], env=self.env, cwd=str(self.work),
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sock = self.state / "serve.sock"
        deadline = time.monotonic() + 30
        while True:
            if self.serve_proc.poll() is not None:
                raise Broken(f"res serve exited {self.serve_proc.returncode}: {self.serve_proc.stderr.read().strip()}")
            if sock.exists():
                try:
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                        s.settimeout(5)
                        s.connect(str(sock))
                        s.sendall(b'{"op": "ping"}\n')
                        if s.recv(4096):
                            return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise Broken("res serve did not answer within 30 s")
            time.sleep(0.05)

    def stop_serve(self) -> None:
        p, self.serve_proc = self.serve_proc, None
        if p is None or p.poll() is not None:
            return
        if not terminate(p):
            raise Broken("res serve did not stop on SIGTERM within 30 s")
        if p.returncode != 0:
            raise Broken(f"res serve exited {p.returncode} on SIGTERM: {p.stderr.read().strip()}")

    # ------------------------------------------------------------ cleanup

    def units(self) -> list[str]:
        r = subprocess.run(["systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "--no-pager",
                            f"{self.tag}-*"], capture_output=True, text=True, env=self.env, timeout=30)
        return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]

    def settle(self, limit_s: float = 30) -> list[str]:
        """Run passes until no job of ours is live; the ids still live after `limit_s`."""
        from reconciler.config.paths import Paths
        from reconciler.recorded.store import Store

        deadline = time.monotonic() + limit_s
        while True:
            if self.serve_proc is None:
                self.res("reconcile")
            with Store.open(Paths(self.state), readonly=True) as store:
                live = [j for j, rec in store.records().items() if rec.phase.value in ("queued", "starting", "running", "exited")]
            if not live or time.monotonic() > deadline:
                return live
            time.sleep(0.2)

    def finish(self, what: str = "the runs", limit_s: float = 30, stop: bool = True) -> None:
        """The end of a measured run: passes until no job of ours is live (Broken if some still are after
        `limit_s`), then `res serve` stopped (unless not `stop`) and its exit checked."""
        left = self.settle(limit_s)
        if left:
            raise Broken(f"jobs still live after {what}: {left}")
        if stop:
            self.stop_serve()

    def close(self) -> None:
        try:
            self.stop_serve()
        finally:
            left = self.units()
            if left:
                subprocess.run(["systemctl", "--user", "stop", *left], env=self.env, capture_output=True, timeout=120)
                subprocess.run(["systemctl", "--user", "reset-failed", *left], env=self.env, capture_output=True, timeout=30)
            subprocess.run(["systemctl", "--user", "stop", f"{self.tag}-jobs.slice", f"{self.tag}.slice"],
                           env=self.env, capture_output=True, timeout=60)
            shutil.rmtree(self.dir, ignore_errors=True)
