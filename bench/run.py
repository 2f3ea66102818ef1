"""res benchmarks (DESIGN §10): each figure as a ratio, one line per benchmark, then the raw
numbers.

    python3 bench/run.py            the full run (about 15 minutes: j watches an idle loop for 10)
    python3 bench/run.py --smoke    a small version for CI (~2.5 min here: t waits out its limits)
    python3 bench/run.py --only b,c a subset
    python3 bench/run.py --fresh-venv --only a,h,i,j   as a user's install runs res: a new venv, a
                                    regular `pip install .`, these benchmarks by its interpreter

    a  `res run --mem 100M --for 1m -- true` end to end (with `res serve` and without) vs
       `systemd-run --user --collect -q true`, and vs `python3 -c pass` for context   target ≤ 10×
    b  one plan over 1,000 queued, 100 running, 100 notes; growth when every count doubles
                                                                          targets ≤ 20 ms, ≤ 2.2×
    c  64 concurrent writers × 50 requests through the desired Writer's file lock: wall time, p99 wait,
       lost entries and duplicate ids (both must be 0); and 64 agents × 50 `res run --queue` through a
       running `res serve` (group commit)                               target ≥ 1,000 requests/s
    d  request-to-start latency with `res serve` running
    e  SIGKILL of `res serve` while 5 sessions stream → all re-attached, vs lease + sweep
    f  digest ingestion throughput on a stream-json log (MB/s)
    g  the loop's CPU while 5 jobs stream 1,000 lines/s each
    h  `res hook` whole process (a PreToolUse JSON for Bash on stdin), game mode off and on, vs
       `python3 -c pass`: median and p90; every output checked                    target ≤ 3×
    i  `res status` over 200 entries (read here, and answered by a running `res serve`) vs
       `systemctl --user list-units --no-pager`
    j  the loop's idle CPU over 10 minutes and its memory               targets ≤ 0.05 % of a core, ≤ 35 MB
    k  `res run --wait -- true` (serve running) vs `systemd-run --user --wait --collect true`
    l  a job's end -> `res wait` returns, serve running: p50, p90              target p50 ≤ 50 ms
    m  a predecessor ends -> the next job on its lock starts, serve running    target p50 ≤ 50 ms
    n  SIGKILL of `res serve`, the job ends, a new serve: until it is settled  target ≤ 2 s
    o  ten 1-second jobs on one lock, queued at once: first start to last end  target ≤ 11 s
    p  `res run --on cluster` (serve running) to Slurm's RUNNING vs `sbatch --wrap` to RUNNING
                                                                          target ≤ 1.5×
    q  200 cluster requests by 8 agents through `res serve`: 0 lost, 0 duplicated in squeue, wall
    s  the loop's CPU over 60 s with the page's /events open (`res web`)    target < 1 % of a core
    t  every caller's limit kept (`res wait --timeout`, RES_ANSWER_WAIT_S) with the loop stopped, with
       state.db held by another process (loop running, and no loop): worst ÷ limit  target ≤ 1.5×

Exit status: 0 when everything was measured, whether or not a speed target was met; 1 when the thing
measured is broken (an entry lost, an id handed out twice, a run not started, a benchmark that
errored). a, d, e, g, i, j, s and t need a systemd user manager; without one they are skipped (and say so);
p and q need Slurm's packages (they boot a private single-node cluster unless SLURM_CONF names one
tests/slurmcluster.py booted).
Everything started here runs under a private state directory, unique slices and unit prefix, and is
stopped by pid."""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from common import Broken, Report, manager_reachable  # noqa: E402

FULL = dict(run_rounds=20, plan_runs=15, writers=(64, 50), latency_rounds=15, hook_rounds=40, status_rounds=20,
            wait_rounds=15, kill_rounds=5, chain_jobs=10, cluster_rounds=10, cluster_crowd=(8, 25), timeout_rounds=3)
SMOKE = dict(run_rounds=5, plan_runs=5, writers=(8, 10), latency_rounds=3, hook_rounds=8, status_rounds=5,
             wait_rounds=3, kill_rounds=1, chain_jobs=3, cluster_rounds=2, cluster_crowd=(4, 3), timeout_rounds=1)


def machine() -> str:
    with open("/proc/meminfo") as f:
        mem = {k: int(v.split()[0]) / 1024**2 for k, _, v in (line.partition(":") for line in f)
               if k in ("MemTotal", "MemAvailable")}
    try:
        sysd = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, timeout=10).stdout.split()[1]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        sysd = "?"
    return (f"{len(os.sched_getaffinity(0))} cpus, {mem['MemTotal']:.1f} GB ({mem['MemAvailable']:.1f} available), "
            f"load {os.getloadavg()[0]:.2f}; Python {platform.python_version()}; systemd {sysd}")


def in_fresh_venv(argv: list[str]) -> int:
    """bench/run.py again, by a new venv's interpreter, with res installed into it as a user installs
    it (`pip install <checkout>`: not editable, compiled): res_argv() then finds that venv's `res`."""
    venv = Path(tempfile.mkdtemp(prefix="res-bench-venv-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["RES_BENCH_INSTALLED"] = str(venv)  # (its bytecode is pip's: no private cache then)
        t0 = time.monotonic()
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(Path(__file__).resolve().parent.parent)],
                       check=True, env=env)
        print(f"res installed into a new venv ({venv}, a regular install) in {time.monotonic() - t0:.0f} s", flush=True)
        return subprocess.call([str(venv / "bin" / "python"), str(Path(__file__).resolve()), *argv], env=env)
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="res benchmarks: figures as ratios")
    ap.add_argument("--smoke", action="store_true", help="a small, fast version (CI)")
    ap.add_argument("--only", default="a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t", help="which benchmarks, e.g. b,c")
    ap.add_argument("--fresh-venv", action="store_true",
                    help="measure what a user's install runs: a new venv, `pip install .` (a regular install, its "
                         "bytecode written by pip), and these benchmarks run by its interpreter and its `res`")
    a = ap.parse_args(argv)
    if a.fresh_venv:
        return in_fresh_venv([x for x in (sys.argv[1:] if argv is None else argv) if x != "--fresh-venv"])
    size = SMOKE if a.smoke else FULL
    only = set(a.only.split(","))
    report = Report()

    # Every `res` here runs with its bytecode cached, as after any install: in a private directory
    # (nothing is written into the checkout), even where PYTHONDONTWRITEBYTECODE is set. The first
    # round of each benchmark fills it and is not counted.
    pycache = tempfile.mkdtemp(prefix="res-bench-pycache-")
    no_bytecode = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if os.environ.get("RES_BENCH_INSTALLED"):
        report.notes.append("   (res as a user's install runs it: a new venv, `pip install .`, its bytecode pip's)")
    else:
        os.environ["PYTHONPYCACHEPREFIX"] = pycache
    if no_bytecode and not os.environ.get("RES_BENCH_INSTALLED"):
        report.notes.append("   (PYTHONDONTWRITEBYTECODE was set; the commands measured ran with bytecode cached in "
                            "a private PYTHONPYCACHEPREFIX)")
    try:
        return run_all(a, size, only, report)
    finally:
        shutil.rmtree(pycache, ignore_errors=True)


def run_all(a, size: dict, only: set[str], report: Report) -> int:
    from cli_bench import bench_latency, bench_run
    from plan_bench import bench_plan
    from attach_bench import bench_digest, bench_loop_cpu, bench_loop_idle, bench_reattach
    from user_bench import bench_gate, bench_hook, bench_status
    from wait_bench import bench_kill_settle, bench_lock_chain, bench_next_start, bench_run_wait, bench_wait_latency
    from writers_bench import bench_loop_writers, bench_writers
    from cluster_bench import bench_cluster_crowd, bench_cluster_run
    from web_bench import bench_web_events
    from timeout_bench import bench_timeouts

    have_manager = manager_reachable()
    benchmarks = [
        ("a", True, lambda: bench_run(report, size["run_rounds"])),
        ("b", False, lambda: bench_plan(report, size["plan_runs"], profile=True)),
        ("c", False, lambda: bench_writers(report, *size["writers"])),
        ("c", True, lambda: bench_loop_writers(report, *size["writers"])),
        ("d", True, lambda: bench_latency(report, size["latency_rounds"])),
        ("e", True, lambda: bench_reattach(report, a.smoke)),
        ("f", False, lambda: bench_digest(report, a.smoke)),
        ("g", True, lambda: bench_loop_cpu(report, a.smoke)),
        ("h", False, lambda: bench_hook(report, size["hook_rounds"])),
        ("r", True, lambda: bench_gate(report, size["hook_rounds"])),
        ("i", True, lambda: bench_status(report, size["status_rounds"])),
        ("j", True, lambda: bench_loop_idle(report, a.smoke)),
        ("k", True, lambda: bench_run_wait(report, size["wait_rounds"])),
        ("l", True, lambda: bench_wait_latency(report, size["wait_rounds"])),
        ("m", True, lambda: bench_next_start(report, size["wait_rounds"])),
        ("n", True, lambda: bench_kill_settle(report, size["kill_rounds"])),
        ("o", True, lambda: bench_lock_chain(report, size["chain_jobs"])),
        ("p", True, lambda: bench_cluster_run(report, size["cluster_rounds"])),
        ("q", True, lambda: bench_cluster_crowd(report, *size["cluster_crowd"])),
        ("s", True, lambda: bench_web_events(report, a.smoke)),
        ("t", True, lambda: bench_timeouts(report, size["timeout_rounds"])),
    ]
    print(f"res benchmarks ({'smoke' if a.smoke else 'full'}) · {machine()}", flush=True)
    started = time.monotonic()
    for key, needs_manager, run in benchmarks:
        if key not in only:
            continue
        if needs_manager and not have_manager:
            report.notes.append(f"{key}  skipped: no systemd user manager reachable (DBUS_SESSION_BUS_ADDRESS)")
            continue
        t0 = time.monotonic()
        try:
            run()
        except Broken as e:
            report.broken.append(f"{key}: {e}")
        except Exception:
            report.broken.append(f"{key}: errored: {traceback.format_exc().strip().splitlines()[-1]}")
            traceback.print_exc()
        print(f"   {key} done in {time.monotonic() - t0:.1f} s", flush=True)

    print()
    for fig in report.figures:
        print(fig.line())
    print("\nraw:")
    for line in report.raw:
        print("  " + line)
    for line in report.notes:
        print(line)
    missed = [f for f in report.figures if f.met is False]
    print(f"\n{len(report.figures)} figures in {time.monotonic() - started:.1f} s; "
          f"targets missed: {', '.join(f'{f.key} {f.name}' for f in missed) or 'none'} (not a failure)")
    if report.broken:
        print("BROKEN:")
        for line in report.broken:
            print("  " + line)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
