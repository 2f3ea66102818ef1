"""The sweep that chooses res's capacity numbers (DESIGN §5.1, issue 36): `margin` (a book is the
learned peak × margin) and `cpu_overcommit` (the CPUs all running jobs may promise, × the CPUs agents
may use), measured on bench/crowd.py's crowd, not chosen by taste.

    python3 bench/crowd_sweep.py [--mixes cpu,memory,mixed] [--seeds 23,24,25]
                                 [--margins 1.0,1.1,1.25] [--overcommits 1,1.5,2,3] [--json FILE]

For each mix and seed (one seeded workload each): the memory-blind slots (slots-2, slots-3: what
people use instead, run once, they do not depend on res's numbers), then the `res` arm (honest sizes:
`res run --wait --queue --mem <true peak × 1.25> …`) once per (margin, cpu_overcommit), each with a
fresh state directory (so the first runs of each command are booked at their caps and the later
ones from what the earlier ones used, as on a real workstation), the rest of the policy shipped.

Per run: makespan, ÷ the lower bound, ÷ the best slot count that lost nothing in the same seed
(the target: ≤ 0.95), kernel OOM kills, jobs failed, res's own stops and the work they lost (CPU-
seconds of the stopped attempts ÷ all the jobs'), the owner's probe p99 ÷ idle. Then, per setting,
over every seed and mix: the mean and worst ratio to the best slots, OOM kills, the most work lost.
The pick: of the settings with no kernel OOM kill, no failed job and at most 2 % work lost in every
run, the one with the lowest mean ratio to the best slots over all runs (ties: the smaller numbers,
the safer side). The JSON is written after every run, so a sweep cut short keeps what it measured.

Needs a systemd user manager (as bench/crowd.py). Every figure is a ratio measured in the same run
on the same machine; the owner's idle probe is measured once per mix.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .armrun import ArmRun
from .machine import JOB, PY, REPO, STARTED, Probe, check_cap, systemctl
from .measures import pct
from .workload import FULL, MIXES, SMOKE, SMOKE_TESTS, TESTS, lower_bound, measure_alone, setup_suites, workload

SLOTS = ("slots-2", "slots-3")
TARGET = 0.95  # makespan ÷ the best slot count that lost nothing (issue 36)
LOST_MAX_PCT = 2.0


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"crowd_sweep: {text!r}: numbers separated by commas") from None


def setting_name(margin: float, over: float) -> str:
    return f"margin {margin:g} × cpus {over:g}"


def cell(run: dict) -> tuple:
    """What one run measured: (mix, seed, arm, setting); a resumed sweep skips the cells it has."""
    return (run["mix"], run["seed"], run["arm"], run.get("setting"))


def prior_runs(path: Path, agents: int, mem_gb: float) -> list[dict]:
    """The runs an earlier sweep wrote to `path`, if it measured the same crowd (agents, W); else none."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise SystemExit(f"crowd_sweep: --resume: {path}: {e}") from None
    if doc.get("agents") != agents or doc.get("mem_gb") != mem_gb:
        raise SystemExit(f"crowd_sweep: --resume: {path} measured {doc.get('agents')} agents on {doc.get('mem_gb')} GB, "
                         f"not {agents} on {mem_gb:g} GB")
    return list(doc.get("runs", []))


def hold(pause_file: Path | None, log) -> None:
    """Wait while the pause file exists: other work on the machine would be measured as the crowd's."""
    if pause_file is None or not pause_file.exists():
        return
    log(f"   paused: {pause_file} exists")
    while pause_file.exists():
        time.sleep(2)
    log("   resumed")


def best_slots(rows: list[dict]) -> dict | None:
    """The fastest slot arm that lost nothing (no OOM kill, no failed job), or None."""
    clean = [r for r in rows if r["arm"] in SLOTS and r["oom_killed"] == 0 and r["failed"] == 0]
    return min(clean, key=lambda r: r["makespan_s"], default=None)


def summary(runs: list[dict]) -> list[dict]:
    """Per setting, over every (mix, seed) it ran: the ratio to the best slots (mean, worst, by mix),
    ÷bound, kernel OOM kills, failed jobs, res's stops, the most work lost, the probe."""
    out = []
    for name in dict.fromkeys(r["setting"] for r in runs if r.get("setting")):
        mine = [r for r in runs if r.get("setting") == name]
        ratios = [r["vs_slots"] for r in mine if r.get("vs_slots") is not None]
        by_mix = {}
        for mix in dict.fromkeys(r["mix"] for r in mine):
            xs = [r["vs_slots"] for r in mine if r["mix"] == mix and r.get("vs_slots") is not None]
            by_mix[mix] = sum(xs) / len(xs) if xs else None
        lost = [r["lost_pct"] for r in mine if r.get("lost_pct") is not None]
        probe = [r["probe_ratio"] for r in mine if r.get("probe_ratio") is not None]
        out.append(dict(setting=name, margin=mine[0]["margin"], cpu_overcommit=mine[0]["cpu_overcommit"], runs=len(mine),
                        vs_slots_mean=sum(ratios) / len(ratios) if ratios else None, vs_slots_worst=max(ratios, default=None),
                        vs_slots_by_mix=by_mix, bound_mean=sum(r["bound_ratio"] for r in mine) / len(mine),
                        oom=sum(r["oom_killed"] for r in mine), failed=sum(r["failed"] for r in mine),
                        stops=sum(r["res_stops"] or 0 for r in mine), lost_max_pct=max(lost, default=None),
                        probe_mean=sum(probe) / len(probe) if probe else None))
    return out


def pick(rows: list[dict]) -> dict | None:
    """The setting the sweep ships (module docstring), or None when none is safe."""
    safe = [r for r in rows if r["oom"] == 0 and r["failed"] == 0 and (r["lost_max_pct"] or 0) <= LOST_MAX_PCT
            and r["vs_slots_mean"] is not None]
    return min(safe, key=lambda r: (round(r["vs_slots_mean"], 3), r["margin"], r["cpu_overcommit"]), default=None)


def summary_table(rows: list[dict], mixes: list[str]) -> str:
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)
    head = f"{'setting':<24} {'runs':>4} {'÷slots mean':>11} {'worst':>6} " + " ".join(f"{m:>7}" for m in mixes) + \
        f" {'÷bound':>7} {'OOM':>4} {'failed':>6} {'stops':>5} {'lost % max':>10} {'p99÷idle':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['setting']:<24} {r['runs']:>4} {f(r['vs_slots_mean'], '.3f'):>11} {f(r['vs_slots_worst'], '.2f'):>6} "
                     + " ".join(f"{f(r['vs_slots_by_mix'].get(m), '.3f'):>7}" for m in mixes)
                     + f" {r['bound_mean']:>7.2f} {r['oom']:>4} {r['failed']:>6} {r['stops']:>5} "
                       f"{f(r['lost_max_pct'], '.2f'):>10} {f(r['probe_mean'], '.2f'):>8}")
    return "\n".join(lines)


def markdown_table(rows: list[dict], mixes: list[str]) -> str:
    """The summary as docs/crowd.md shows it: one row per setting, the pick's row in bold."""
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)
    chosen = pick(rows)
    head = ["setting", "runs", "÷ best slots, mean", "worst", *[f"{m}" for m in mixes], "÷ bound", "OOM kills",
            "failed", "res stops", "lost % (max)", "probe p99 ÷ idle"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["setting"], str(r["runs"]), f(r["vs_slots_mean"], ".3f"), f(r["vs_slots_worst"], ".2f"),
                 *[f(r["vs_slots_by_mix"].get(m), ".3f") for m in mixes], f"{r['bound_mean']:.2f}", str(r["oom"]),
                 str(r["failed"]), str(r["stops"]), f(r["lost_max_pct"], ".2f"), f(r["probe_mean"], ".2f")]
        if chosen is not None and r["setting"] == chosen["setting"]:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(path: Path) -> int:
    """`--report`: the table of a sweep written by --json (finished or cut short), running nothing."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"crowd_sweep: --report: {path}: {e}") from None
    runs = doc.get("runs") or []
    rows = summary(runs)
    mixes = list(dict.fromkeys(r["mix"] for r in runs))
    cells = {(r["mix"], r["seed"]) for r in runs}
    print(f"{len(runs)} runs over {len(cells)} (mix, seed) cells of {len(doc.get('mixes', []))} × "
          f"{len(doc.get('seeds', []))}; W = {doc.get('mem_gb')} GB, {doc.get('agents')} agents, {doc.get('cores')} cores\n")
    print(markdown_table(rows, mixes))
    chosen = pick(rows)
    print("\npick: " + (f"margin = {chosen['margin']:g}, cpu_overcommit = {chosen['cpu_overcommit']:g}" if chosen
                        else "none is safe"))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="sweep res's margin and cpu_overcommit on the crowd (issue 36)")
    ap.add_argument("--mixes", default="cpu,memory,mixed")
    ap.add_argument("--seeds", default="23,24,25")
    ap.add_argument("--margins", default="1.0,1.1,1.25")
    ap.add_argument("--overcommits", default="1,1.5,2,3")
    ap.add_argument("--agents", type=int, default=FULL["agents"])
    ap.add_argument("--smoke", action="store_true", help="the smoke's crowd (2 agents, 1 GB): to try the sweep itself")
    ap.add_argument("--json", default="crowd-sweep.json", help="every run's figures, rewritten after each run")
    ap.add_argument("--pause-file", type=Path, help="while this file exists, wait before the next run starts "
                    "(the machine lent to other work between runs, never during one)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in --json and measure only the (mix, seed, arm) cells it lacks")
    ap.add_argument("--report", type=Path, metavar="JSON",
                    help="print the table (markdown, as docs/crowd.md shows it) of a sweep written by --json; run nothing")
    a = ap.parse_args(argv)
    if a.report is not None:
        return report(a.report)
    mixes = [m.strip() for m in a.mixes.split(",") if m.strip()]
    for m in mixes:
        if m not in MIXES:
            raise SystemExit(f"crowd_sweep: unknown mix {m!r} (known: {', '.join(sorted(MIXES))})")
    seeds = [int(s) for s in _floats(a.seeds)]
    settings = [(m, o) for m in _floats(a.margins) for o in _floats(a.overcommits)]
    if not (os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get("XDG_RUNTIME_DIR")) or \
            systemctl("is-system-running").stdout.strip() not in ("running", "degraded"):
        print("crowd_sweep: no systemd user manager reachable (DBUS_SESSION_BUS_ADDRESS): nothing measured", file=sys.stderr)
        return 1
    sys.path.insert(0, str(REPO))

    def on_term(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    size = dict(SMOKE if a.smoke else FULL)
    agents = 2 if a.smoke else a.agents
    mem_gb = size["mem_gb"]
    cores = len(os.sched_getaffinity(0))
    workdir = Path(tempfile.mkdtemp(prefix="res-crowd-sweep-"))
    runs: list[dict] = prior_runs(Path(a.json), agents, mem_gb) if a.resume else []
    done = {cell(r) for r in runs}
    doc = dict(mixes=mixes, seeds=seeds, settings=[dict(margin=m, cpu_overcommit=o) for m, o in settings],
               agents=agents, mem_gb=mem_gb, cores=cores, runs=runs)
    started = time.monotonic()
    log = lambda m: print(m, flush=True)  # noqa: E731

    def save():
        doc["summary"] = summary(runs)
        doc["pick"] = pick(doc["summary"])
        Path(a.json).write_text(json.dumps(doc, indent=1))

    try:
        log(f"crowd_sweep: {len(mixes)} mixes × {len(seeds)} seeds × ({len(SLOTS)} slot arms + {len(settings)} "
            f"settings of res); W = {mem_gb:g} GB, {agents} agents, {cores} cores; load {os.getloadavg()[0]:.2f}")
        log("   " + check_cap(f"cw{os.urandom(3).hex()}", mem_gb))
        suites = setup_suites(SMOKE_TESTS if a.smoke else TESTS, log)
        base = measure_alone([PY, JOB, "build", os.devnull, "0", "0.05"])["peak_mb"]
        idle: dict[str, float] = {}
        for mix in mixes:  # the owner's probe on the idle machine, once per mix, before any crowd
            probe = Probe(workdir / f"probe-idle-{mix}.txt")
            time.sleep(size["idle_s"])
            idle_ms = probe.stop()
            idle[mix] = pct(idle_ms, 0.99)
            log(f"{mix}: the owner's probe, idle: p99 {idle[mix]:.1f} ms (n={len(idle_ms)})")
        # seed-major: a sweep cut short has every mix measured on its first seeds
        for seed in seeds:
            for mix in mixes:
                idle_p99 = idle[mix]
                plan = workload(mix, agents, size, suites, seed, base)
                lb = lower_bound(plan, mem_gb, cores)
                here: list[dict] = [r for r in runs if r["mix"] == mix and r["seed"] == seed]

                def record(row: dict, **more) -> dict:
                    ratio = row["probe_p99_ms"] / idle_p99 if row["probe_p99_ms"] and idle_p99 else None
                    out = dict(mix=mix, seed=seed, arm=row["arm"], makespan_s=row["makespan_s"],
                               bound_ratio=row["makespan_s"] / lb["bound"], oom_killed=row["oom_killed"],
                               failed=row["failed"], res_stops=row.get("res_stops"), lost_pct=row.get("lost_pct"),
                               probe_ratio=ratio, wait_p50_s=row["wait_p50_s"], idle_cpu_waiting_s=row.get("idle_cpu_waiting_s"),
                               errors=row["errors"][:5], **more)
                    here.append(out)
                    runs.append(out)
                    save()
                    return out

                for arm in SLOTS:
                    if (mix, seed, arm, None) in done:
                        continue
                    hold(a.pause_file, log)
                    t = time.monotonic()
                    r = record(ArmRun(arm, plan, mem_gb, workdir / f"{mix}-{seed}").go())
                    log(f"   {mix} seed {seed} {arm}: {r['makespan_s']:.1f} s ({r['bound_ratio']:.2f}× bound), "
                        f"{r['oom_killed']} OOM, {r['failed']} failed ({time.monotonic() - t:.0f} s)")
                slots = best_slots(here)
                for margin, over in settings:
                    if (mix, seed, "res", setting_name(margin, over)) in done:
                        continue
                    hold(a.pause_file, log)
                    t = time.monotonic()
                    env = {"RES_MARGIN": f"{margin:g}", "RES_CPU_OVERCOMMIT": f"{over:g}"}
                    row = ArmRun("res", plan, mem_gb, workdir / f"{mix}-{seed}-{margin:g}-{over:g}", res_env=env).go()
                    vs = row["makespan_s"] / slots["makespan_s"] if slots else None
                    r = record(row, setting=setting_name(margin, over), margin=margin, cpu_overcommit=over,
                               vs_slots=vs, best_slots=slots["arm"] if slots else None)
                    log(f"   {mix} seed {seed} res {r['setting']}: {r['makespan_s']:.1f} s, "
                        f"{'—' if vs is None else f'{vs:.2f}×'} {r['best_slots'] or 'no lossless slots'}, "
                        f"{r['oom_killed']} OOM, {r['failed']} failed, {r['res_stops']} stops, "
                        f"{(r['lost_pct'] or 0):.2f} % lost ({time.monotonic() - t:.0f} s)")
                    for e in r["errors"]:
                        log(f"      error: {e}")
        save()
        print()
        print(summary_table(doc["summary"], mixes))
        chosen = doc["pick"]
        print()
        print(f"pick (no OOM kill, no failed job, ≤ {LOST_MAX_PCT:g} % lost in every run; the lowest mean ÷ the best "
              f"lossless slots): " + (f"margin = {chosen['margin']:g}, cpu_overcommit = {chosen['cpu_overcommit']:g} "
                                     f"({chosen['vs_slots_mean']:.3f}× the best slots on average)" if chosen else "none is safe"))
        print(f"{len(runs)} runs in {time.monotonic() - started:.0f} s; every figure in {a.json}")
        return 0
    except KeyboardInterrupt:
        print("\ncrowd_sweep: interrupted; what was measured is in " + a.json, file=sys.stderr)
        return 130
    finally:
        STARTED.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
