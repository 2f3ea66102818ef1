"""The crowd's work: the real test suites (a venv made once at set-up, each suite's time alone
measured once), the mixes, the seeded list of jobs each agent runs one after another, and the lower
bound of the makespan. Imports machine."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .machine import JOB, PY

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

MARGIN = 1.25  # honest declaration: true peak × 1.25

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
