"""Benchmark c: a crowd of agents adding requests at once, through the desired Writer's file lock
(no loop running) and through a running `res serve` (group commit).

Through the file lock: P processes (crowd_worker.py writer) import once, wait together for one byte on
stdin, then each adds R jobs with `Writer(paths).add(fields, "job")`. Measured: the wall time from the start signal to the
last add, and the same number of adds made by one writer alone (the ratio is what the contention for
the writer's lock costs). Checked: no entry lost (every id handed out is in queue.toml and nothing
else is), no id handed out twice, ids r-1..r-N without a gap, `next_id` past them; and no overbooking
when one plan is made over the whole written queue (the jobs it starts fit in the budget). The p99
wait of one add says whether the lock is fair (a waiter is not passed over by later ones).

Through the loop: P processes (crowd_worker.py loop) each send R `res run --queue` requests over the
socket, one after another, every one answered only once it is written and decided; all queue behind
one running job's lock. Checked: every id answered is in queue.toml and queued in state.db, none
twice. Target: ≥ 1,000 requests/s."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

from common import PY, REPO, Broken, Figure, Report, median_ms

WORKER = Path(__file__).resolve().parent / "crowd_worker.py"
LOOP_TARGET = 1000  # requests/s through a running loop (issue 12)


def run_writers(state: Path, procs: int, per: int, mode: str = "writer", env: dict | None = None) -> tuple[float, list[dict]]:
    """(wall seconds from the start signal to the last add, each writer's report). `mode` "writer":
    `state` is the state directory; "loop": the loop's socket (crowd_worker.py)."""
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    workers = [subprocess.Popen([PY, str(WORKER), mode, str(state), str(per), f"w{k}"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
               for k in range(procs)]
    try:
        for w in workers:  # all imported and waiting
            line = w.stdout.readline()
            if line.strip() != b"ready":
                raise Broken(f"writer pid {w.pid} did not start: {line!r} {w.stderr.read().decode().strip()}")
        released = time.monotonic()
        for w in workers:
            w.stdin.write(b"g")
            w.stdin.flush()
        reports = []
        for w in workers:
            out, err = w.communicate(timeout=600)
            if w.returncode != 0:
                raise Broken(f"writer pid {w.pid} exited {w.returncode}: {err.decode().strip()[-500:]}")
            reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    finally:
        for w in workers:  # ours, by pid
            if w.poll() is None:
                w.kill()
                w.wait()
    return max(r["end"] for r in reports) - released, reports


def overbooked_gb(state: Path) -> tuple[float, int, float]:
    """One plan over the whole written queue on a literal machine with a 20 GB budget and no start
    cap: (GB started beyond the budget, jobs started, the budget)."""
    from reconciler.desired.reader import read_desired
    from reconciler.core.models import World
    from reconciler.config.paths import Paths
    from reconciler.core.plan import plan
    from reconciler.config.policy import load_policy

    os.environ.setdefault("RES_POLICY_FILE", "/nonexistent/res-bench-policy.toml")
    policy = load_policy(user_reserve_gb=6, user_reserve_cpus=0, small_headroom_gb=2, max_starts_per_tick=10_000)  # every entry may start in the one plan
    desired, _ = read_desired(Paths(state))
    if not desired.queue_ok:
        raise Broken(f"queue.toml does not read back: {desired.queue_error}")
    world = World(mem_total_gb=64, mem_available_gb=28, nproc=100_000)
    p = plan(desired, {}, world, time.time(), policy)
    started = p.of("start")
    return max(0.0, sum(a.mem_gb for a in started) - p.budget_mem_gb), len(started), p.budget_mem_gb


def bench_writers(report: Report, procs: int, per: int) -> None:
    total = procs * per
    base = Path(tempfile.mkdtemp(prefix="res-bench-c-"))
    try:
        alone_wall, _ = run_writers(base / "alone", 1, total)
        wall, reports = run_writers(base / "many", procs, per)

        errors = [r["error"] for r in reports if r["error"]]
        handed = [i for r in reports for i in r["ids"]]
        data = tomllib.loads((base / "many" / "desired" / "queue.toml").read_text())
        in_file = [e["id"] for e in data.get("job", [])]
        lost = sorted(set(handed) - set(in_file))
        unknown = sorted(set(in_file) - set(handed))
        dup_handed = len(handed) - len(set(handed))
        dup_file = len(in_file) - len(set(in_file))
        expected = {f"r-{n}" for n in range(1, total + 1)}
        over, started, budget = overbooked_gb(base / "many")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    each = sorted(t for r in reports for t in r["each"])
    p99 = each[min(len(each) - 1, int(len(each) * 0.99))] * 1000
    report.figures.append(Figure(
        "c", f"{procs} writers × {per} at once / one writer alone", wall / alone_wall,
        f"{wall:.2f} s vs {alone_wall:.2f} s for {total} adds; p99 wait {p99:.0f} ms, max {each[-1] * 1000:.0f} ms; "
        f"lost {len(lost)}, duplicate ids {dup_handed + dup_file}, overbooked {over:g} GB"))
    report.raw += [
        f"c  {procs} writers × {per} requests: wall {wall:.3f} s ({total / wall:.0f} adds/s); one writer alone: "
        f"{alone_wall:.3f} s ({total / alone_wall:.0f} adds/s)",
        f"c  one add, under contention: median {median_ms(each):.1f} ms, p99 {p99:.1f} ms, "
        f"max {each[-1] * 1000:.1f} ms",
        f"c  handed out {len(handed)}, in queue.toml {len(in_file)}, lost {len(lost)}, not handed out {len(unknown)}, "
        f"duplicate ids {dup_handed + dup_file}, next_id {data.get('next_id')}",
        f"c  one plan over the {len(in_file)} written entries: started {started}, budget {budget:g} GB, "
        f"overbooked {over:g} GB",
    ]
    if errors:
        report.broken.append(f"c: {len(errors)} writer(s) failed: {errors[0]}")
    if lost or unknown:
        report.broken.append(f"c: lost entries {lost[:5]}, entries nobody was given {unknown[:5]}")
    if dup_handed or dup_file:
        report.broken.append(f"c: {dup_handed} ids handed out twice, {dup_file} duplicate ids in queue.toml")
    if set(handed) != expected or data.get("next_id") != total + 1:
        report.broken.append(f"c: ids are not r-1..r-{total} with next_id {total + 1} (next_id {data.get('next_id')})")
    if over > 1e-9:
        report.broken.append(f"c: one plan over the written queue started {over:g} GB beyond the budget")


def bench_loop_writers(report: Report, procs: int, per: int) -> None:
    """The same crowd through a running `res serve`: every request a `res run --queue` that queues
    behind one running job's lock (so none starts a unit)."""
    import sqlite3

    from common import ResEnv
    from reconciler.loop.client import ask

    total = procs * per
    env = ResEnv("c")
    try:
        env.start_serve()
        sock = env.state / "serve.sock"
        holder = ask(sock, {"op": "submit", "kind": "job", "fields": dict(
            title="bench c lock holder", project="bench", mem_gb=0.1, cpus=0.1, est_s=600, created=time.time(),
            lock="bench-c@/res-bench", cmd=["/bin/sleep", "600"], cwd=str(env.work), env={"PATH": "/usr/bin:/bin"})}, 60)
        if (holder.get("data") or {}).get("state") != "running":
            raise Broken(f"c: the lock holder did not start: {holder.get('line')}")
        wall, reports = run_writers(sock, procs, per, "loop", env.env)
        errors = [r["error"] for r in reports if r["error"]]
        handed = [i for r in reports for i in r["ids"]]
        data = tomllib.loads((env.state / "desired" / "queue.toml").read_text())
        in_file = {e["id"] for e in data.get("job", [])} - {holder["data"]["id"]}
        with sqlite3.connect(f"file:{env.state / 'state.db'}?mode=ro", uri=True) as db:
            queued = {row[0] for row in db.execute("SELECT id FROM jobs WHERE phase = 'queued'")}
    finally:
        env.close()
    each = sorted(t for r in reports for t in r["each"])
    p99 = each[min(len(each) - 1, int(len(each) * 0.99))] * 1000 if each else float("nan")
    lost = sorted(set(handed) - in_file)
    not_queued = sorted(set(handed) - queued)
    dups = len(handed) - len(set(handed))
    rate = len(handed) / wall if wall > 0 else 0.0
    report.figures.append(Figure(
        "c", f"{procs} agents × {per} requests through the loop, requests/s / {LOOP_TARGET}", rate / LOOP_TARGET,
        f"{rate:.0f} requests/s ({len(handed)} in {wall:.2f} s); p99 {p99:.0f} ms; lost {len(lost)}, "
        f"duplicate ids {dups}", target="≥ 1×", met=rate >= LOOP_TARGET))
    report.raw += [
        f"c  through the loop: {procs} agents × {per} `res run --queue`: wall {wall:.3f} s, {rate:.0f} requests/s; "
        f"one request: median {median_ms(each):.1f} ms, p99 {p99:.1f} ms, max {each[-1] * 1000 if each else 0:.1f} ms",
        f"c  through the loop: answered {len(handed)}, in queue.toml {len(in_file)}, queued in state.db "
        f"{len(queued & set(handed))}, lost {len(lost)}, duplicate ids {dups}",
    ]
    if errors:
        report.broken.append(f"c (loop): {len(errors)} agent(s) failed: {errors[0]}")
    if len(handed) != total or lost or not_queued or dups:
        report.broken.append(f"c (loop): answered {len(handed)} of {total}; lost {lost[:5]}, not queued in state.db "
                             f"{not_queued[:5]}, {dups} duplicate ids")
