"""A crowded workstation, side by side (issue 23, DESIGN §10): what res is worth against what people
use instead.

    python3 bench/crowd.py [--mix cpu|memory|mixed] [--agents N] [--arms a,b,…] [--mem-gb W]
                           [--cluster-gb A,B,C] [--seed S] [--smoke] [--json FILE] [--plot FILE.png]
    python3 bench/crowd.py --replot RUN.json --plot FILE.png      (draw a saved run again)

N agents (default 8) each run their own seeded list of jobs one after another, as coding agents do:
real test suites of small real projects (installed from PyPI into a venv at set-up, suites listed in
TESTS), builds (a process that ramps to 1.2–1.6 GB and burns CPU) and end-to-end runs (2.2–2.8 GB,
longer; mostly asleep in the memory mix). Every job knows its true peak and its time alone. An
OOM-killed attempt (SIGKILL: rc 137) is retried by its agent up to twice, then the job is failed.

The machine: a simulated workstation of W GB (default 6): a transient systemd user slice with
MemoryMax=W (MemorySwapMax=0) made afresh for each arm; every job of every arm runs inside it, so no
arm can take the real machine down. At start a real allocation past the cap must be killed, or the
run is refused. The owner's probe runs outside it: every 200 ms it allocates and touches 50 MB and
times that (first on the idle machine, then during each arm).

The arms (the same workload, back to back):
    free-for-all   every job at once, each in a scope of its own in the container, no limit
    slots-2/-3     a machine-wide, memory-blind semaphore of 2/3 slots (what `parallel -j`, pueue
                   or a flock semaphore gives), jobs as above
    cgroup-only    every job at once, each `systemd-run --scope -p MemoryMax=<declared>` (declared =
                   true peak × 1.25), no admission
    res            `res run --wait --queue --mem <true peak × 1.25> --for <time alone> --cpus <its
                   CPU share>`: res's own loop and planner, its budget pinned to W (bench/crowd_res.py),
                   reserve and headroom 0, a fresh state directory and slices per arm
    res-flat       the same with `--mem 1G` for everything (and the default --cpus)
    res-gated      agents that never call res: each runs its command line (`pytest …`, `make …`,
                   `playwright test …`: wrappers of the same jobs, named as the tools are) the way a
                   Claude Code session with `res hook` installed does: the hook first, then the command
                   as the hook rewrote it (sizes from the heavy table, then from what history learned),
                   or, refused with the busy line, the same ask again GATE_RETRY_S later
    res-learned    learned sizes (issue 25): a warm-up round, not measured, runs the whole workload once
                   with `res run --wait --queue --mem auto --cpus auto --for auto` from an empty history
                   (the policy's auto_* sizes; a job killed at its limit is started again once by res,
                   bigger), then the measured round runs it again the same way against the same state
                   directory: sizes from what the warm-up's runs of the same command in the same project
                   used. History is kept per project: a test suite's own, an agent's own for its builds
                   and e2e runs (as res-gated's). Kills res answered by starting a job again count as
                   OOM-killed attempts too (the agent saw one run); the warm-up's are reported apart
    res-overflow   the res arm with `overflow = "cluster"` (issue 28): the same requests, loop and budget
                   W, plus a private Slurm cluster booted for the arm (tests/slurmnodes.py: three slurmd,
                   each in a network namespace of its own, RealMemory --cluster-gb, default 2, 2 and
                   4 GB; their memory is their own, outside the container, and their CPUs are this
                   machine's cores). What does not fit in W now, or would wait behind the queue's head,
                   is submitted there by res and runs there. Reported beside the row: how many attempts
                   went there, the idle cluster's own start latency (sbatch → the job's process runs),
                   res's submit → the job's process runs, and the line against the res arm. Needs root,
                   Slurm's packages and W + the nodes' memory + 2 GB free on this machine

Per arm: makespan and makespan ÷ the lower bound max(Σ peak·t / W, Σ cpu·t / cores, the longest
agent's own chain) (t: each job's time alone, from set-up; the same bound with the declared sizes is
printed beside it); attempts OOM-killed; jobs failed after two retries; each job's wait (ask → its
process starts, summed over its attempts) p50/p95; the hand-off (a waiting job's start − the last job
end before it); overtaken (seconds a job waited only because later-asked jobs ran: what jumping the
queue cost); idle cpu·s (the container's idle cores while a job waited); the container's peak memory
(the cgroup's own peak counter); /proc/pressure/memory `full`: its max avg10 and its total over the
run (system-wide: this machine has no per-cgroup PSI on cgroup v1); the owner's probe p50/p99 and p99
÷ the idle p99. Under the table: told (a job's end → its agent knows) and "fits but waits" (seconds in
which some waiting job fitted beside what ran, by what the arm knows). docs/crowd.md has the figures.

Needs a systemd user manager (DBUS_SESSION_BUS_ADDRESS). Everything started here is stopped by pid or
by its unique unit names, and its units, slices and state removed at the end, even on Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from common import terminate

if __name__ == "__main__":  # one module, whether run or imported (crowd_cli imports it: one STARTED)
    sys.modules.setdefault("crowd", sys.modules[__name__])

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
JOB = str(HERE / "crowd_job.py")
RES_SHIM = str(HERE / "crowd_res.py")
GIB = 1 << 30
MIB = 1 << 20

# Real test suites of small, pure-Python projects: (name, PyPI sdist, test paths). Their suites run
# 2–10 s here; the sdist carries the tests, the installed package (from the same sdist) is tested.
TESTS = [
    ("itsdangerous", "itsdangerous==2.2.0", ["tests"]),
    ("toolz", "toolz==1.2.0", ["toolz/tests"]),
    ("tomlkit", "tomlkit==0.15.2", ["tests"]),
    ("jinja2", "jinja2==3.1.6", ["tests"]),
    # (its netstring self-test gives a socket 10 ms: under two cores' worth of builds it fails now and
    # then, in every arm alike, for want of a time slice, not of memory or order: left out)
    ("boltons", "boltons==26.2.0", ["tests", "--deselect", "tests/test_socketutils.py::test_socketutils_netstring"]),
]
TEST_DEPS = ["pytest==8.*", "pytest-xdist==3.*", "trio", "freezegun"]  # trio: jinja2's async tests; freezegun:
# itsdangerous's; pytest-xdist: the gate's acceptance test runs a suite with `-n auto`, as agents do
# --smoke: one small file of a suite each (~2 s)
SMOKE_TESTS = [
    ("itsdangerous", "itsdangerous==2.2.0", ["tests/test_itsdangerous/test_signer.py"]),
    ("toolz", "toolz==1.2.0", ["toolz/tests/test_itertoolz.py"]),
]
CACHE = Path(os.environ.get("CROWD_CACHE", "/tmp/res-crowd-cache"))

ARMS = ["free-for-all", "slots-2", "slots-3", "cgroup-only", "res", "res-flat", "res-gated", "res-learned",
        "res-overflow", "res-cli"]
# res-overflow boots a Slurm cluster (root, Slurm's packages), res-cli runs the real agent CLIs
# (tests/agentcli/install.sh): only when asked for by name
DEFAULT_ARMS = [a for a in ARMS if a not in ("res-overflow", "res-cli")]
GATE_RETRY_S = 5.0  # a refused agent does other work and asks again this much later
MARGIN = 1.25  # honest declaration: true peak × 1.25
PROBE_MB, PROBE_PERIOD = 50, 0.2
# res-overflow pays when its makespan is at most this × the local-only res arm's: a gain past the
# run-to-run spread of one arm on this machine (2–5 % between back-to-back runs, docs/crowd.md)
OVERFLOW_TARGET = 0.90
ASK_SKEW = 0.25  # s: two asks closer than this may reach an arm in either order (a client's start-up)
# What res writes into a job's log when it starts an auto-sized job again after a kill at its memory
# limit (render/lines.retry_text: "… killed at its memory limit (…); res sized it, so it starts again
# once, at 3 GB"): how res-learned counts those kills when state.db cannot be read.
RETRY_MARK = "so it starts again once"

# What a mix is made of: the odds of each kind, and each kind's shape.
MIXES = {
    # builds that burn CPU the whole time; the few e2e runs burn CPU too
    "cpu": dict(odds={"test": 0.35, "build": 0.5, "e2e": 0.15}, build_cpu=(4, 8), e2e_hold=(8, 12), e2e_duty=1.0),
    # e2e runs that hold 2.2–2.8 GB for a while, mostly waiting (a browser-driven suite, a dev server)
    "memory": dict(odds={"test": 0.3, "build": 0.2, "e2e": 0.5}, build_cpu=(3, 6), e2e_hold=(15, 22), e2e_duty=0.05),
    "mixed": dict(odds={"test": 0.4, "build": 0.3, "e2e": 0.3}, build_cpu=(4, 7), e2e_hold=(12, 18), e2e_duty=0.2),
}
# cluster_gb: res-overflow's nodes' RealMemory (node1, node2, node3 of tests/slurmnodes.py; 2, 2 and 4
# CPUs configured). Every job's declared size (true peak × 1.25) fits node3; builds fit node1/node2.
# sbatch_rounds: the cluster's own start latency, measured on it idle before the arm.
FULL = dict(mem_gb=6.0, agents=8, jobs=(3, 4), build_gb=(1.2, 1.6), e2e_gb=(2.2, 2.8), idle_s=30.0,  # idle: 150 probes
            cluster_gb=(2.0, 2.0, 4.0), sbatch_rounds=5)
SMOKE = dict(mem_gb=1.0, agents=2, jobs=(2, 2), build_gb=(0.35, 0.45), e2e_gb=(0.55, 0.65), idle_s=2.0,
             cluster_gb=(0.5, 0.5, 1.0), sbatch_rounds=2,
             build_cpu=(0.8, 1.2), e2e_hold=(1.5, 2.5),
             # res-learned's first guess (the policy's auto_mem_gb, 2 GB, would never fit 1 GB): as in a
             # full run, the builds fit it and every e2e run is killed at it once and started again by res
             auto_mem_gb=0.5)


# ------------------------------------------------------------------ cleanup of all we started

class Started:
    """Everything this run started, so that it can all be stopped (by pid, or by its unique unit
    names) and removed, whatever way the run ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.tags: list[str] = []  # unit-name prefixes (every unit and slice of ours starts with one)
        self.unit_files: list[str] = []  # slice unit files res wrote for us
        self.dirs: list[Path] = []
        self.clusters: list[Path] = []  # private Slurm clusters booted here (tests/slurmnodes.py), by directory
        self.stopping = threading.Event()

    def popen(self, argv, **kw) -> subprocess.Popen:
        with self.lock:
            if self.stopping.is_set():
                raise KeyboardInterrupt
            p = subprocess.Popen(argv, **kw)
            self.procs.add(p)
        return p

    def done(self, p: subprocess.Popen) -> None:
        with self.lock:
            self.procs.discard(p)

    def stop_units(self, tag: str) -> None:
        units = list_units(tag)
        if units:
            systemctl("stop", *units, timeout=120)
        units = list_units(tag)
        if units:
            systemctl("reset-failed", *units)

    def cleanup(self) -> None:
        self.stopping.set()
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)  # ours, by pid
                except OSError:
                    pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for tag in self.tags:
            self.stop_units(tag)
        for base in self.clusters:
            stop_cluster(base)
        removed = False
        if self.unit_files:
            from reconciler.runtime.unitfiles import remove_unit, user_unit_dir

            for name in self.unit_files:
                try:
                    removed |= remove_unit(user_unit_dir(), name)
                except OSError as e:
                    print(f"crowd: left {name}: {e}", file=sys.stderr)
        if removed:
            systemctl("daemon-reload")
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.tags, self.unit_files, self.dirs, self.clusters = [], [], [], []


STARTED = Started()


def systemctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=timeout)


def list_units(tag: str) -> list[str]:
    r = systemctl("list-units", "--all", "--plain", "--no-legend", "--no-pager", f"{tag}*")
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------------ the machine

def cgroup_dir(unit: str) -> Path:
    """The memory controller's directory of a unit (v1 or v2)."""
    cg = systemctl("show", "-p", "ControlGroup", "--value", unit).stdout.strip()
    if not cg:
        raise RuntimeError(f"{unit} has no cgroup")
    v1 = Path("/sys/fs/cgroup/memory")
    return (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / cg.lstrip("/")


def make_container(name: str, mem_gb: float, cpu_weight: int | None = None) -> Path:
    """A transient slice with MemoryMax = mem_gb and no swap (and `cpu_weight`, when given); its
    memory cgroup directory."""
    limit = int(mem_gb * GIB)
    weight = ["CPUWeight", "t", str(cpu_weight)] if cpu_weight else []
    r = subprocess.run(["busctl", "--user", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                        "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
                        name, "fail", str(4 + bool(weight)), "MemoryMax", "t", str(limit), "MemorySwapMax", "t", "0",
                        "CPUAccounting", "b", "true", *weight,
                        "Description", "s", f"res bench crowd: a workstation of {mem_gb:g} GB", "0"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"could not make {name}: {r.stderr.strip()}")
    for _ in range(100):
        if systemctl("is-active", name).stdout.strip() == "active":
            break
        time.sleep(0.05)
    d = cgroup_dir(name)
    for _ in range(100):  # the cgroup appears with the slice's first member on some managers
        if d.is_dir():
            break
        time.sleep(0.05)
    return d


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_dirs(unit_cg: Path) -> list[Path]:
    """Where the container's CPU time may be counted, from its memory directory: cgroup v1's
    cpuacct hierarchy (co-mounted with cpu or not), the hybrid layout's unified one (its cpu.stat
    counts without any controller), or v2's own."""
    root = Path("/sys/fs/cgroup")
    if not (root / "memory").is_dir():
        return [unit_cg]
    rel = unit_cg.relative_to(root / "memory")
    return [root / name / rel for name in ("cpu,cpuacct", "cpuacct,cpu", "cpuacct", "unified")]


def cpu_used_s(d: Path) -> float | None:
    """CPU-seconds used by everything in the cgroup so far (v1 cpuacct.usage, v2 cpu.stat)."""
    if (d / "cpuacct.usage").exists():
        v = read_int(d / "cpuacct.usage")
        return None if v is None else v / 1e9
    try:
        for line in (d / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        return None
    return None


def container_usage(d: Path) -> int | None:
    return read_int(d / "memory.usage_in_bytes") if (d / "memory.usage_in_bytes").exists() else read_int(d / "memory.current")


def container_peak(d: Path) -> int | None:
    return read_int(d / "memory.max_usage_in_bytes") if (d / "memory.max_usage_in_bytes").exists() else read_int(d / "memory.peak")


def container_limit(d: Path) -> int | None:
    return read_int(d / "memory.limit_in_bytes") if (d / "memory.limit_in_bytes").exists() else read_int(d / "memory.max")


def scope_argv(slice_name: str, unit: str, props: list[str]) -> list[str]:
    argv = ["systemd-run", "--user", "-q", "--scope", "--collect", f"--slice={slice_name}", f"--unit={unit}"]
    for p in props:
        argv += ["-p", p]
    return argv + ["--"]


def check_cap(tag: str, mem_gb: float) -> str:
    """A real allocation past the cap must be killed (and one well under it must live), or nothing
    here means anything: raises with the reason."""
    name = f"{tag}cap.slice"
    d = make_container(name, mem_gb)
    try:
        limit = container_limit(d)
        if limit is None or abs(limit - int(mem_gb * GIB)) > 1 * MIB:
            raise RuntimeError(f"{name}: its cgroup's limit is {limit}, not {int(mem_gb * GIB)}")
        over = int(mem_gb * 1024 + 256)
        r = subprocess.run(scope_argv(name, f"{tag}cap-over.scope", []) + [PY, JOB, "alloc", str(over)],
                           capture_output=True, text=True, timeout=120)
        if "survived" in r.stdout or r.returncode not in (-9, 137):
            raise RuntimeError(f"a process touching {over} MB in {name} (MemoryMax={mem_gb:g}G) was not killed "
                               f"(rc {r.returncode}): the cap does not hold here; refusing to run")
        under = int(mem_gb * 1024 * 0.5)
        r = subprocess.run(scope_argv(name, f"{tag}cap-under.scope", []) + [PY, JOB, "alloc", str(under)],
                           capture_output=True, text=True, timeout=120)
        if "survived" not in r.stdout:
            raise RuntimeError(f"a process touching {under} MB under the {mem_gb:g} GB cap died (rc {r.returncode})")
        return f"cap checked: {over} MB killed (rc {r.returncode if r.returncode else 137}), {under} MB lived"
    finally:
        STARTED.stop_units(f"{tag}cap")


# ------------------------------------------------------------------ the cluster (res-overflow)

def slurmnodes():
    """tests/slurmnodes.py: the private multi-node cluster the tests boot (imported when needed)."""
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    import slurmnodes as mod

    return mod


def cluster_sizes(cluster_gb: tuple) -> dict:
    """tests/slurmnodes.py's nodes, their RealMemory set to `cluster_gb` (their CPUs and Weight kept)."""
    nodes = slurmnodes().NODES
    return {name: (cpus, int(gb * 1024), weight) for (name, (cpus, _, weight)), gb in zip(nodes.items(), cluster_gb)}


def cluster_refusal(mem_gb: float, cluster_gb: tuple) -> str | None:
    """Why res-overflow cannot run here (None: it can): no Slurm or no namespaces, or the workstation
    and the nodes together would not fit well inside this machine's free memory (every GB the nodes
    offer is real memory of this machine: they are namespaces on it)."""
    why = slurmnodes().missing()
    if why:
        return f"res-overflow needs a private Slurm cluster: {why}"
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / (1 << 20)
    want = mem_gb + sum(cluster_gb) + 2.0
    if want > avail:
        return (f"res-overflow: W {mem_gb:g} GB + the nodes' {'+'.join(f'{g:g}' for g in cluster_gb)} GB + 2 GB "
                f"to spare is {want:g} GB, more than this machine has free ({avail:.1f} GB); --cluster-gb smaller")
    return None


def stop_cluster(base: Path) -> None:
    try:
        slurmnodes().stop(base)  # by the pids recorded at its start; its network and cgroups removed
    except Exception as e:  # noqa: BLE001 - said, and the rest of the cleanup goes on
        print(f"crowd: the cluster in {base} may be left running: {e}", file=sys.stderr)
    shutil.rmtree(base, ignore_errors=True)


def sbatch_latency(env: dict, rounds: int, workdir: Path) -> list[float]:
    """The idle cluster's own start latency: `sbatch --wrap` of a job that writes the wall clock, from
    just before sbatch to that time (the job's process running on its node), one job at a time.
    Nothing polls Slurm: the answer is a file (the nodes share this machine's filesystem)."""
    out = []
    for i in range(rounds):
        f = workdir / f"sbatch-{i}.t"
        t0 = time.time()
        r = subprocess.run(["sbatch", "--parsable", "--job-name=crowd-latency", "--mem=16M", "--time=1",
                            f"--output={workdir / f'sbatch-{i}.out'}", f"--wrap=date +%s.%N > {f}.tmp && mv {f}.tmp {f}"],
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch on the crowd's cluster: {' '.join(r.stderr.split())[:300]}")
        deadline = time.monotonic() + 60
        while not f.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the crowd's cluster did not start a 16 MB job within 60 s (slurm job {r.stdout.strip()})")
            time.sleep(0.02)
        out.append(float(f.read_text()) - t0)
        time.sleep(0.5)  # its end reached slurmctld: the next one finds the node as this one did
    return out


# ------------------------------------------------------------------ set-up: the real test suites

def setup_suites(tests: list, log) -> dict:
    """A venv with the projects installed from their sdists (which carry their tests), under CACHE;
    each suite's time alone, CPU time and peak measured once and cached. {name: info}."""
    venv = CACHE / "venv"
    py = venv / "bin" / "python"
    src = CACHE / "src"
    marker = CACHE / "installed.json"
    want = sorted({spec for _, spec, _ in TESTS} | set(TEST_DEPS))
    if not (py.exists() and marker.exists() and json.loads(marker.read_text()) == want):
        log(f"set-up: a venv in {venv} with {', '.join(s for _, s, _ in TESTS)} and their tests (once)")
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE.mkdir(parents=True)
        subprocess.run([PY, "-m", "venv", str(venv)], check=True)
        pip = [str(py), "-m", "pip", "-q", "--disable-pip-version-check"]
        dl = CACHE / "dl"
        subprocess.run(pip + ["download", "--no-deps", "--no-binary", ":all:", "-d", str(dl)] +
                       [spec for _, spec, _ in TESTS], check=True, stderr=subprocess.DEVNULL)
        src.mkdir()
        for f in sorted(dl.iterdir()):
            with tarfile.open(f) as t:
                t.extractall(src, filter="data")
        dirs = [str(p) for p in sorted(src.iterdir()) if p.is_dir()]
        subprocess.run(pip + ["install", *dirs, *TEST_DEPS], check=True, stderr=subprocess.DEVNULL)
        marker.write_text(json.dumps(want))
    calib_path = CACHE / "calibration.json"
    calib = json.loads(calib_path.read_text()) if calib_path.exists() else {}
    out = {}
    for name, spec, paths in tests:
        d = next(p for p in src.iterdir() if p.is_dir() and p.name.lower().replace("_", "-").startswith(
            spec.split("==")[0].lower() + "-"))
        key = f"v2 {spec} {' '.join(paths)}"
        if key not in calib:
            calib[key] = measure_alone([str(py), JOB, "test", os.devnull, str(d), *paths])
            if calib[key]["rc"] != 0:
                raise RuntimeError(f"the {name} suite fails alone (rc {calib[key]['rc']}): not a fair job; "
                                   f"try it: cd {d} && {py} -m pytest {' '.join(paths)}")
            calib_path.write_text(json.dumps(calib, indent=1))
            log(f"set-up: {name} {' '.join(paths)} alone: {calib[key]['wall_s']:.1f} s, "
                f"{calib[key]['cpu_s']:.1f} CPU-s, peak {calib[key]['peak_mb']:.0f} MB")
        if calib[key]["rc"] != 0:
            raise RuntimeError(f"the {name} suite fails alone (rc {calib[key]['rc']}): not a fair job")
        out[name] = dict(calib[key], dir=str(d), paths=paths, python=str(py))
    return out


def measure_alone(argv: list[str]) -> dict:
    """A job's time, CPU time and peak RSS (ru_maxrss of the process tree's largest) when run alone."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return dict(wall_s=time.monotonic() - t0, cpu_s=ru.ru_utime + ru.ru_stime, peak_mb=ru.ru_maxrss / 1024,
                rc=p.returncode)


# ------------------------------------------------------------------ the workload

@dataclass
class Job:
    agent: int
    idx: int
    kind: str  # test | build | e2e
    label: str
    peak_gb: float  # true peak
    time_s: float  # time alone
    cpu_s: float  # CPU-seconds of work
    argv: list[str] = field(default_factory=list)  # without the stamp file (inserted at argv[2])

    @property
    def cpus(self) -> float:
        """Its honest CPU share: CPU-seconds over time alone, in quarters, at least a quarter."""
        return max(0.25, min(1.0, round(self.cpu_s / self.time_s * 4 + 0.49) / 4))


def workload(mix: str, agents: int, size: dict, suites: dict, seed: int, base_mb: float) -> list[list[Job]]:
    shape = dict(MIXES[mix])
    for k in ("build_cpu", "e2e_hold"):
        shape[k] = size.get(k, shape[k])
    rng = random.Random(f"{seed}/{mix}/{agents}")
    kinds, odds = zip(*shape["odds"].items())
    names = sorted(suites)
    out = []
    for a in range(agents):
        jobs = []
        for i in range(rng.randint(*size["jobs"])):
            kind = rng.choices(kinds, odds)[0]
            if kind == "test":
                name = rng.choice(names)
                s = suites[name]
                job = Job(a, i, kind, f"test {name}", (s["peak_mb"] + base_mb) / 1024, s["wall_s"], s["cpu_s"],
                          [s["python"], JOB, "test", s["dir"], *s["paths"]])
            elif kind == "build":
                gb, cpu = rng.uniform(*size["build_gb"]), rng.uniform(*shape["build_cpu"])
                mb = int(gb * 1024)
                job = Job(a, i, kind, f"build {mb} MB", (mb + base_mb) / 1024, cpu, cpu, [PY, JOB, "build", str(mb), f"{cpu:.2f}"])
            else:
                gb, hold = rng.uniform(*size["e2e_gb"]), rng.uniform(*shape["e2e_hold"])
                mb, duty = int(gb * 1024), shape["e2e_duty"]
                ramp = mb / 1024 * 0.35  # touching memory costs ~0.35 CPU-s a GB here
                job = Job(a, i, kind, f"e2e {mb} MB", (mb + base_mb) / 1024, hold + ramp, hold * duty + ramp,
                          [PY, JOB, "e2e", str(mb), f"{hold:.2f}", str(duty)])
            jobs.append(job)
        out.append(jobs)
    return out


def lower_bound(plan: list[list[Job]], mem_gb: float, cores: int) -> dict:
    """The ideal makespan's lower bound, from the jobs' true peaks; and the same bound for a scheduler
    that trusts the declared sizes (true peak × MARGIN) instead, which also cannot overlap two jobs
    declared over W/2: those run one at a time whatever the order (`declared`, with its terms)."""
    jobs = [j for a in plan for j in a]
    mem = sum(j.peak_gb * j.time_s for j in jobs) / mem_gb
    cpu = sum(j.cpu_s for j in jobs) / cores
    chain = max(sum(j.time_s for j in a) for a in plan)
    told_mem = sum(j.peak_gb * MARGIN * j.time_s for j in jobs) / mem_gb
    one_at_a_time = sum(j.time_s for j in jobs if j.peak_gb * MARGIN > mem_gb / 2)
    return dict(bound=max(mem, cpu, chain), mem=mem, cpu=cpu, chain=chain,
                declared=max(told_mem, one_at_a_time, cpu, chain), declared_mem=told_mem, one_at_a_time=one_at_a_time)


# ------------------------------------------------------------------ the arms

class Arm:
    """How one job attempt is run under this arm. `run` blocks until it is over; returns its rc."""

    def __init__(self, name: str, ctx: "ArmRun"):
        self.name, self.ctx = name, ctx

    def setup(self) -> None: ...

    def teardown(self) -> None: ...

    def extra_figures(self) -> dict:
        """The arm's own figures, added to its row."""
        return {}

    def agent_done(self, agent: int) -> None:
        """The agent has run its last job (or stopped): its session may end."""

    def launch(self, argv: list[str], log: Path, env: dict | None = None, cwd: str | None = None) -> int:
        with open(log, "ab") as f:
            p = STARTED.popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
            self.ctx.procs.add(p)  # this run's own, to stop by pid if its deadline passes
            try:
                return p.wait()
            finally:
                self.ctx.procs.discard(p)
                STARTED.done(p)

    def scope(self, job: Job, attempt: int, props: list[str]) -> list[str]:
        unit = f"{self.ctx.tag}-a{job.agent}j{job.idx}t{attempt}.scope"
        return scope_argv(self.ctx.container, unit, props)

    def run(self, job: Job, attempt: int, argv: list[str], log: Path) -> int:
        return self.launch(self.scope(job, attempt, []) + argv, log)


class Slots(Arm):
    def __init__(self, name: str, ctx: "ArmRun", n: int):
        super().__init__(name, ctx)
        self.sem = threading.Semaphore(n)

    def run(self, job, attempt, argv, log):
        with self.sem:
            return super().run(job, attempt, argv, log)


class CgroupOnly(Arm):
    def run(self, job, attempt, argv, log):
        mb = int(job.peak_gb * MARGIN * 1024)
        return self.launch(self.scope(job, attempt, [f"MemoryMax={mb}M", "MemorySwapMax=0"]) + argv, log)


class Res(Arm):
    """res with its own state directory, policy, slices (under the container) and loop."""

    def __init__(self, name: str, ctx: "ArmRun", flat: bool):
        super().__init__(name, ctx)
        self.flat = flat
        self.serve: subprocess.Popen | None = None

    def state_dir(self) -> Path:
        return self.dir / "state"

    def more_env(self) -> dict:
        return {}

    def setup(self):
        c = self.ctx
        self.dir = Path(tempfile.mkdtemp(prefix=f"res-crowd-{c.tag}-"))
        STARTED.dirs.append(self.dir)
        agents = f"{c.container[:-len('.slice')]}-res.slice"
        jobs = f"{agents[:-len('.slice')]}-jobs.slice"
        STARTED.unit_files += [agents, jobs]
        self.env = dict(os.environ)
        self.env.update({
            "RES_STATE_DIR": str(self.state_dir()),
            "RES_POLICY_FILE": str(self.dir / "policy.toml"),  # absent: the shipped defaults, less what follows
            "RES_AGENTS_SLICE": agents,
            "RES_JOBS_SLICE": jobs,
            "RES_UNIT_PREFIX": c.tag,
            "RES_USER_RESERVE_GB": "0",  # the owner's share is outside the container
            "RES_USER_RESERVE_CPUS": "0",
            "RES_SMALL_HEADROOM_GB": "0",  # budget = W exactly
            "RES_LOOP_AUTOSTART": "false",  # the loop is started here, by pid
            "RES_ADOPT_SESSIONS": "false",  # never move anyone's agent session into the crowd
            "RES_CLEAN_EVERY_MINUTES": "0",  # never clean anyone's /tmp or units
            "CROWD_RES_MEM_GB": str(c.mem_gb),
            "CROWD_RES_CGROUP": str(c.cg),
        })
        self.env.update(self.more_env())
        self.env.update(c.res_env)
        self.serve = STARTED.popen([PY, RES_SHIM, "serve"], env=self.env, cwd=str(self.dir),
                                   stdout=open(self.dir / "serve.log", "wb"), stderr=subprocess.STDOUT)
        sock = self.state_dir() / "serve.sock"
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"res serve did not come up: {(self.dir / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(0.3)

    def run(self, job, attempt, argv, log):
        if self.flat:
            size = ["--mem", "1G"]
        else:
            size = ["--mem", f"{int(job.peak_gb * MARGIN * 1024)}M", "--cpus", f"{job.cpus:g}"]
        cmd = [PY, RES_SHIM, "run", "--wait", "--queue", *size, "--for", f"{max(1, round(job.time_s))}s",
               "--title", f"a{job.agent} {job.label}", "--"] + argv
        return self.launch(cmd, log, env=self.env)

    def teardown(self):
        p, self.serve = self.serve, None
        if p is not None and p.poll() is None:
            terminate(p)  # ours, by pid
            STARTED.done(p)
        # res's own stops (the pressure ladder, DESIGN §5.1): an agent never sees them (its `res run
        # --wait` returns once), only res's records do
        if self.ctx.records is None:
            self.ctx.records = res_records(self.state_dir())
        # what the loop decided, for the report: each job's wait as res recorded it
        try:
            shutil.copy(self.dir / "serve.log", self.ctx.logdir / "serve.log")
            # res's own account (state.db, the change log): what was booked, granted, released, when
            shutil.copytree(self.state_dir(), self.ctx.logdir / "state", ignore=shutil.ignore_patterns("*.sock"))
        except OSError:
            pass


# The crowd's jobs under the names agents type: what the gate sees (policies/heavy.toml).
WRAPPERS = {"pytest": 'exec "$CROWD_TEST_PY" "$CROWD_JOB" test "$@"',  # pytest STAMP DIR ARGS…
            "make": 'exec "$CROWD_PY" "$CROWD_JOB" build "$@"',  # make STAMP MB CPU_S
            "playwright": 'shift; exec "$CROWD_PY" "$CROWD_JOB" e2e "$@"'}  # playwright test STAMP MB HOLD DUTY


class Gated(Res):
    """Agents that never call res: a Claude Code session's PreToolUse hook (`res hook`) before each
    command line, then the line as it said (rewritten to `res run --wait …`, or as it was), or asked
    again later when refused. The same res (state, slices, loop) as the res arm."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)
        self.denied = 0

    def extra_figures(self) -> dict:
        return {"gate_refusals": self.denied}  # asks the hook refused (the agent asked again later)

    def setup(self):
        super().setup()
        bin_dir = self.dir / "bin"
        bin_dir.mkdir()
        for name, body in WRAPPERS.items():
            (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
            (bin_dir / name).chmod(0o755)
        claude = self.dir / "claude"  # no settings of the user's: the session's rules are its own
        claude.mkdir()
        self.env.update({"PATH": f"{bin_dir}:{self.env['PATH']}", "CROWD_JOB": JOB, "CROWD_PY": PY,
                         "CLAUDE_CONFIG_DIR": str(claude)})

    def run(self, job, attempt, argv, log):
        kind, stamp, rest = argv[2], argv[3], argv[4:]
        env = dict(self.env)
        if kind == "test":
            env["CROWD_TEST_PY"] = argv[0]
            cwd, line = rest[0], shlex.join(["pytest", stamp, rest[0], *rest[1:]])
        else:
            cwd = str(self.dir / f"a{job.agent}")  # each agent's own project
            os.makedirs(cwd, exist_ok=True)
            line = shlex.join(["make" if kind == "build" else "playwright", *([] if kind == "build" else ["test"]),
                               stamp, *rest])
        event = json.dumps({"session_id": f"crowd-a{job.agent}", "transcript_path": "/dev/null", "cwd": cwd,
                            "permission_mode": "bypassPermissions", "hook_event_name": "PreToolUse",
                            "tool_name": "Bash", "tool_input": {"command": line, "description": job.label}})
        while not STARTED.stopping.is_set():
            out = subprocess.run([PY, RES_SHIM, "hook", "--agent", "claude"], input=event, capture_output=True,
                                 text=True, env=env, cwd=cwd, timeout=60).stdout
            spec = json.loads(out)["hookSpecificOutput"] if out.strip() else {}
            if spec.get("permissionDecision") == "deny":
                with open(log, "a") as f:
                    f.write(spec.get("permissionDecisionReason", "") + "\n")
                with self.ctx.lock:
                    self.denied += 1
                time.sleep(GATE_RETRY_S)
                continue
            command = spec.get("updatedInput", {}).get("command", line)
            rc = self.launch(["bash", "-c", command], log, env=env, cwd=cwd)
            if rc == 3 and command != line and log.read_text(errors="replace").rstrip().rsplit("\n", 1)[-1].startswith("busy: "):
                with self.ctx.lock:  # queued, and withdrawn by --start-within: refused after all
                    self.denied += 1
                time.sleep(GATE_RETRY_S)
                continue
            return rc
        return -15


def project_of(job: Job) -> str:
    """The project a job's history is kept in, the same as res-gated's (where its agent runs it): a test
    suite's own (its directory's name), else its agent's own (builds and e2e runs of one project)."""
    return Path(job.argv[3]).name if job.kind == "test" else f"a{job.agent}"


def learned_keys(plan: list[list[Job]]) -> dict[str, set[str]]:
    """Kind -> the command fingerprints history files the jobs under (core/gate.line_fingerprint, as
    the loop learns them). Raises when two kinds would share one in a project: the arm would then learn
    one size for different work, which a real project's distinct commands never are."""
    from reconciler.core.gate import line_fingerprint

    keys: dict[str, set[str]] = {}
    owner: dict[tuple[str, str], str] = {}
    for j in (j for a in plan for j in a):
        fp = line_fingerprint(j.argv[:3] + [os.path.join(tempfile.gettempdir(), "stamp")] + j.argv[3:]) or ""
        if not fp or owner.setdefault((project_of(j), fp), j.kind) != j.kind:
            raise RuntimeError(f"res-learned: {j.label} would be learned as {fp!r}, like other work in its "
                               f"project: history could not tell the jobs apart")
        keys.setdefault(j.kind, set()).add(fp)
    return keys


def res_stops(records: list) -> tuple[int, float]:
    """(how many times res stopped a job above its book, the CPU-seconds those attempts had used)."""
    n, cpu = 0, 0.0
    for rec in records:
        for stop in getattr(rec, "evictions", None) or []:
            n += 1
            cpu += float(stop.get("cpu_s") or 0.0)
    return n, cpu


def res_records(state: Path) -> list | None:
    """Every record in a res state directory's state.db (the live ones, then the pruned history; each
    id once), or None when it cannot be read."""
    try:
        from reconciler.config.paths import Paths
        from reconciler.recorded.store import Store

        with Store.open(Paths(state), readonly=True) as store:
            live = list(store.records().values())
            ids = {r.request.id for r in live}
            return live + [r for r in store.history() if r.request.id not in ids]
    except Exception:  # noqa: BLE001 - the figures then come from the logs
        return None


class Learned(Res):
    """`res run --wait --queue --mem auto --cpus auto --for auto` for every job, its project named as
    res-gated's agents' are (project_of). Both rounds of the arm share one state directory (ctx.state):
    each round gets its own container, slices and loop, and the loop of the measured round starts from
    the warm-up's finished runs."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)

    def state_dir(self) -> Path:
        return self.ctx.state

    def more_env(self) -> dict:
        # the policy's first guess, scaled with the machine (the smoke's 1 GB, --mem-gb): else shipped
        return {} if self.ctx.auto_mem_gb is None else {"RES_AUTO_MEM_GB": f"{self.ctx.auto_mem_gb:.3f}"}

    def setup(self):
        sock = self.state_dir() / "serve.sock"
        if sock.exists() or sock.is_symlink():
            sock.unlink()  # the warm-up's loop, stopped (by pid): not to be mistaken for this one's
        since = time.time()
        super().setup()
        # this loop's first pass publishes what history learned (gate.json, read by `res run --mem
        # auto`): the first ask must not find the last round's file, or none
        gate = self.state_dir() / "gate.json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if gate.stat().st_mtime >= since:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            self.ctx.errors.append(f"{gate} was not written within 30 s of the loop's start")

    def run(self, job, attempt, argv, log):
        cmd = [PY, RES_SHIM, "run", "--wait", "--queue", "--mem", "auto", "--cpus", "auto", "--for", "auto",
               "--project", project_of(job), "--title", f"a{job.agent} {job.label}", "--"] + argv
        return self.launch(cmd, log, env=self.env)

    def teardown(self):
        # every run settled in state.db before its loop stops: what the next round learns from (not
        # when the run was stopped at its deadline: what it waited on is stopped with the loop)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.ctx.halted.is_set():
            recs = res_records(self.state_dir())
            if recs is None or all(getattr(r.phase, "value", r.phase) in ("done", "refused", "cancelled") for r in recs):
                break
            time.sleep(0.2)
        super().teardown()


class Overflow(Res):
    """res with `overflow = "cluster"`: the res arm's requests, loop and budget (W), plus a private
    Slurm cluster of three nodes (tests/slurmnodes.py, their RealMemory `cluster_gb`) booted for the
    arm and stopped after it. A request that does not fit in W now, or would wait behind the queue's
    head, is submitted there (`sbatch`, into Slurm's queue, `--queue`) and runs there; the nodes'
    memory is their own (outside the container). Their CPUs are this machine's two cores."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)
        self.base: Path | None = None
        self.slurm_env: dict = {}

    def more_env(self) -> dict:
        return {"RES_OVERFLOW": "cluster", **self.slurm_env}

    def setup(self):
        c = self.ctx
        self.base = Path(tempfile.mkdtemp(prefix=f"res-crowd-slurm-{c.tag}-"))
        STARTED.clusters.append(self.base)
        self.slurm_env = slurmnodes().start(self.base, cluster_sizes(c.cluster_gb))
        c.sbatch_s = sbatch_latency(self.slurm_env, c.sbatch_rounds, c.logdir)
        super().setup()

    def teardown(self):
        super().teardown()
        self.ctx.records = res_records(self.state_dir())  # where each ran: read before the state goes
        if self.base is not None:
            shutil.copytree(self.base / "log", self.ctx.logdir / "slurm-log", dirs_exist_ok=True)
            stop_cluster(self.base)
            STARTED.clusters.remove(self.base)
            self.base = None


def make_arm(name: str, ctx: "ArmRun") -> Arm:
    if name == "free-for-all":
        return Arm(name, ctx)
    if name.startswith("slots-"):
        return Slots(name, ctx, int(name.split("-")[1]))
    if name == "cgroup-only":
        return CgroupOnly(name, ctx)
    if name in ("res", "res-flat"):
        return Res(name, ctx, flat=name == "res-flat")
    if name == "res-gated":
        return Gated(name, ctx)
    if name == "res-learned":
        return Learned(name, ctx)
    if name == "res-overflow":
        return Overflow(name, ctx)
    if name == "res-cli":
        from crowd_cli import CliGated  # the real CLIs' harness (tests/agentcli): only for this arm

        return CliGated(name, ctx)
    raise SystemExit(f"crowd: unknown arm {name!r} (known: {', '.join(ARMS)})")


# ------------------------------------------------------------------ one arm's run

@dataclass
class Attempt:
    agent: int
    job: int
    kind: str
    attempt: int
    asked: float
    started: float | None  # its process started (its own stamp)
    finished: float | None  # its process ended (its own stamp; none when killed)
    ended: float  # its agent was told
    rc: int
    # 1: res started this job again itself after a kill at its memory limit (res-learned; the agent saw
    # one run: this attempt is asked when the run before it was killed, and the agent is told at its end)
    restart: int = 0

    @property
    def out(self) -> float:
        """When it stopped holding anything: its own end stamp, else (killed) when its agent knew."""
        return self.finished or self.ended

    @property
    def in_(self) -> float:
        """When it stopped waiting: its start, else (never started) when its agent gave up on it."""
        return self.started if self.started is not None else self.ended

    def runs_at(self, t: float) -> bool:
        return self.started is not None and self.started <= t < self.out

    def waits_at(self, t: float) -> bool:
        return self.asked <= t < self.in_


class Sampler(threading.Thread):
    """Every 0.25 s: the container's memory and CPU time, each running job's memory (its process's
    own cgroup, by the pid its stamp names) by agent, and the kernel's memory pressure."""

    def __init__(self, cg: Path, live: dict, follow: bool = False):
        super().__init__(daemon=True)
        self.cg, self.cpu_cgs, self.live = cg, cpu_dirs(cg), live
        self.samples, self.halt = [], threading.Event()
        self.job_cg: dict[Path, str] = {}  # stamp file -> the cgroup of its process
        # follow (res-learned): res may start a job again after a kill at its limit; the new process
        # stamps the same file and keeps the killed one's .pid: each process of a stamp file is found
        # by its command line, and when each was first seen gone is noted (the kill, to 0.25 s)
        self.follow = follow
        self.pid_of: dict[Path, int] = {}
        self.seen_pids: dict[Path, set[int]] = {}
        self.deaths: dict[Path, list[float]] = {}

    @staticmethod
    def runs_job(pid: int, stampf: Path) -> bool:
        """Whether `pid` is alive and is a crowd job process of this stamp file (crowd_job.py KIND STAMP …)."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return len(args) > 3 and args[1].endswith(b"crowd_job.py") and args[3] == os.fsencode(str(stampf))

    def find_job(self, stampf: Path, seen: set[int]) -> int | None:
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in seen and self.runs_job(int(name), stampf):
                return int(name)
        return None

    def followed_cgroup(self, stampf: Path) -> str | None:
        """The cgroup of the process now running the job of `stampf` (follow mode), or None."""
        from reconciler.observed.procs import cgroup_of

        pid = self.pid_of.get(stampf)
        if pid is not None and not self.runs_job(pid, stampf):
            self.deaths.setdefault(stampf, []).append(time.monotonic())
            del self.pid_of[stampf]
            self.job_cg.pop(stampf, None)
            pid = None
        if pid is None:
            seen = self.seen_pids.setdefault(stampf, set())
            try:
                pid = int(Path(f"{stampf}.pid").read_text())
            except (OSError, ValueError):
                return None  # not started yet: it waits
            if pid in seen or not self.runs_job(pid, stampf):
                pid = self.find_job(stampf, seen)
                if pid is None:
                    return None
            seen.add(pid)
            self.pid_of[stampf] = pid
        if stampf not in self.job_cg:
            cg = cgroup_of(pid)
            if cg is None:
                return None
            self.job_cg[stampf] = cg
        return self.job_cg[stampf]

    def cpu_used(self) -> float | None:
        for d in self.cpu_cgs:
            used = cpu_used_s(d)
            if used is not None:
                self.cpu_cgs = [d]  # found: only this one from now on
                return used
        return None

    @staticmethod
    def slurm_cgroup(pid: int) -> str | None:
        """The memory cgroup of the Slurm job `pid` runs in (…/job_N), when it runs on one of the
        crowd cluster's nodes (Debian's slurmd: /slurm_NODE/uid_U/job_N/step_batch/…), else None.
        Its systemd cgroup is no help there: that is where slurmd was started from."""
        try:
            return slurm_job_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return None

    def agent_memory(self) -> dict:
        """Agent -> bytes in use by its running job's cgroup; a job on a cluster node under "c<agent>"
        (outside the container)."""
        from reconciler.observed.cgroup import memory_used_bytes
        from reconciler.observed.procs import cgroup_of

        out = {}
        for agent, stampf in list(self.live.items()):
            cg = self.followed_cgroup(stampf) if self.follow else self.job_cg.get(stampf)
            if cg is None and self.follow:
                continue  # not started yet, or between a kill and res's start of it again
            if cg is None:
                try:
                    pid = int(Path(f"{stampf}.pid").read_text())
                except (OSError, ValueError):
                    continue  # not started yet: it waits
                slurm = self.slurm_cgroup(pid)
                cg = f"cluster:{slurm}" if slurm else cgroup_of(pid)
                if cg is None:
                    continue
                self.job_cg[stampf] = cg
            remote = cg.startswith("cluster:")
            used = memory_used_bytes(cg[len("cluster:"):] if remote else cg)
            if used is not None:
                out[f"c{agent}" if remote else agent] = used
        return out

    @staticmethod
    def psi_full() -> tuple[float, int] | None:
        try:
            for line in Path("/proc/pressure/memory").read_text().splitlines():
                if line.startswith("full"):
                    f = dict(kv.split("=") for kv in line.split()[1:])
                    return float(f["avg10"]), int(f["total"])
        except (OSError, ValueError, KeyError):
            return None
        return None

    def run(self):
        while not self.halt.is_set():
            psi = self.psi_full()
            self.samples.append((time.monotonic(), container_usage(self.cg), psi[0] if psi else None,
                                 self.cpu_used(), self.agent_memory()))
            self.halt.wait(0.25)


def slurm_job_cgroup(proc_cgroup: str) -> str | None:
    """From the text of /proc/PID/cgroup: the memory cgroup of the Slurm job the process runs in
    (…/slurm_NODE/uid_U/job_N, the job's own level), or None when it runs in no Slurm job."""
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers in ("memory", "") and "/slurm" in path and "/job_" in path:
            head, _, tail = path.partition("/job_")
            return f"{head}/job_{tail.split('/')[0]}"
    return None


class Probe:
    """The owner's probe, outside the container (in this process's own cgroup)."""

    def __init__(self, out: Path):
        self.out = out
        self.p = STARTED.popen([PY, JOB, "probe", str(PROBE_MB), str(PROBE_PERIOD)], stdout=open(out, "w"),
                               stderr=subprocess.DEVNULL)

    def stop(self) -> list[float]:
        self.p.send_signal(signal.SIGTERM)  # ours, by pid
        self.p.wait(10)
        STARTED.done(self.p)
        ms = []
        for line in self.out.read_text().splitlines():
            try:
                ms.append(float(line.split()[1]))
            except (IndexError, ValueError):
                pass
        return ms


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s) - 1e-9) - 1))]  # nearest rank


def container_weight(arm: str) -> int | None:
    """The container's CPUWeight: res's agents slice weight for the res arms (the share res gives
    agents against the owner's session, whose place the probe takes), systemd's default for the
    others, which run their jobs as people do, at the owner's own weight."""
    if not arm.startswith("res"):
        return None
    from reconciler.core.game import NORMAL_WEIGHT  # (game mode off)

    return NORMAL_WEIGHT


class ArmRun:
    def __init__(self, arm_name: str, plan: list[list[Job]], mem_gb: float, workdir: Path, *, round_: str = "",
                 state: Path | None = None, auto_mem_gb: float | None = None, deadline_s: float | None = None,
                 cluster_gb: tuple = (), sbatch_rounds: int = 0, res_env: dict | None = None):
        """`round_`: res-learned's "warm-up" or "measured" (its logs apart); `state`: the res state
        directory both rounds share; `auto_mem_gb`: the policy's first guess for them (None: shipped);
        `deadline_s`: past this since the first ask, the run is stopped and said broken (a job that
        could never start must not hang the bench); `cluster_gb`, `sbatch_rounds`: res-overflow's
        nodes' memory, and how many jobs measure the idle cluster's start latency; `res_env`: RES_*
        policy values of the res arms' own (a sweep's margin and cpu_overcommit, bench/crowd_sweep.py)."""
        self.name = arm_name
        self.plan = plan
        self.mem_gb = mem_gb
        self.round, self.state, self.auto_mem_gb, self.deadline_s = round_, state, auto_mem_gb, deadline_s
        self.tag = f"cw{secrets.token_hex(3)}"
        self.container = f"{self.tag}.slice"
        self.logdir = workdir / arm_name / round_ if round_ else workdir / arm_name
        self.logdir.mkdir(parents=True)
        self.attempts: list[Attempt] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.live: dict[int, Path] = {}  # agent -> the stamp file of its attempt now asked or running
        self.procs: set[subprocess.Popen] = set()  # what this run's jobs are waited on by (Arm.launch)
        self.halted = threading.Event()
        # res-learned: (agent, job, attempt) -> (stamp file, its raw stamps, log), to tell a run res
        # started again apart; (agent, job, attempt, restart) -> (GB, CPUs, --for s) res chose
        self.raw: dict[tuple, tuple] = {}
        self.booked: dict[tuple, tuple[float, float, float]] = {}
        self.sizes: list[dict] = []
        # res-overflow: its cluster, the idle cluster's sbatch → process start (s), and res's records
        self.cluster_gb, self.sbatch_rounds = cluster_gb, sbatch_rounds
        self.sbatch_s: list[float] = []
        self.records: list | None = None
        self.res_env = dict(res_env or {})

    def agent(self, jobs: list[Job], arm: Arm, t0: float) -> None:
        try:
            self._agent(jobs, arm, t0)
        finally:
            if jobs:
                arm.agent_done(jobs[0].agent)

    def _agent(self, jobs: list[Job], arm: Arm, t0: float) -> None:
        for job in jobs:
            for attempt in range(3):
                if STARTED.stopping.is_set() or self.halted.is_set():
                    return
                stampf = self.logdir / f"a{job.agent}j{job.idx}t{attempt}.start"
                argv = job.argv[:2] + [job.argv[2], str(stampf)] + job.argv[3:]
                asked = time.monotonic()
                self.live[job.agent] = stampf
                try:
                    rc = arm.run(job, attempt, argv, self.logdir / f"a{job.agent}j{job.idx}t{attempt}.log")
                except KeyboardInterrupt:
                    return
                finally:
                    self.live.pop(job.agent, None)
                ended = time.monotonic()
                try:
                    stamps = [float(x) for x in stampf.read_text().split()]
                except (OSError, ValueError):
                    stamps = []
                started = stamps[0] if stamps else None
                # every run appends its start, and its end unless it was killed; a run res started again
                # (after a stop of its own, or a kill) follows a killed one: the last stamp is the end
                finished = stamps[-1] if len(stamps) > 1 and rc not in (-9, 137) else None
                self.raw[(job.agent, job.idx, attempt)] = (str(stampf), stamps, self.logdir / f"a{job.agent}j{job.idx}t{attempt}.log")
                with self.lock:
                    self.attempts.append(Attempt(job.agent, job.idx, job.kind, attempt, asked - t0,
                                                 None if started is None else started - t0,
                                                 None if finished is None else finished - t0, ended - t0, rc))
                    if rc not in (0, -9, 137):
                        self.errors.append(f"a{job.agent} job {job.idx} ({job.label}) attempt {attempt}: rc {rc}; "
                                           f"log {self.logdir}/a{job.agent}j{job.idx}t{attempt}.log")
                if rc not in (-9, 137):
                    break  # done (or failed for another reason than memory: not retried)

    def go(self) -> dict:
        STARTED.tags.append(self.tag)
        self.cg = make_container(self.container, self.mem_gb, container_weight(self.name))
        arm = make_arm(self.name, self)
        arm.setup()
        learned = isinstance(arm, Learned)
        sampler = Sampler(self.cg, self.live, follow=learned)
        psi0 = Sampler.psi_full()
        probe = Probe(self.logdir / "probe.txt")
        sampler.start()
        time.sleep(0.5)
        t0 = self.t0 = time.monotonic()
        self.wall0 = time.time() - t0  # a wall-clock time (res's records) minus this: seconds since t0
        threads = [threading.Thread(target=self.agent, args=(jobs, arm, t0), daemon=True) for jobs in self.plan]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
                if self.deadline_s is not None and time.monotonic() - t0 > self.deadline_s and not self.halted.is_set():
                    self.halt()
        makespan = time.monotonic() - t0
        probe_ms = probe.stop()
        sampler.halt.set()
        sampler.join(5)
        psi1 = Sampler.psi_full()
        peak = container_peak(self.cg)
        arm.teardown()
        STARTED.stop_units(self.tag)
        if learned:
            self.split_restarts(sampler.deaths)
        row = self.figures(makespan, probe_ms, sampler.samples, psi0, psi1, peak)
        row.update(arm.extra_figures())
        if learned:
            row["res_restarts"] = sum(a.restart for a in self.attempts)  # kills res answered itself
            row["sizes"] = self.sizes
        if isinstance(arm, Overflow):
            row["cluster"] = self.cluster_figures()
        return row

    def cluster_figures(self) -> dict:
        """res-overflow: which attempts res sent to the cluster (its records' `where`, found by the
        attempt's stamp file in the command), and for those: ask → res's submit (the pass that
        decided it: the record's start) → the job's process started on a node (its own stamp)."""
        by_stamp = {}
        for rec in self.records or []:
            for w in rec.request.cmd or []:
                if w.endswith(".start"):
                    by_stamp[w] = rec
        sent = []
        for a in self.attempts:
            stampf = self.raw.get((a.agent, a.job, a.attempt), (None,))[0]
            rec = by_stamp.get(stampf)
            if rec is None or rec.where != "cluster":
                continue
            submit = None if rec.started is None else rec.started - self.wall0 - self.t0
            sent.append(dict(agent=a.agent, job=a.job, attempt=a.attempt, kind=a.kind, asked=a.asked, submitted=submit,
                             started=a.started, finished=a.finished, rc=a.rc))
        to_start = [x["started"] - x["submitted"] for x in sent if None not in (x["started"], x["submitted"])]
        to_submit = [x["submitted"] - x["asked"] for x in sent if x["submitted"] is not None]
        told = [a.ended - a.finished for a in self.attempts if a.finished is not None and
                any((x["agent"], x["job"], x["attempt"]) == (a.agent, a.job, a.attempt) for x in sent)]
        return dict(nodes_gb=list(self.cluster_gb), records_read=self.records is not None, sent=sent,
                    attempts=len(self.attempts), sbatch_s=self.sbatch_s,
                    sbatch_p50_s=pct(self.sbatch_s, 0.5), sbatch_max_s=max(self.sbatch_s, default=None),
                    submit_to_start_p50_s=pct(to_start, 0.5), submit_to_start_max_s=max(to_start, default=None),
                    ask_to_submit_p50_s=pct(to_submit, 0.5), ask_to_submit_max_s=max(to_submit, default=None),
                    told_p50_s=pct(told, 0.5), told_max_s=max(told, default=None))

    def halt(self) -> None:
        """Past the deadline: no agent asks again, and what they wait on is stopped (ours, by pid)."""
        self.halted.set()
        with self.lock:
            self.errors.append(f"still running {self.deadline_s:.0f} s after the first ask (a job that could "
                               f"never start?): stopped; logs in {self.logdir}")
        procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()

    def split_restarts(self, deaths: dict) -> None:
        """res-learned: each agent's attempt that res started again after a kill at its limit becomes
        the two runs it was: the killed one (rc 137, ended when its process was first seen gone, else
        when the next run started) and the run res started again (asked then; the agent told at its
        end). Whether res did: the job's record in state.db (`grown_from_gb`), else res's line in the
        log (RETRY_MARK). The sizes res chose go to `booked` (what admission knew) and `sizes`."""
        recs = res_records(self.state) if self.state is not None else None
        deaths = {str(k): v for k, v in deaths.items()}  # the sampler's keys are the stamp files' Paths
        by_stamp: dict[str, object] = {}
        wanted = {raw[0] for raw in self.raw.values()}
        for rec in recs or []:
            for w in rec.request.cmd or []:
                if w in wanted:
                    by_stamp[w] = rec
        jobs = {(j.agent, j.idx): j for a in self.plan for j in a}
        out = []
        for a in self.attempts:
            stampf, stamps, logf = self.raw.get((a.agent, a.job, a.attempt), (None, [], None))
            rec = by_stamp.get(stampf)
            req = getattr(rec, "request", None)
            if req is not None:
                again = req.grown_from_gb is not None
            else:
                try:
                    again = RETRY_MARK in Path(logf).read_text(errors="replace")
                except (OSError, TypeError):
                    again = False
            j = jobs[(a.agent, a.job)]
            if req is not None:
                cpus = req.cpus if req.cpus is not None else 0.5
                self.booked[(a.agent, a.job, a.attempt, 0)] = (req.grown_from_gb if again else req.mem_gb, cpus, req.est_s)
                if again:
                    self.booked[(a.agent, a.job, a.attempt, 1)] = (req.mem_gb, cpus, req.est_s)
            self.sizes.append(dict(
                agent=a.agent, job=a.job, attempt=a.attempt, kind=a.kind, project=project_of(j),
                true_peak_gb=j.peak_gb, time_s=j.time_s, true_cpus=j.cpus, started_again=again,
                mem_gb=getattr(req, "mem_gb", None), cpus=getattr(req, "cpus", None), est_s=getattr(req, "est_s", None),
                grown_from_gb=getattr(req, "grown_from_gb", None), sized_from=getattr(req, "sized_from", None)))
            if not again:
                out.append(a)
                continue
            rel = [x - self.t0 for x in stamps]
            first, second = (rel[0] if rel else None), (rel[1] if len(rel) > 1 else None)
            gone = [d - self.t0 for d in deaths.get(stampf, []) if first is None or d - self.t0 >= first]
            kill = min(x for x in (gone[0] if gone else None, second, a.ended) if x is not None)
            kill = max(kill, first if first is not None else a.asked)
            out.append(replace(a, started=first, finished=None, ended=kill, rc=137))
            out.append(replace(a, asked=kill, started=second, finished=rel[2] if len(rel) > 2 else None, restart=1))
        self.attempts = out

    def _intervals(self, more=()):
        """(t0, t1, running, waiting) between consecutive events (asks, starts, ends, and `more`)."""
        events = sorted({t for a in self.attempts for t in (a.asked, a.started, a.out) if t is not None} | set(more))
        for t0, t1 in zip(events, events[1:]):
            mid = (t0 + t1) / 2
            yield t0, t1, [a for a in self.attempts if a.runs_at(mid)], [a for a in self.attempts if a.waits_at(mid)]

    def _fits(self):
        """fits(running, attempt): whether the arm would start `attempt` beside `running`, by what it
        knows: res, the sizes it was told (against W and the cores); slots, their count. None for the
        arms that never hold a job back."""
        if self.name.startswith("slots-"):
            n = int(self.name.split("-")[1])
            return lambda running, a: len(running) < n
        if self.name not in ("res", "res-flat", "res-learned"):
            return None
        jobs = {(j.agent, j.idx): j for a in self.plan for j in a}
        flat = self.name == "res-flat"
        cores = len(os.sched_getaffinity(0))
        if self.name == "res-learned":  # the sizes res chose (state.db), run by run
            if any((a.agent, a.job, a.attempt, a.restart) not in self.booked for a in self.attempts):
                return None

            def size(a):
                return self.booked[(a.agent, a.job, a.attempt, a.restart)][:2]
        else:
            def size(a):
                j = jobs[(a.agent, a.job)]
                return (1.0, 0.5) if flat else (int(j.peak_gb * MARGIN * 1024) / 1024, j.cpus)

        def fits(running, a):
            return (size(a)[0] <= self.mem_gb - sum(size(r)[0] for r in running) + 1e-6 and
                    size(a)[1] <= cores - sum(size(r)[1] for r in running) + 1e-6)
        return fits

    def fits_but_waits(self) -> float | None:
        """Seconds during which some job waited although, by what the arm knows (res: the declared
        sizes and CPUs of what ran; slots: their count), it fitted beside what ran."""
        fits = self._fits()
        if fits is None:
            return None
        return sum(t1 - t0 for t0, t1, running, waiting in self._intervals() if any(fits(running, a) for a in waiting))

    def overtaken(self) -> tuple[float, float] | None:
        """(seconds, of them past an estimate): summed over waiting jobs, the time a job waited only
        because jobs asked after it were running (without them it would have fitted, by what the arm
        knows): what jumping the queue cost those it jumped. The second figure is the part during
        which every such later job had run past its own --for (time alone): estimate error, not the
        backfill rule."""
        fits = self._fits()
        if fits is None:
            return None
        told = {(j.agent, j.idx): max(1, round(j.time_s)) for a in self.plan for j in a}

        def est(a):  # its --for: what the arm told res (res-learned: what res chose)
            if self.name == "res-learned":
                return self.booked[(a.agent, a.job, a.attempt, a.restart)][2]
            return told[(a.agent, a.job)]
        total = past = 0.0
        overran = [a.started + est(a) for a in self.attempts if a.started is not None]
        for t0, t1, running, waiting in self._intervals(overran):
            mid = (t0 + t1) / 2
            for w in waiting:
                # asked later by more than a client's start-up: asks closer than that reach the
                # arm in either order (the harness stamps an ask before `res run` even starts)
                later = [r for r in running if r.asked > w.asked + ASK_SKEW]
                if later and not fits(running, w) and fits([r for r in running if r not in later], w):
                    total += t1 - t0
                    if all(mid > r.started + est(r) for r in later):
                        past += t1 - t0
        return total, past

    def idle_cpu_waiting(self, samples: list) -> float | None:
        """CPU-seconds the container's cores were idle while some job waited (from its CPU counter)."""
        cores = len(os.sched_getaffinity(0))
        total, seen = 0.0, False
        for (ta, _, _, ca, _), (tb, _, _, cb, _) in zip(samples, samples[1:]):
            if ca is None or cb is None:
                continue
            seen = True
            mid = (ta + tb) / 2 - self.t0
            if any(a.waits_at(mid) for a in self.attempts):
                total += max(0.0, cores * (tb - ta) - (cb - ca))
        return total if seen else None

    def figures(self, makespan, probe_ms, samples, psi0, psi1, peak) -> dict:
        by_job: dict[tuple, list[Attempt]] = {}
        for a in self.attempts:
            by_job.setdefault((a.agent, a.job), []).append(a)
        waits = [sum(max(0.0, a.in_ - a.asked) for a in atts)
                 for atts in by_job.values()]
        oom = sum(1 for a in self.attempts if a.rc in (-9, 137))
        failed = sum(1 for atts in by_job.values() if atts[-1].rc != 0)
        lost = sum(1 for a in self.plan for j in a) - len(by_job)
        # hand-off: for an attempt that waited while another ended, from the last such end to its start
        ends = sorted(a.out for a in self.attempts)
        handoff = []
        for a in self.attempts:
            if a.started is None or a.started - a.asked < 0.3:
                continue
            before = [e for e in ends if a.asked < e <= a.started]
            if before:
                handoff.append(a.started - before[-1])
        fits_waiting = self.fits_but_waits()
        overtaken = self.overtaken()
        # told: from a job's own end to its agent knowing
        told = [a.ended - a.finished for a in self.attempts if a.finished is not None]
        stops = res_stops(self.records) if self.records is not None else None
        work = sum(j.cpu_s for agent in self.plan for j in agent)
        return dict(
            arm=self.name, makespan_s=makespan, oom_killed=oom, failed=failed + lost,
            # res's own stops of jobs above their book, and the CPU-seconds of the attempts it stopped
            # ÷ all the jobs' CPU-seconds (work lost to them); None: not a res arm
            res_stops=None if stops is None else stops[0],
            lost_pct=None if stops is None or not work else 100 * stops[1] / work,
            wait_p50_s=pct(waits, 0.5), wait_p95_s=pct(waits, 0.95),
            peak_gb=None if peak is None else peak / GIB,
            psi_full_max_avg10=max((s[2] for s in samples if s[2] is not None), default=None),
            psi_full_total_ms=None if not (psi0 and psi1) else (psi1[1] - psi0[1]) / 1000,
            fits_but_waits_s=fits_waiting,
            overtaken_s=None if overtaken is None else overtaken[0],
            overtaken_past_estimate_s=None if overtaken is None else overtaken[1],
            idle_cpu_waiting_s=self.idle_cpu_waiting(samples),
            handoff_p50_s=pct(handoff, 0.5), handoff_max_s=max(handoff, default=None), handoff_n=len(handoff),
            told_p50_s=pct(told, 0.5), told_p95_s=pct(told, 0.95),
            probe_p50_ms=pct(probe_ms, 0.5), probe_p99_ms=pct(probe_ms, 0.99), probe_n=len(probe_ms),
            errors=self.errors,
            attempts=[asdict(a) for a in self.attempts],
            samples=[(round(t - self.t0, 3), u, {str(k): v for k, v in agents.items()})
                     for t, u, _, _, agents in samples],
        )


# ------------------------------------------------------------------ the table

def table(rows: list[dict], bound: float, idle: dict) -> str:
    """One row per arm, its name first; times in seconds, memory in GB, the probe in ms."""
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)

    cols = [("arm", 12), ("makespan s", 10), ("÷bound", 6), ("OOM att", 7), ("failed", 6), ("stops", 5), ("lost %", 6),
            ("wait p50", 8),
            ("wait p95", 8), ("hand-off", 8), ("overtaken", 9), ("idle cpu·s", 10), ("peak GB", 7), ("PSI max10", 9),
            ("PSI ms", 7), ("probe p50", 9), ("probe p99", 9), ("p99÷idle", 8)]
    lines = [" ".join(f"{n:<{w}}" if i == 0 else f"{n:>{w}}" for i, (n, w) in enumerate(cols))]
    lines.append("-" * len(lines[0]))
    for r in rows:
        ratio = None if not (r["probe_p99_ms"] and idle.get("p99")) else r["probe_p99_ms"] / idle["p99"]
        vals = [r["arm"], f(r["makespan_s"], ".1f"), f(r["makespan_s"] / bound, ".2f") + "×", str(r["oom_killed"]),
                str(r["failed"]), f(r.get("res_stops"), "d"), f(r.get("lost_pct"), ".1f"), f(r["wait_p50_s"], ".1f"), f(r["wait_p95_s"], ".1f"), f(r["handoff_p50_s"], ".2f"),
                f(r.get("overtaken_s"), ".1f"), f(r.get("idle_cpu_waiting_s"), ".1f"), f(r["peak_gb"], ".2f"), f(r["psi_full_max_avg10"], ".2f"), f(r["psi_full_total_ms"], ".0f"),
                f(r["probe_p50_ms"], ".1f"), f(r["probe_p99_ms"], ".1f"), f(ratio, ".2f") + ("×" if ratio else "")]
        lines.append(" ".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))
    return "\n".join(lines)


def notes(rows: list[dict]) -> str:
    """The lines under the table that say what its waiting columns mean, with their figures."""
    out = []
    over = ", ".join(f"{r['arm']} {r['overtaken_s']:.1f} s ({r['overtaken_past_estimate_s']:.1f} s of it past the "
                     f"jumpers' own estimates)" for r in rows if r.get("overtaken_s") is not None)
    if over:
        out.append("overtaken: summed over waiting jobs, the time one waited only because jobs asked after it ran "
                   f"(by what the arm knows: res the sizes it was told, slots their count): {over}")
    fbw = ", ".join(f"{r['arm']} {r['fits_but_waits_s']:.1f} s" for r in rows if r.get("fits_but_waits_s") is not None)
    if fbw:
        out.append(f"fits but waits: seconds in which some waiting job fitted beside what ran, by the same measure: {fbw}")
    out.append("idle cpu·s: the container's cores left idle (its own CPU counter) while some job waited")
    gate = ", ".join(f"{r['arm']} {r['gate_refusals']}" for r in rows if r.get("gate_refusals") is not None)
    if gate:
        out.append(f"refused by the gate (the agent asked again {GATE_RETRY_S:g} s later; each counts once): {gate}")
    for r in rows:
        if r.get("warmup") is not None:
            out += learned_notes(r, next((x for x in rows if x["arm"] == "res"), None))
        if r.get("cluster") is not None:
            out += overflow_notes(r, next((x for x in rows if x["arm"] == "res"), None))
        if r.get("cli") is not None:
            from crowd_cli import notes as cli_notes

            out += cli_notes(r, next((x for x in rows if x["arm"] == "res-gated"), None))
    return "\n".join(out)


def overflow_notes(r: dict, local: dict | None) -> list[str]:
    """res-overflow's lines: its cluster, what went there and how fast it started, issue 28's target."""
    c = r["cluster"]

    def s(v):
        return "—" if v is None else f"{v:.2f} s"
    sent = c["sent"]
    kinds = ", ".join(f"{sum(1 for x in sent if x['kind'] == k)} {k}" for k in ("test", "build", "e2e"))
    out = [f"{r['arm']}: the cluster: 3 nodes of {'+'.join(f'{g:g}' for g in c['nodes_gb'])} GB (their own, outside "
           f"W; their CPUs are this machine's {os.cpu_count()} cores); {len(sent)} of {c['attempts']} attempts went "
           f"there ({kinds})" + ("" if c["records_read"] else " (res's state.db could not be read: not counted)"),
           f"{r['arm']}: start latency: the idle cluster, sbatch → the job's process runs, p50 {s(c['sbatch_p50_s'])}, "
           f"max {s(c['sbatch_max_s'])} (n={len(c['sbatch_s'])}); in the run, res's submit → the job's process runs "
           f"p50 {s(c['submit_to_start_p50_s'])}, max {s(c['submit_to_start_max_s'])}; ask → res's submit p50 "
           f"{s(c['ask_to_submit_p50_s'])}, max {s(c['ask_to_submit_max_s'])}; its end → its agent knows (res reads "
           f"the exit record on the shared filesystem) p50 {s(c['told_p50_s'])}, max {s(c['told_max_s'])}"]
    if local is not None:
        waits = {(a["agent"], a["job"], a["attempt"]): a for a in local["attempts"]}
        pairs = [(x["started"] - x["asked"], w["started"] - w["asked"]) for x in sent
                 if x["started"] is not None and (w := waits.get((x["agent"], x["job"], x["attempt"]))) is not None
                 and w["started"] is not None]
        if pairs:
            worse = sum(1 for here, there in pairs if here > there)
            out.append(f"{r['arm']}: the jobs that went to the cluster waited p50 {pct([p[0] for p in pairs], 0.5):.1f} s "
                       f"(ask → running on a node); the same jobs in the res arm waited p50 "
                       f"{pct([p[1] for p in pairs], 0.5):.1f} s; {worse} of {len(pairs)} waited longer for the cluster")
        ratio = r["makespan_s"] / local["makespan_s"]
        ok = ratio <= OVERFLOW_TARGET and r["oom_killed"] == 0 and r["failed"] == 0
        out.append(f"{r['arm']} against res, local only (issue 28): makespan {ratio:.2f}× ({r['makespan_s']:.1f} s "
                   f"against {local['makespan_s']:.1f} s), wait p50 {r['wait_p50_s']:.1f} s against "
                   f"{local['wait_p50_s']:.1f} s, p95 {r['wait_p95_s']:.1f} s against {local['wait_p95_s']:.1f} s, "
                   f"OOM-killed {r['oom_killed']} against {local['oom_killed']}, failed {r['failed']}; target: "
                   f"makespan ≤ {OVERFLOW_TARGET:.2f}× with 0 OOM-killed and 0 failed: {'met' if ok else 'not met'}")
    return out


def learned_notes(r: dict, honest: dict | None) -> list[str]:
    """res-learned's lines: its warm-up, the sizes res chose against the truth, issue 25's target."""
    w = r["warmup"]

    def kills(x):
        return (f"{x['oom_killed']} OOM-killed attempt{'s' if x['oom_killed'] != 1 else ''} ({x['res_restarts']} "
                f"answered by res starting the job again, bigger; {x['oom_killed'] - x['res_restarts']} retried by "
                f"their agents), {x['failed']} failed")
    out = [f"{r['arm']}: warm-up round (not measured; the same workload, --mem/--cpus/--for auto from an empty "
           f"history): {w['makespan_s']:.1f} s, {kills(w)}; measured round: {kills(r)}"]
    chose = []
    for kind in ("test", "build", "e2e"):
        got = [x for x in r.get("sizes", []) if x["kind"] == kind and None not in (x["mem_gb"], x["cpus"], x["est_s"])]
        if got:
            mem = median_of([x["mem_gb"] / x["true_peak_gb"] for x in got])
            est = median_of([x["est_s"] / x["time_s"] for x in got])
            cpus = median_of([x["cpus"] - x["true_cpus"] for x in got])
            chose.append(f"{kind} ×{mem:.2f} peak, ×{est:.1f} time, {cpus:+.2f} CPUs")
    if chose:
        out.append(f"{r['arm']}: sizes res chose in the measured round, median against the truth (honest sizes: "
                   f"×{MARGIN:g} peak, ×1 time, +0 CPUs): {'; '.join(chose)}")
    if honest is not None:
        ratio = r["makespan_s"] / honest["makespan_s"]
        ok_oom, ok_time = r["oom_killed"] == 0 and r["failed"] == 0, ratio <= 1.10
        out.append(f"{r['arm']} against honest sizes (issue 25): OOM-killed after the warm-up {r['oom_killed']}, "
                   f"failed {r['failed']} (target 0): {'met' if ok_oom else 'not met'}; makespan {ratio:.2f}× "
                   f"the res arm's (target ≤ 1.10×): {'met' if ok_time else 'not met'}")
    return out


def median_of(values: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    s = sorted(values)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def shipped_auto_mem_gb() -> float:
    """The shipped policy's auto_mem_gb (policies/default.toml)."""
    import tomllib

    return float(tomllib.loads((REPO / "policies" / "default.toml").read_text())["auto_mem_gb"])


def run_arm(name: str, plan: list[list[Job]], mem_gb: float, workdir: Path, size: dict, lb: dict, log) -> dict:
    """One arm's row. res-learned is two rounds against one state directory: the warm-up (its figures
    kept under `warmup`), then the measured one (the row)."""
    # an arm whose jobs may never start (a cluster that does not take them, a CLI session that ended,
    # a first guess that never fits) must not hang the bench
    deadline_s = max(300.0, 10 * lb["declared"])
    if name == "res-overflow":
        return ArmRun(name, plan, mem_gb, workdir, deadline_s=deadline_s,
                      cluster_gb=size["cluster_gb"], sbatch_rounds=size["sbatch_rounds"]).go()
    if name == "res-cli":
        return ArmRun(name, plan, mem_gb, workdir, deadline_s=deadline_s).go()
    if name != "res-learned":
        return ArmRun(name, plan, mem_gb, workdir).go()
    state = Path(tempfile.mkdtemp(prefix="res-crowd-learned-"))
    STARTED.dirs.append(state)
    kw = dict(state=state, auto_mem_gb=size.get("auto_mem_gb"), deadline_s=deadline_s)
    t = time.monotonic()
    warm = ArmRun(name, plan, mem_gb, workdir, round_="warm-up", **kw).go()
    log(f"   {name}, warm-up round (not measured): {warm['makespan_s']:.1f} s, {warm['oom_killed']} OOM-killed "
        f"({warm['res_restarts']} of them answered by res starting the job again), {warm['failed']} failed "
        f"(took {time.monotonic() - t:.1f} s)")
    row = ArmRun(name, plan, mem_gb, workdir, round_="measured", **kw).go()
    row["warmup"] = {k: warm[k] for k in ("makespan_s", "oom_killed", "res_restarts", "failed", "wait_p50_s",
                                          "wait_p95_s", "peak_gb", "attempts", "sizes")}
    row["errors"] = [f"warm-up: {e}" for e in warm["errors"]] + row["errors"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a crowded workstation, side by side (issue 23)")
    ap.add_argument("--mix", choices=sorted(MIXES), default="mixed")
    ap.add_argument("--agents", type=int)
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                    help="which arms, in order (default: all but res-overflow, which boots a Slurm cluster)")
    ap.add_argument("--mem-gb", type=float, help="W, the simulated workstation's memory (default 6; smoke 1)")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--smoke", action="store_true", help="2 agents × 2 small jobs on 1 GB (CI)")
    ap.add_argument("--cluster-gb", help="res-overflow: the three nodes' memory, GB (default 2,2,4; smoke .5,.5,1; "
                                         "scaled with --mem-gb)")
    ap.add_argument("--json", help="write every figure, attempt and sample here")
    ap.add_argument("--keep-logs", action="store_true", help="keep the jobs' logs (their directory is printed)")
    ap.add_argument("--plot", help="draw the run: memory by agent over time, per arm, with the cap and OOM kills (PNG)")
    ap.add_argument("--replot", metavar="RUN_JSON", help="draw a run written by --json into --plot, running nothing")
    a = ap.parse_args(argv)
    if a.replot:
        if not a.plot:
            raise SystemExit("crowd: --replot needs --plot FILE")
        from crowd_plot import plot

        plot(json.loads(Path(a.replot).read_text()), a.plot)
        print(f"crowd: drew {a.replot} into {a.plot}")
        return 0
    if a.plot:
        try:
            import matplotlib  # noqa: F401  (said now, not after minutes of running)
        except ImportError:
            raise SystemExit("crowd: --plot needs matplotlib: pip install -e '.[bench]'")
    size = dict(SMOKE if a.smoke else FULL)
    agents = a.agents or size["agents"]
    mem_gb = a.mem_gb or size["mem_gb"]
    if not a.smoke and mem_gb != FULL["mem_gb"]:  # the same crowd on a smaller or larger machine
        k = mem_gb / FULL["mem_gb"]
        size.update(build_gb=tuple(x * k for x in FULL["build_gb"]), e2e_gb=tuple(x * k for x in FULL["e2e_gb"]),
                    auto_mem_gb=shipped_auto_mem_gb() * k,  # res-learned's first guess, scaled too
                    cluster_gb=tuple(x * k for x in FULL["cluster_gb"]))  # and res-overflow's nodes
    if a.cluster_gb:
        try:
            size["cluster_gb"] = tuple(float(x) for x in a.cluster_gb.split(","))
        except ValueError:
            raise SystemExit(f"crowd: --cluster-gb {a.cluster_gb!r}: three numbers, e.g. 2,2,4")
        if len(size["cluster_gb"]) != 3 or min(size["cluster_gb"]) <= 0:
            raise SystemExit(f"crowd: --cluster-gb {a.cluster_gb!r}: three numbers above 0, e.g. 2,2,4")
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    for name in arms:
        if name not in ARMS:
            raise SystemExit(f"crowd: unknown arm {name!r} (known: {', '.join(ARMS)})")
    if not (os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get("XDG_RUNTIME_DIR")) or \
            systemctl("is-system-running").stdout.strip() not in ("running", "degraded"):
        print("crowd: no systemd user manager reachable (DBUS_SESSION_BUS_ADDRESS): nothing measured", file=sys.stderr)
        return 1
    sys.path.insert(0, str(REPO))
    if "res-overflow" in arms:
        why = cluster_refusal(mem_gb, size["cluster_gb"])
        if why:
            print(f"crowd: {why}: nothing measured", file=sys.stderr)
            return 1

    def on_term(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="res-crowd-logs-"))
    try:
        log = lambda m: print(m, flush=True)  # noqa: E731
        cores = len(os.sched_getaffinity(0))
        log(f"crowd: mix {a.mix}, {agents} agents, W = {mem_gb:g} GB, {cores} cores, seed {a.seed}"
            f"{' (smoke)' if a.smoke else ''}; load {os.getloadavg()[0]:.2f}")
        log("   " + check_cap(f"cw{secrets.token_hex(3)}", mem_gb))
        suites = setup_suites(SMOKE_TESTS if a.smoke else TESTS, log)
        base = measure_alone([PY, JOB, "build", os.devnull, "0", "0.05"])["peak_mb"]  # the job process itself
        plan = workload(a.mix, agents, size, suites, a.seed, base)
        lb = lower_bound(plan, mem_gb, cores)
        njobs = sum(len(x) for x in plan)
        kinds = {k: sum(1 for x in plan for j in x if j.kind == k) for k in ("test", "build", "e2e")}
        log(f"   workload: {njobs} jobs ({', '.join(f'{v} {k}' for k, v in kinds.items())}); lower bound "
            f"{lb['bound']:.1f} s = max(Σ peak·t / W {lb['mem']:.1f}, Σ cpu·t / cores {lb['cpu']:.1f}, "
            f"longest chain {lb['chain']:.1f}); with the sizes res is told (×{MARGIN:g}): {lb['declared']:.1f} s "
            f"(Σ declared·t / W {lb['declared_mem']:.1f}, jobs declared over W/2 one at a time {lb['one_at_a_time']:.1f})")
        if "res-learned" in arms:
            keys = learned_keys(plan)
            log("   res-learned: history keeps the jobs as " + "; ".join(
                f"{k}: {', '.join(sorted(v))}" for k, v in keys.items()) + " (a test suite in its own project, "
                f"an agent's builds and e2e runs in its own); first guess {size.get('auto_mem_gb') or shipped_auto_mem_gb():g} GB")
        probe = Probe(workdir / "probe-idle.txt")
        time.sleep(size["idle_s"])
        idle_ms = probe.stop()
        idle = dict(p50=pct(idle_ms, 0.5), p99=pct(idle_ms, 0.99), n=len(idle_ms))
        log(f"   owner's probe, idle: p50 {idle['p50']:.1f} ms, p99 {idle['p99']:.1f} ms (n={idle['n']}; "
            f"load {os.getloadavg()[0]:.2f})")
        rows = []
        for name in arms:
            t = time.monotonic()
            r = run_arm(name, plan, mem_gb, workdir, size, lb, log)
            rows.append(r)
            log(f"   {name}: {r['makespan_s']:.1f} s, {r['oom_killed']} OOM-killed, {r['failed']} failed "
                f"(arm took {time.monotonic() - t:.1f} s)")
            for e in r["errors"][:5]:
                log(f"      error: {e}")
        print()
        print(table(rows, lb["bound"], idle))
        print()
        print(notes(rows))
        told = ", ".join(f"{r['arm']} {r['told_p50_s']:.2f} s" for r in rows if r["told_p50_s"] is not None)
        print(f"hand-off: p50 of (a waiting job's start − the last job end before it); told: a job's end → "
              f"its agent knows, p50: {told}")
        print(f"lower bound {lb['bound']:.1f} s; probe: {PROBE_MB} MB every {PROBE_PERIOD * 1000:.0f} ms outside "
              f"the container, idle p99 {idle['p99']:.1f} ms; PSI: /proc/pressure/memory full (system-wide); "
              f"{time.monotonic() - started:.1f} s in all")
        doc = dict(mix=a.mix, agents=agents, mem_gb=mem_gb, cores=cores, seed=a.seed, smoke=a.smoke, bound=lb,
                   idle_probe=idle, jobs=[asdict(j) | {"cpus": j.cpus} for x in plan for j in x], arms=rows)
        if a.json:
            Path(a.json).write_text(json.dumps(doc, indent=1))
        if a.plot:
            from crowd_plot import plot

            plot(doc, a.plot)
            print(f"picture: {a.plot}")
        broken = [r["arm"] for r in rows if r["errors"]]
        if broken:
            print(f"errors (not OOM) in: {', '.join(broken)}; logs in {workdir}")
            a.keep_logs = True
        return 1 if broken else 0
    except KeyboardInterrupt:
        print("\ncrowd: interrupted; stopping what it started", file=sys.stderr)
        return 130
    finally:
        STARTED.cleanup()
        if a.keep_logs:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
