"""Benchmarks p and q: `res` on a Slurm cluster (DESIGN §6b), the one SLURM_CONF names when that
answers, else a private single-node cluster booted for the run (tests/slurmcluster.py) and stopped by
pid after it.

p. `res run --on cluster -- sleep 5` (serve running) from invocation to Slurm saying RUNNING, vs
   `sbatch --wrap 'sleep 5'` to RUNNING on the same cluster; the two take turns every round, and each
   is watched by the same squeue poll.                                          target ≤ 1.5×
q. 200 cluster requests (`res run --on cluster --queue`) by 8 agents at once through a running
   `res serve`: every one submitted exactly once (0 lost, 0 duplicated in squeue), and the wall time.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from common import REPO, Broken, Figure, Report, ResEnv, median_ms, spread, timed

sys.path.insert(0, str(REPO / "tests"))
import slurmcluster  # noqa: E402

SUBMITTED = re.compile(r"(r-\d+) submitted to slurm job (\d+)")
STARTED_STATES = ("RUNNING", "COMPLETING", "COMPLETED")


@contextmanager
def cluster():
    """The cluster to measure on: SLURM_CONF's when this file's harness booted it and it answers, else
    a private one for this run. None (and a note) where Slurm is not installed."""
    reused = slurmcluster.booted_here(os.environ.get("SLURM_CONF"))
    if reused is not None:
        yield os.environ["SLURM_CONF"]
        return
    if slurmcluster.missing():
        yield None
        return
    base = Path(tempfile.mkdtemp(prefix="res-bench-slurm-"))
    try:
        env = slurmcluster.start(base)
        yield env["SLURM_CONF"]
    finally:
        slurmcluster.stop(base)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def _state(env: dict, slurm_id: str) -> str:
    r = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={slurm_id}", "--format=%T"], env=env,
                       capture_output=True, text=True, timeout=30)
    return r.stdout.strip()


def _until_started(env: dict, slurm_id: str, t0: float, limit_s: float = 60) -> float:
    while True:
        if _state(env, slurm_id) in STARTED_STATES:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > limit_s:
            raise Broken(f"slurm job {slurm_id} not running after {limit_s:g} s")
        time.sleep(0.01)


def _cancel(env: dict, ids: list[str], wait: bool = False) -> None:
    """Cancel; `wait`: until Slurm has let go of their CPUs (past COMPLETING), so that the next
    round's job finds the node as this one did."""
    if ids:
        subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=60)
    deadline = time.monotonic() + 60
    while wait and ids and time.monotonic() < deadline:
        if all(_state(env, i) not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") for i in ids):
            return
        time.sleep(0.02)


def bench_cluster_run(report: Report, rounds: int) -> None:
    with cluster() as conf:
        if conf is None:
            report.notes.append(f"p  skipped: {slurmcluster.missing()}")
            return
        res = ResEnv("sp", user_reserve_gb="1", small_headroom_gb="0.5", user_reserve_cpus="0")
        res.env["SLURM_CONF"] = conf
        env = dict(os.environ, SLURM_CONF=conf)
        ours: list[str] = []
        times: dict[str, list[float]] = {"sbatch": [], "res": []}
        try:
            res.start_serve()
            for i in range(rounds + 1):  # round 0 warms caches and is not counted
                t0 = time.perf_counter()
                r = subprocess.run(["sbatch", "--parsable", "--mem=100M", "--time=1", "--output=/dev/null",
                                    "--wrap", "sleep 5"], env=env, capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    raise Broken(f"sbatch: {r.stderr.strip()}")
                sid = r.stdout.strip().split(";")[0]
                ours.append(sid)
                t_sbatch = _until_started(env, sid, t0)
                _cancel(env, [sid], wait=True)
                t0 = time.perf_counter()
                _, r = res.res("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sleep", "5")
                m = SUBMITTED.match(r.stdout)
                if r.returncode != 0 or not m:
                    raise Broken(f"res run --on cluster: exit {r.returncode}: {r.stdout.strip()!r} {r.stderr.strip()!r}")
                ours.append(m.group(2))
                t_res = _until_started(env, m.group(2), t0)
                _cancel(env, [m.group(2)], wait=True)
                if i:
                    times["sbatch"].append(t_sbatch)
                    times["res"].append(t_res)
            res.finish("the cluster runs", limit_s=60)
        finally:
            _cancel(env, ours)
            res.close()
    sb, rr = median_ms(times["sbatch"]), median_ms(times["res"])
    ratio = rr / sb
    report.figures.append(Figure("p", "res run --on cluster / sbatch, to RUNNING", ratio,
                                 f"{rr:.0f} ms vs {sb:.0f} ms (median)", "≤ 1.5×", ratio <= 1.5))
    report.raw.append(f"p  res run --on cluster -- sleep 5 (serve running) to RUNNING  {spread(times['res'])}")
    report.raw.append(f"p  sbatch --wrap 'sleep 5' to RUNNING                         {spread(times['sbatch'])}")


def bench_cluster_crowd(report: Report, agents: int, each: int) -> None:
    with cluster() as conf:
        if conf is None:
            report.notes.append(f"q  skipped: {slurmcluster.missing()}")
            return
        res = ResEnv("sq", user_reserve_gb="1", small_headroom_gb="0.5", user_reserve_cpus="0",
                     max_starts_per_tick="1000")
        res.env["SLURM_CONF"] = conf
        env = dict(os.environ, SLURM_CONF=conf)
        comment = f"res:{res.state}"
        try:
            res.start_serve()

            def agent(n: int) -> list[str]:
                ids = []
                for _ in range(each):
                    _, r = res.res("run", "--on", "cluster", "--queue", "--mem", "10M", "--cpus", "0.1", "--for", "1m",
                                   "--", "true", timeout=300)
                    m = SUBMITTED.match(r.stdout)
                    if r.returncode != 0 or not m:
                        raise Broken(f"agent {n}: exit {r.returncode}: {r.stdout.strip()!r} {r.stderr.strip()!r}")
                    ids.append(m.group(1))
                return ids

            t0 = time.perf_counter()
            with ThreadPoolExecutor(agents) as pool:
                answered = [i for ids in pool.map(agent, range(agents)) for i in ids]
            wall = time.perf_counter() - t0
            r = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%j|%k"], env=env,
                               capture_output=True, text=True, timeout=60)
            names = [line.split("|", 1)[0] for line in r.stdout.splitlines() if line.split("|", 1)[-1] == comment]
            res.finish("the cluster crowd", limit_s=120)
        finally:
            r2 = subprocess.run(["squeue", "--noheader", "--format=%i|%k"], env=env, capture_output=True, text=True,
                                timeout=60)
            _cancel(env, [line.split("|")[0] for line in r2.stdout.splitlines() if line.split("|", 1)[-1] == comment])
            res.close()
    total = agents * each
    lost = total - len(set(names))
    duplicated = len(names) - len(set(names))
    report.figures.append(Figure("q", f"{agents} agents × {each} cluster requests, requests/s", total / wall,
                                 f"{total} in {wall:.1f} s; {lost} lost, {duplicated} duplicated in squeue"))
    if lost or duplicated or len(set(answered)) != total:
        raise Broken(f"cluster crowd: {lost} lost, {duplicated} duplicated, {total - len(set(answered))} ids repeated")
