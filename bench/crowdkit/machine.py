"""The machine the crowd runs on, and the cleanup of everything a run starts.

A simulated workstation of W GB: a transient systemd user slice with MemoryMax=W (MemorySwapMax=0)
made afresh for each arm; every job of every arm runs inside it, so no arm can take the real machine
down. At start a real allocation past the cap must be killed, or the run is refused (check_cap).
res-overflow's private Slurm cluster (tests/slurmnodes.py) is booted and stopped here too. The
owner's probe runs outside the container: every 200 ms it allocates and touches 50 MB and times that
(first on the idle machine, then during each arm).

Everything started here is stopped by pid or by its unique unit names, and its units, slices and
state removed at the end, even on Ctrl-C (STARTED). Imports nothing else of the crowd's."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
PY = sys.executable
# the processes the harness starts, run by their paths: their names are in the jobs' command lines
# (the sampler finds a job's process by it, res-learned's history keys the jobs by it)
JOB = str(BENCH / "crowd_job.py")
RES_SHIM = str(BENCH / "crowd_res.py")
GIB = 1 << 30
MIB = 1 << 20
PROBE_MB, PROBE_PERIOD = 50, 0.2


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
