"""Benchmarks a and d: `res run` as a user runs it, on the real systemd user manager.

a. `res run --mem 100M --for 1m -- true` (fits, started) end to end, with `res serve` running and
   without it, against `systemd-run --user --collect -q true` and, for context, `python3 -c pass`.
   The four commands take turns in every round, so a busy moment of the machine costs them alike.
d. request-to-start latency with `res serve` running: from the moment `res run` is invoked to the
   moment systemd saw the unit active (its ActiveEnterTimestampMonotonic, on the same CLOCK_MONOTONIC
   as time.monotonic()).
"""
from __future__ import annotations

import os
import signal
import re
import subprocess
import time

from common import PY, Broken, Figure, Report, ResEnv, median_ms, spread, timed

# Agents get nearly the whole machine here (the figures are about speed, not about the rules), and
# CPUs are not reserved: a small CI machine must still start these jobs.
POLICY = dict(user_reserve_gb=1, small_headroom_gb=0.5, user_reserve_cpus=0, game_reserve_cpus=0)
STARTED = re.compile(r"(r-\d+) started; ")


def _started(r: subprocess.CompletedProcess, what: str) -> str:
    m = STARTED.match(r.stdout)
    if r.returncode != 0 or not m:
        raise Broken(f"{what}: exit {r.returncode}, stdout {r.stdout.strip()!r}, stderr {r.stderr.strip()!r}")
    return m.group(1)


def bench_run(report: Report, rounds: int) -> None:
    served, alone = ResEnv("as", **POLICY), ResEnv("an", **POLICY)
    try:
        served.start_serve()
        times: dict[str, list[float]] = {"systemd-run": [], "python": [], "python -S": [], "serve": [], "no serve": []}
        for i in range(rounds + 1):  # round 0 warms the caches and is not counted
            t, r = timed(["systemd-run", "--user", "--collect", "-q", "true"])
            if r.returncode != 0:
                raise Broken(f"systemd-run: exit {r.returncode}: {r.stderr.strip()}")
            t_py, _ = timed([PY, "-c", "pass"])
            t_pys, _ = timed([PY, "-S", "-c", "pass"])
            t_serve, r1 = served.res("run", "--mem", "100M", "--for", "1m", "--", "true")
            _started(r1, "res run (serve running)")
            t_alone, r2 = alone.res("run", "--mem", "100M", "--for", "1m", "--", "true")
            _started(r2, "res run (no serve)")
            if i:
                for key, value in (("systemd-run", t), ("python", t_py), ("python -S", t_pys),
                                   ("serve", t_serve), ("no serve", t_alone)):
                    times[key].append(value)
        served.finish()
        alone.finish()
    finally:
        served.close()
        alone.close()

    times["first"] = [_first_call() for _ in range(max(1, rounds // 4))]
    sysd, py = median_ms(times["systemd-run"]), median_ms(times["python"])
    serve, no_serve = median_ms(times["serve"]), median_ms(times["no serve"])
    first = median_ms(times["first"])
    report.figures += [
        Figure("a", "res run (first call, starts the loop) / systemd-run", first / sysd,
               f"{first:.0f} ms vs {sysd:.1f} ms", "≤ 8×", first / sysd <= 8),
        Figure("a", "res run (serve running) / systemd-run", serve / sysd,
               f"{serve:.0f} ms vs {sysd:.1f} ms", "≤ 10×", serve / sysd <= 10),
        Figure("a", "res run (no serve) / systemd-run", no_serve / sysd,
               f"{no_serve:.0f} ms vs {sysd:.1f} ms", "≤ 10×", no_serve / sysd <= 10),
        Figure("a", "res run (serve running) / python3 -c pass", serve / py, f"{serve:.0f} ms vs {py:.0f} ms"),
        Figure("a", "res run (no serve) / python3 -c pass", no_serve / py, f"{no_serve:.0f} ms vs {py:.0f} ms"),
        Figure("a", "python3 -c pass / systemd-run", py / sysd, f"{py:.0f} ms vs {sysd:.1f} ms"),
    ]
    report.raw += [
        f"a  systemd-run --user --collect -q true       {spread(times['systemd-run'])}",
        f"a  python3 -c pass ({PY})  {spread(times['python'])}",
        f"a  python3 -S -c pass (no site-packages)      {spread(times['python -S'])}",
        f"a  res run --mem 100M --for 1m -- true, serve {spread(times['serve'])}",
        f"a  the same, no serve (the CLI runs the pass) {spread(times['no serve'])}",
        f"a  the same, the first call (starts the loop) {spread(times['first'])}",
    ]


def _first_call() -> float:
    """`res run` in a state directory with no loop, loop_autostart on: the call that starts the loop
    (as a transient user unit) and is answered by it. The loop is stopped after, by its pid."""
    env = ResEnv("af", **POLICY)
    env.env["RES_LOOP_AUTOSTART"] = "true"
    try:
        t, r = env.res("run", "--mem", "100M", "--for", "1m", "--", "true")
        _started(r, "res run (first call)")
        if "started one" not in r.stderr:
            raise Broken(f"the first call did not start the loop: {r.stderr.strip()!r}")
        env.settle()
        pid = int((env.state / "serve.lock").read_text().split()[0])
        os.kill(pid, signal.SIGTERM)  # the loop that call started, by its pid
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        return t
    finally:
        env.close()


def bench_latency(report: Report, rounds: int) -> None:
    env = ResEnv("d", **POLICY)
    latency, answer, sysd = [], [], []
    try:
        env.start_serve()
        for i in range(rounds + 1):
            t, r = timed(["systemd-run", "--user", "--collect", "-q", "true"])
            if r.returncode != 0:
                raise Broken(f"systemd-run: exit {r.returncode}: {r.stderr.strip()}")
            t0 = time.monotonic()
            t_answer, r = env.res("run", "--mem", "100M", "--cpus", "0.1", "--for", "1m", "--", "sleep", "2")
            job_id = _started(r, "res run (serve running)")
            _, show = timed(["systemctl", "--user", "show", "--value", "-p", "ActiveEnterTimestampMonotonic",
                             env.unit(job_id)], env=env.env)
            active_us = int(show.stdout.strip() or 0)
            if active_us == 0:
                raise Broken(f"{env.unit(job_id)} was not seen active: {show.stdout.strip()!r} {show.stderr.strip()!r}")
            to_active = active_us / 1e6 - t0
            if not 0 < to_active <= t_answer + 0.05:
                raise Broken(f"{job_id}: active {to_active:.3f} s after the request, answered after {t_answer:.3f} s:"
                             " the clocks do not agree")
            if i:
                latency.append(to_active)
                answer.append(t_answer)
                sysd.append(t)
        env.finish()
    finally:
        env.close()

    lat, ans, base = median_ms(latency), median_ms(answer), median_ms(sysd)
    report.figures += [
        Figure("d", "request-to-start (serve running) / systemd-run", lat / base, f"{lat:.0f} ms vs {base:.1f} ms"),
        Figure("d", "request-to-answer (serve running) / 1 s", ans / 1000, f"{ans:.0f} ms",
               "≤ 1×", ans <= 1000),
    ]
    report.raw += [
        f"d  res run invoked -> unit active              {spread(latency)}",
        f"d  res run invoked -> answer printed           {spread(answer)}",
        f"d  after active, until the answer (median)     {median_ms([a - l for a, l in zip(answer, latency)]):.1f} ms",
    ]
