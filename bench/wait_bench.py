"""Benchmarks k–n: an agent's everyday loop, run and wait, on the real systemd user manager.

k. `res run --wait --mem 100M --for 1m -- true` end to end (with `res serve` running) vs
   `systemd-run --user --wait --collect -q true`: one call that runs a job and exits with its code.
l. a job's end → `res wait` returns (serve running): the job prints CLOCK_MONOTONIC as its last act;
   the waiting `res wait` is timed to its exit on the same clock. p50 and p90.   target p50 ≤ 50 ms
m. a predecessor ends → the next job queued on its lock starts (serve running): the first prints
   CLOCK_MONOTONIC as it ends, systemd's ActiveEnterTimestampMonotonic of the second says when it
   started. p50.                                                                 target ≤ 50 ms
o. ten 1-second jobs queued at once on one lock (serve running): the first's start to the last's
   end, against 11 s (the records' start and end times).                          target ≤ 1×
n. SIGKILL of `res serve` while a job runs; the job ends; a new `res serve` is started: from its
   start until the job is settled (`done` in state.db), against 2 s.             target ≤ 1×
"""
from __future__ import annotations

import subprocess
import time

from common import PY, Broken, Figure, Report, ResEnv, median_ms, p90_ms, res_argv, spread, timed

POLICY = dict(user_reserve_gb=1, small_headroom_gb=0.5, user_reserve_cpus=0, game_reserve_cpus=0)
# Runs until its go-file exists, then prints time.monotonic() (the same clock as ours) and exits.
GATED = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.005)\nprint(time.monotonic(), flush=True)"


def _ok(r: subprocess.CompletedProcess, what: str) -> str:
    if r.returncode != 0:
        raise Broken(f"{what}: exit {r.returncode}, stdout {r.stdout.strip()!r}, stderr {r.stderr.strip()!r}")
    return r.stdout


def _job_id(out: str) -> str:
    return out.split()[0]


def _log_clock(env: ResEnv, job_id: str) -> float:
    text = (env.state / "logs" / f"{job_id}.log").read_text().split()
    return float(text[0])


def _record(env: ResEnv, job_id: str):
    from reconciler.config.paths import Paths
    from reconciler.recorded.store import Store

    with Store.open(Paths(env.state), readonly=True) as store:
        return store.get(job_id)


def _latency_figure(report: Report, key: str, what: str, lat: list[float], target_ms: float = 50) -> None:
    p50 = median_ms(lat)
    report.figures.append(Figure(key, f"{what} (p50) / {target_ms:g} ms", p50 / target_ms,
                                 f"p50 {p50:.0f} ms, p90 {p90_ms(lat):.0f} ms", "≤ 1×", p50 <= target_ms))
    report.raw.append(f"{key}  {what:<42} {spread(lat, p90=True)}")


def bench_run_wait(report: Report, rounds: int) -> None:
    env = ResEnv("k", **POLICY)
    res_t, sysd_t = [], []
    try:
        env.start_serve()
        for i in range(rounds + 1):  # round 0 warms the caches
            t, r = timed(["systemd-run", "--user", "--wait", "--collect", "-q", "true"])
            if r.returncode != 0:
                raise Broken(f"systemd-run --wait: exit {r.returncode}: {r.stderr.strip()}")
            t_res, r = env.res("run", "--wait", "--mem", "100M", "--for", "1m", "--", "true")
            _ok(r, "res run --wait")
            if i:
                res_t.append(t_res)
                sysd_t.append(t)
        env.finish()
    finally:
        env.close()
    a, b = median_ms(res_t), median_ms(sysd_t)
    report.figures.append(Figure("k", "res run --wait -- true / systemd-run --wait", a / b, f"{a:.0f} ms vs {b:.1f} ms"))
    report.raw += [f"k  res run --wait (serve running)            {spread(res_t, p90=True)}",
                   f"k  systemd-run --user --wait --collect true  {spread(sysd_t, p90=True)}"]


def bench_wait_latency(report: Report, rounds: int) -> None:
    env = ResEnv("l", **POLICY)
    lat = []
    try:
        env.start_serve()
        for i in range(rounds + 1):
            go = env.dir / f"go-l{i}"
            _, r = env.res("run", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--", PY, "-c", GATED, str(go))
            job_id = _job_id(_ok(r, "res run"))
            waiter = subprocess.Popen(res_argv() + ["wait", job_id], env=env.env, cwd=str(env.work),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)  # the wait is asked and waiting
            go.touch()
            out, err = waiter.communicate(timeout=60)
            returned = time.monotonic()
            if waiter.returncode != 0:
                raise Broken(f"res wait {job_id}: exit {waiter.returncode}: {out.strip()} {err.strip()}")
            if i:
                lat.append(returned - _log_clock(env, job_id))
        env.finish()
    finally:
        env.close()
    _latency_figure(report, "l", "job end -> res wait returns", lat)


def bench_next_start(report: Report, rounds: int) -> None:
    env = ResEnv("m", **POLICY)
    lat = []
    try:
        env.start_serve()
        for i in range(rounds + 1):
            go = env.dir / f"go-m{i}"
            _, r = env.res("run", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--lock", "chain", "--",
                           PY, "-c", GATED, str(go))
            first = _job_id(_ok(r, "res run (first)"))
            _, r = env.res("run", "--queue", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--lock", "chain", "--",
                           "sleep", "1")
            second = _job_id(_ok(r, "res run --queue (second)"))
            go.touch()
            _, w = env.res("wait", first)
            _ok(w, f"res wait {first}")
            started_us = 0
            deadline = time.monotonic() + 30
            while not started_us and time.monotonic() < deadline:
                _, show = timed(["systemctl", "--user", "show", "--value", "-p", "ActiveEnterTimestampMonotonic",
                                 env.unit(second)], env=env.env)
                started_us = int(show.stdout.strip() or 0)
                if not started_us:
                    time.sleep(0.01)
            if not started_us:
                raise Broken(f"{second} did not start after {first} ended")
            _, w = env.res("wait", second)
            _ok(w, f"res wait {second}")
            if i:
                lat.append(started_us / 1e6 - _log_clock(env, first))
        env.finish()
    finally:
        env.close()
    _latency_figure(report, "m", "predecessor ends -> next starts", lat)


def bench_lock_chain(report: Report, jobs: int) -> None:
    """o: `jobs` one-second jobs queued at once on one lock (serve running): from the first's start
    to the last's end, against jobs × 1 s + 1 s. Every gap between one's end and the next's start is
    the loop's reaction to a unit's end."""
    env = ResEnv("o", **POLICY)
    try:
        env.start_serve()
        ids = []
        for _ in range(jobs):
            _, r = env.res("run", "--queue", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--lock", "chain", "--",
                           "sleep", "1")
            ids.append(_job_id(_ok(r, "res run --queue")))
        for job_id in ids:
            _, w = env.res("wait", job_id, timeout=120)
            _ok(w, f"res wait {job_id}")
        first, last = _record(env, ids[0]), _record(env, ids[-1])
        wall = last.ended - first.started
        gaps = []
        for a, b in zip(ids, ids[1:]):
            ra, rb = _record(env, a), _record(env, b)
            gaps.append(rb.started - ra.ended)
        env.finish()
    finally:
        env.close()
    target = jobs + 1.0
    gaps.sort()
    report.figures.append(Figure("o", f"lock chain of {jobs} one-second jobs / {target:g} s", wall / target,
                                 f"{wall:.2f} s from the first start to the last end; gaps p50 "
                                 f"{1000 * gaps[len(gaps) // 2]:.0f} ms, max {1000 * gaps[-1]:.0f} ms",
                                 "≤ 1×", wall <= target))


def bench_kill_settle(report: Report, rounds: int) -> None:
    env = ResEnv("n", **POLICY)
    took = []
    try:
        for i in range(rounds):
            env.start_serve()
            go = env.dir / f"go-n{i}"
            _, r = env.res("run", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--", PY, "-c", GATED, str(go))
            job_id = _job_id(_ok(r, "res run"))
            env.serve_proc.kill()  # SIGKILL, ours, by pid
            env.serve_proc.wait(10)
            env.serve_proc = None
            go.touch()
            exit_record = env.state / "logs" / f"{job_id}.exit.json"
            deadline = time.monotonic() + 30
            while not exit_record.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            env.start_serve()
            while (rec := _record(env, job_id)) is None or rec.phase.value != "done":
                if time.monotonic() - t0 > 120:
                    raise Broken(f"{job_id} not settled by a new serve in 120 s")
                time.sleep(0.01)
            took.append(time.monotonic() - t0)
            env.stop_serve()
        env.finish(stop=False)
    finally:
        env.close()
    p50 = median_ms(took)
    report.figures.append(Figure("n", "SIGKILL; new serve settles the ended job / 2 s", p50 / 2000,
                                 f"median {p50:.0f} ms (serve start included)", "≤ 1×", p50 <= 2000))
    report.raw.append(f"n  new serve started -> ended job settled     {spread(took, p90=True)}")
