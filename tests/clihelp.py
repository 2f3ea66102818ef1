"""Helpers for the command-line tests: `res` as a real subprocess (so exit codes and output lines are
what a user sees), capacity shaped through RES_* variables, unit properties read back over D-Bus, and
a fixture that leaves no unit, slice or process of the test behind."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

PY = sys.executable
GIB = 1024**3
CLOCK = r"\d\d:\d\d"


def _asker_name() -> str:
    """Who a `res` call of these tests is asked by (the `by` busy and status lines name): the agent
    session the tests run under, if any, else the user: the default of observed.asker."""
    from reconciler.observed.asker import asker

    return asker({k: v for k, v in os.environ.items() if k != "RES_BY"}, os.getpid(), None)["by"]


ME = _asker_name()


def meminfo_gb(key: str) -> float:
    """A /proc/meminfo figure in GB (GiB, as res counts them)."""
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k == key:
                return int(rest.split()[0]) / (1024 * 1024)
    raise KeyError(key)


def nproc() -> int:
    return len(os.sched_getaffinity(0))


@dataclass
class Out:
    code: int
    out: str
    err: str
    args: tuple

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()

    def one_line(self, stream: str = "out") -> str:
        text = self.out if stream == "out" else self.err
        lines = text.splitlines()
        assert len(lines) == 1, f"res {' '.join(self.args)}: expected one line on std{stream}, got {text!r} (other: {self.err if stream == 'out' else self.out!r})"
        return lines[0]

    def __str__(self) -> str:
        return f"res {' '.join(map(repr, self.args))} -> {self.code}\nstdout: {self.out!r}\nstderr: {self.err!r}"


class Res:
    """`res` for one test: its own state dir, slices and unit prefix (from the res_env fixture)."""

    def __init__(self, res_env: dict):
        self.state: Path = res_env["state"]
        self.tmp: Path = res_env["tmp"]
        self.tag: str = res_env["tag"]
        self.prefix = os.environ["RES_UNIT_PREFIX"]
        self.jobs_slice = os.environ["RES_JOBS_SLICE"]
        self.agents_slice = os.environ["RES_AGENTS_SLICE"]
        self.env = dict(os.environ)
        self.work = self.tmp / "work"
        self.work.mkdir(exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    # ------------------------------------------------------------ running res

    def __call__(self, *args: str, cwd: Path | str | None = None, env: dict | None = None,
                 timeout: float = 120) -> Out:
        e = dict(self.env)
        if env:
            e.update(env)
        r = subprocess.run([PY, "-m", "reconciler.cli", *args], cwd=str(cwd or self.work), env=e,
                           capture_output=True, text=True, timeout=timeout)
        return Out(r.returncode, r.stdout, r.stderr, args)

    def ok(self, *args: str, **kw) -> Out:
        r = self(*args, **kw)
        assert r.code == 0, str(r)
        return r

    def run_job(self, *cmd: str, mem: str = "256M", est: str = "5m", cpus: str = "0.1", extra: tuple = (),
                **kw) -> Out:
        return self("run", "--mem", mem, "--for", est, "--cpus", cpus, *extra, "--", *cmd, **kw)

    def started(self, *cmd: str, **kw) -> str:
        """Run a job that must start; its id."""
        r = self.run_job(*cmd, **kw)
        m = re.fullmatch(rf"(r-\d+) started; log (\S+); ETA ~{CLOCK}", r.one_line())
        assert r.code == 0 and m, str(r)
        return m.group(1)

    def status(self, job_id: str) -> dict:
        r = self.ok("status", job_id, "--json")
        return json.loads(r.out)

    def status_all(self) -> dict:
        """`res status --all --json`: every recorded entry (the default view drops finished ones after
        a few minutes, which a long test outlives)."""
        return json.loads(self.ok("status", "--all", "--json").out)

    def passes(self, n: int = 2, limit_s: float = 60) -> None:
        """Wait until `n` more passes have run (the last pass's time in state.db moved on n times):
        what a test waits for before it says that nothing happened."""
        seen: list = []

        def moved_on() -> bool:
            at = self.status_all()["budget"]["as_of"]
            if not seen or at != seen[-1]:
                seen.append(at)
            return len(seen) > n

        wait_for(moved_on, f"{n} more passes", limit_s, step=0.05)

    def budget_gb(self) -> float:
        return self.status_all()["budget"]["mem_gb"]

    def reconcile_until(self, job_id: str, pred, what: str, limit_s: float = 60) -> dict:
        """Run passes until pred(status) holds (a bound on waiting, not an assertion on time)."""
        deadline = time.monotonic() + limit_s
        while True:
            self.ok("reconcile")
            st = self.status(job_id)
            if pred(st):
                return st
            assert time.monotonic() < deadline, f"{job_id}: never {what}: {st}"
            time.sleep(0.2)

    # ------------------------------------------------------------ capacity

    def pin(self, free_gb: float = 1.5) -> None:
        """Agents may hold exactly `free_gb` (the policy's agents_mem_gb), whatever the machine has free
        and whatever other work on it does meanwhile; the reserve and headroom 0, so what is really
        free (--force's measure) is the machine's MemAvailable, far above any such figure here."""
        self.env["RES_AGENTS_MEM_GB"] = f"{free_gb:g}"
        self.env["RES_USER_RESERVE_GB"] = "0"
        self.env["RES_SMALL_HEADROOM_GB"] = "0"
        if meminfo_gb("MemAvailable") < free_gb + 2:
            pytest.skip(f"machine too small to pin a {free_gb} GB budget")

    def shape(self, free_gb: float = 1.5) -> float:
        """Set the user's reserve so that agents may use about `free_gb` now (no headroom): for the tests
        about what is really free on the machine (pressure, the ladder, --force's measure); a test of
        the ledger alone pins its budget (pin), which other work on the machine cannot move."""
        avail = meminfo_gb("MemAvailable")
        reserve = avail - free_gb
        if reserve < 1:
            pytest.skip(f"machine too small to shape a {free_gb} GB budget ({avail:.1f} GB available)")
        self.env["RES_SMALL_HEADROOM_GB"] = "0"
        self.env["RES_USER_RESERVE_GB"] = f"{reserve:.3f}"
        return reserve

    # ------------------------------------------------------------ files and units

    @property
    def queue(self) -> Path:
        return self.state / "desired" / "queue.toml"

    def unit(self, job_id: str) -> str:
        return f"{self.prefix}-{job_id}.service"

    def units(self) -> list[tuple[str, str, str]]:
        """(name, active, sub) of every unit of this test's prefix the manager knows."""
        r = subprocess.run(["systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "--no-pager",
                            f"{self.prefix}-*"], capture_output=True, text=True, env=self.env, timeout=30)
        assert r.returncode == 0, r.stderr
        out = []
        for line in r.stdout.splitlines():
            f = line.split()
            if len(f) >= 4:
                out.append((f[0], f[2], f[3]))
        return sorted(out)

    def active(self, job_id: str) -> str:
        r = subprocess.run(["systemctl", "--user", "is-active", self.unit(job_id)], capture_output=True,
                           text=True, env=self.env, timeout=30)
        return r.stdout.strip()

    def digest(self) -> dict[str, str]:
        """sha256 of state.db (and its WAL) and of the desired files that exist."""
        out = {}
        for p in (self.state / "state.db", self.queue, self.state / "desired" / "game.toml"):
            if p.exists():
                out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
        # a read-only SQLite connection may create an empty WAL file: no WAL and an empty one are the same
        wal = self.state / "state.db-wal"
        out["state.db-wal"] = hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest()
        return out

    # ------------------------------------------------------------ processes

    def spawn(self, *args: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen([PY, "-m", "reconciler.cli", *args], cwd=str(self.work), env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        self.procs.append(p)
        return p

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("env", self.env)
        kw.setdefault("cwd", str(self.work))
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.procs:  # ours, by pid
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        names = [u for u, *_ in self.units()]
        if names:
            subprocess.run(["systemctl", "--user", "stop", *names], env=self.env, capture_output=True, timeout=120)
            subprocess.run(["systemctl", "--user", "reset-failed", *names], env=self.env, capture_output=True,
                           timeout=30)
        subprocess.run(["systemctl", "--user", "stop", self.jobs_slice, self.agents_slice], env=self.env,
                       capture_output=True, timeout=60)
        left = self.units()
        assert not left, f"units left behind: {left}"


@pytest.fixture
def res(user_manager, res_env):
    r = Res(res_env)
    try:
        yield r
    finally:
        r.cleanup()


# ---------------------------------------------------------------- D-Bus


async def dbus_call(bus, path, interface, member, signature, body):
    """A call to systemd on `bus`; the reply's body (an error reply fails the test)."""
    from dbus_fast import Message, MessageType

    reply = await bus.call(Message(destination="org.freedesktop.systemd1", path=path, interface=interface,
                                   member=member, signature=signature, body=body))
    assert reply.message_type is not MessageType.ERROR, (reply.error_name, reply.body)
    return reply.body


@asynccontextmanager
async def session_bus():
    """A D-Bus connection of our own to the session bus, disconnected on the way out."""
    from dbus_fast.aio import MessageBus

    bus = await MessageBus(bus_address=os.environ["DBUS_SESSION_BUS_ADDRESS"]).connect()
    try:
        yield bus
    finally:
        bus.disconnect()
        await bus.wait_for_disconnect()


async def unit_props_async(unit: str, kinds: tuple[str, ...] = ("Service",), load: str = "LoadUnit") -> dict:
    """Unit properties and those of each of `kinds` ("Service", "Slice", "Scope"), over a connection of
    our own. `load` is the Manager method that finds the unit: LoadUnit by default, not GetUnit, as an
    idle slice with nothing in it is unloaded between uses; GetUnit fails for a unit not loaded."""
    async with session_bus() as bus:
        (path,) = await dbus_call(bus, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", load, "s",
                                  [unit])
        out = {}
        for kind in ("Unit", *kinds):
            (props,) = await dbus_call(bus, path, "org.freedesktop.DBus.Properties", "GetAll", "s",
                                       [f"org.freedesktop.systemd1.{kind}"])
            out.update({k: v.value for k, v in props.items()})
        return out


def unit_props(unit: str, kind: str = "Service") -> dict:
    """Unit and Service (or Slice) properties of a loaded unit, over a D-Bus connection of our own."""
    return asyncio.run(unit_props_async(unit, (kind,)))


def ask_raw(sock: str, data: bytes, timeout: float = 30) -> list[bytes]:
    """Send `data` as it is to a unix socket, read until the other side closes: the lines it sent."""
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock)
        s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got.splitlines()
            got += chunk
    finally:
        s.close()


def keep_artifact(name: str, text: str, tmp: Path) -> None:
    """What a test saw (a terminal's screen, a page), kept in its tmp dir and in $RES_TEST_ARTIFACTS when set."""
    (tmp / name).write_text(text)
    where = os.environ.get("RES_TEST_ARTIFACTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / name).write_text(text)


def wait_for(pred, what: str, limit_s: float = 60, step: float = 0.1):
    deadline = time.monotonic() + limit_s
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(step)


def serving(res) -> subprocess.Popen:
    """`res serve` started for the fixture's state directory, once its socket is there."""
    p = res.spawn("serve")
    sock = res.state / "serve.sock"
    wait_for(lambda: sock.exists() or p.poll() is not None, "saw the serve socket")
    assert p.poll() is None, p.communicate()
    return p


# ---------------------------------------------------------------- the fake agent (the fault tiers)

FAKE = str(Path(__file__).resolve().parent / "fake_agent.py")
# Seconds, not minutes: a lapsed lease is claimed within a sweep, and live jobs are looked at every tick.
FAST = {"RES_ATTACH_LEASE_S": "3", "RES_ATTACH_RENEW_S": "1", "RES_SWEEP_S": "0.5", "RES_TICK_S": "0.5",
        "RES_MAX_CONCURRENT_SESSIONS": "20"}


def _sonnet_rates() -> tuple[float, float]:
    import tomllib

    model = tomllib.loads((Path(__file__).resolve().parent.parent / "policies" / "pricing.toml").read_text())
    rates = model["models"]["claude-sonnet-4-5"]
    return rates["input"], rates["output"]


RATE_IN, RATE_OUT = _sonnet_rates()  # USD per 1M tokens (the fake agent's model)


def token_cost(k: int) -> float:
    """What k fake-agent events cost at the table's rate: event i has i input tokens and 1 output token."""
    return (RATE_IN * k * (k + 1) / 2 + RATE_OUT * k) / 1e6


def file_tree(root: Path) -> dict[str, bytes | None]:
    """Every file and directory under `root`, relative, with its bytes (None: a directory)."""
    out: dict[str, bytes | None] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(d, name), root)] = None
        for name in files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out
