"""`python3 bench/crowd.py`'s command line: the options, the set-up (the cap checked, the suites, the
workload and its bounds, the owner's idle probe), every arm in turn, then the table, the lines under
it, --json and --plot; everything started stopped at the end, even on Ctrl-C. Imports every module of
the crowd but cli_arm and sweep (plot only when drawing)."""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .armrun import run_arm
from .arms import ARMS, DEFAULT_ARMS, learned_keys
from .machine import (JOB, PROBE_MB, PROBE_PERIOD, PY, REPO, STARTED, Probe, check_cap, cluster_refusal,
                      systemctl)
from .measures import pct
from .report import notes, table
from .workload import FULL, MARGIN, MIXES, SMOKE, SMOKE_TESTS, TESTS, lower_bound, measure_alone, setup_suites, workload


def shipped_auto_mem_gb() -> float:
    """The shipped policy's auto_mem_gb (policies/default.toml)."""
    import tomllib

    return float(tomllib.loads((REPO / "policies" / "default.toml").read_text())["auto_mem_gb"])


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
        from .plot import plot

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
            from .plot import plot

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
