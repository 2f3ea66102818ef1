"""Concurrency: 16 processes call `res run --queue` at once, with memory for only a few.

Sixteen real `res run` subprocesses are started together (a tight loop of Popen: each spends far longer
importing than the loop takes, so they all reach the writer and the reconcile lock at the same time).
Each asks for X GB; the user's reserve is set from /proc/meminfo so that the agent budget is 3.5 X:
three fit at once, and the half X to spare keeps the count the same if the machine's MemAvailable moves
a little while the test runs. `sleep` uses next to no memory, so the planner counts each running job's
whole reservation against the budget.

Checked: 16 entries with the ids r-1..r-16, none lost (every process printed `started` or `queued`
with its id; queue.toml and state.db agree), and at no moment is the sum of the reservations of
starting/running jobs above the budget. That is checked three ways while `res reconcile` drives the
passes: state.db sampled read-only in a thread, every pass's published budget (what was left after
the holders, from the planner's own snapshot) never below zero, and afterwards the reservations'
intervals (from the pass that started each job to the pass that settled it) never more than three
deep. No assertion is about wall-clock time (the deadline
only bounds a hang)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from urllib.parse import quote

import pytest

PY = sys.executable
N_PROCS = 16
FIT = 3  # jobs that fit at once
SLEEP_S = 2
HEADROOM_GB = 1.0
HOLDING = ("starting", "running")


def meminfo_gb(key: str) -> float:
    """As the planner reads it (reconciler/loop/world.py): kB / 1024², rounded to 3 places."""
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k == key:
                return round(int(rest.split()[0]) / (1024 * 1024), 3)
    raise KeyError(key)


def res_cmd(*args: str) -> list[str]:
    return [PY, "-m", "reconciler.cli", *args]


class Sampler(threading.Thread):
    """Reads state.db read-only (as `res status` does) as often as it can while the test runs."""

    def __init__(self, db: Path):
        super().__init__(daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.samples = 0
        self.max_sum_gb = 0.0
        self.max_count = 0
        self.worst: list[tuple[str, float]] = []
        self.passes: dict[float, float] = {}  # each pass's `at` -> the budget it published
        self.errors: list[str] = []

    def run(self) -> None:
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    if not (self.db.exists() and Path(str(self.db) + "-shm").exists()):
                        time.sleep(0.005)
                        continue
                    conn = sqlite3.connect(f"file:{quote(str(self.db))}?mode=ro", uri=True, timeout=5,
                                           isolation_level=None)
                conn.execute("BEGIN")  # one consistent view of both tables
                rows = conn.execute("SELECT id, record FROM jobs WHERE phase IN (?, ?)", HOLDING).fetchall()
                tick = conn.execute("SELECT value FROM meta WHERE key = 'last_tick'").fetchone()
                conn.execute("COMMIT")
            except sqlite3.OperationalError as e:  # the schema not there yet, or a busy moment
                if conn is not None:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if "no such table" not in str(e) and "locked" not in str(e):
                    self.errors.append(str(e))
                time.sleep(0.005)
                continue
            held = [(job_id, json.loads(raw)["request"]["mem_gb"]) for job_id, raw in rows]
            total = sum(gb for _, gb in held)
            self.samples += 1
            if total > self.max_sum_gb:
                self.max_sum_gb, self.worst = total, held
            self.max_count = max(self.max_count, len(held))
            if tick is not None:
                t = json.loads(tick[0])
                self.passes[t["at"]] = t["budget_mem_gb"]
            time.sleep(0.005)
        if conn is not None:
            conn.close()


def job_ids_in_queue(queue: Path) -> tuple[list[str], int]:
    data = tomllib.loads(queue.read_text())
    return [e["id"] for e in data.get("job", [])], data.get("next_id", 1)


def records(db: Path) -> dict[str, dict]:
    conn = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=5)
    try:
        return {job_id: json.loads(raw) for job_id, raw in conn.execute("SELECT id, record FROM jobs")}
    finally:
        conn.close()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end at the same instant as a start does not overlap)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    depth = best = 0
    for _, d in events:
        depth += d
        best = max(best, depth)
    return best


def stop_leftovers(env: dict, prefix: str, slices: list[str]) -> list[str]:
    """Stop any unit of ours still loaded and our slices; return the units that were still there."""
    r = subprocess.run(["systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "--no-pager",
                        f"{prefix}-*"], capture_output=True, text=True, env=env, timeout=30)
    left = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    if left:
        subprocess.run(["systemctl", "--user", "stop", *left], env=env, capture_output=True, timeout=120)
        subprocess.run(["systemctl", "--user", "reset-failed", *left], env=env, capture_output=True, timeout=30)
    subprocess.run(["systemctl", "--user", "stop", *slices], env=env, capture_output=True, timeout=60)
    return left


@pytest.mark.systemd
def test_sixteen_queued_runs_at_once(user_manager, res_env, monkeypatch):
    # ------------------------------------------------ a budget with room for FIT jobs of X GB
    avail = meminfo_gb("MemAvailable")
    usable = avail - HEADROOM_GB - 1.0  # keep at least 1 GB as the user's reserve
    if usable < 1.0:
        pytest.skip(f"too little memory available ({avail:.1f} GB) to shape a budget")
    x_mb = int(min(4.0, usable / (FIT + 0.5)) * 1024)  # whole MB, so --mem is exact
    x_gb = x_mb / 1024
    reserve = avail - HEADROOM_GB - (FIT + 0.5) * x_gb
    monkeypatch.setenv("RES_USER_RESERVE_GB", f"{reserve:.3f}")
    monkeypatch.setenv("RES_SMALL_HEADROOM_GB", f"{HEADROOM_GB:g}")
    monkeypatch.setenv("RES_MAX_STARTS_PER_TICK", "4")  # more than FIT: memory is what binds
    from reconciler.config.policy import load_policy

    policy = load_policy()
    # reconciler/core/capacity.py: MemAvailable − reserve − headroom (cpus: 16 × 0.1 never binds)
    budget = avail - policy.user_reserve_gb - policy.small_headroom_gb
    assert FIT * x_gb <= budget < (FIT + 1) * x_gb

    env = dict(os.environ)
    state: Path = res_env["state"]
    work = res_env["tmp"] / "work"
    work.mkdir()
    db, queue = state / "state.db", state / "desired" / "queue.toml"
    prefix = env["RES_UNIT_PREFIX"]
    slices = [env["RES_JOBS_SLICE"], env["RES_AGENTS_SLICE"]]

    # Each job runs a program of its own name (sleep under another name): no two share a command
    # fingerprint, so none is booked from the others' runs (DESIGN §5.1) and each counts at its --mem,
    # the ledger's bound this test holds admission to.
    sleep = shutil.which("sleep")
    naps = []
    for i in range(N_PROCS):
        naps.append(work / f"nap{chr(ord('a') + i)}")
        naps[-1].symlink_to(sleep)
    sampler = Sampler(db)
    sampler.start()
    procs: list[subprocess.Popen] = []
    try:
        # ------------------------------------------------ 16 at once
        for i in range(N_PROCS):
            procs.append(subprocess.Popen(
                res_cmd("run", "--queue", "--mem", f"{x_mb}M", "--cpus", "0.1", "--for", "1m",
                        "--title", f"concurrent {i}", "--", str(naps[i]), str(SLEEP_S)),
                cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        answers = [p.communicate(timeout=120) + (p.returncode,) for p in procs]

        ids = []
        for out, err, code in answers:
            # (done: on a slow machine, the guest tier's, the 4 s job had ended by the time its answer was said)
            m = re.fullmatch(r"(r-\d+) (started|queued|done)\b.*", out.strip())
            assert code == 0 and m and not err, f"rc={code} stdout={out!r} stderr={err!r}"
            ids.append(m.group(1))
        assert sorted(ids, key=lambda s: int(s[2:])) == [f"r-{n}" for n in range(1, N_PROCS + 1)]  # distinct, none skipped

        # queue.toml and state.db agree: every entry is recorded; what left the file has finished
        in_file, next_id = job_ids_in_queue(queue)
        recs = records(db)
        assert next_id == N_PROCS + 1
        assert set(recs) == set(ids)
        assert set(in_file) <= set(recs)
        for job_id in set(recs) - set(in_file):
            assert recs[job_id]["phase"] == "done", recs[job_id]

        # ------------------------------------------------ passes until every job has run
        deadline = time.monotonic() + 180  # only bounds a hang
        while True:
            r = subprocess.run(res_cmd("reconcile"), cwd=work, env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            recs = records(db)
            if all(rec["phase"] == "done" for rec in recs.values()):
                break
            assert time.monotonic() < deadline, {k: v["phase"] for k, v in recs.items()}
            time.sleep(0.2)
        r = subprocess.run(res_cmd("reconcile"), cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr  # retires the last finished entries from queue.toml
    finally:
        sampler.stop.set()
        sampler.join(10)
        for p in procs:  # ours, by pid
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(15)
        left = stop_leftovers(env, prefix, slices)

    # ------------------------------------------------ none lost, all ran
    recs = records(db)
    assert sorted(recs) == sorted(ids)
    for rec in recs.values():
        assert rec["phase"] == "done" and rec["rc"] == 0 and rec["why"] == "exited 0", rec
        assert rec["request"]["mem_gb"] == pytest.approx(x_gb, abs=1e-6)  # (kept to 6 decimals: ~1 KB)
    in_file, next_id = job_ids_in_queue(queue)
    assert in_file == [] and next_id == N_PROCS + 1
    assert left == [], f"units left behind: {left}"

    # ------------------------------------------------ never over the budget
    assert not sampler.errors, sampler.errors
    assert sampler.samples > 0
    assert sampler.max_sum_gb <= budget + 1e-6, (
        f"{sampler.max_sum_gb:.3f} GB reserved by {sampler.worst} with a budget of {budget:.3f} GB")
    assert 2 <= sampler.max_count <= FIT, sampler.max_count  # the budget was reached, never passed
    assert sampler.passes and min(sampler.passes.values()) >= -1e-6, (
        f"a pass found its holders over the budget: {min(sampler.passes.values()):.3f} GB left")
    # Every reservation in pass time: from the pass that started the job (`started`) to the pass that
    # settled it (`updated` of the settled record). (Not the unit's exit time `ended`: the exit is
    # stamped by the unit itself, and may fall after the `now` of the very pass that settles it.)
    held = [(rec["started"], rec["updated"]) for rec in recs.values()]
    assert max_overlap(held) <= FIT, sorted(held)
