"""The fault tier (DESIGN §5.4–5.5): real `res serve` processes killed for real by pid, real
units, the fake agent (tests/fake_agent.py) as the job.

Every case checks the final state (every job done, its rc right) and that the job's log was ingested
exactly once: `lines` in `res status --json` is the number of lines in logs/r-N.log, and the fake
agent's numbered events give input_tokens = k(k+1)/2, output_tokens = k for the k events it printed,
and iterations = 1 + its tool-result lines (a line counted twice or skipped shows in those sums),
and spend was added once (the
result's cost, else tokens × the claude-sonnet-4-5 rate of policies/pricing.toml).

Intervals are seconds here (lease 3 s, renew 1 s, sweep and tick 0.5 s). Nothing asserts on a tight
wall-clock figure: waits are polls with generous deadlines, and the takeover latencies are printed
(`pytest -s`) for the report.
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clihelp import FAKE, FAST, ME, PY, res, token_cost, wait_for  # noqa: F401

pytestmark = [pytest.mark.fault, pytest.mark.systemd]

HERE = Path(__file__).resolve().parents[1]  # tests/
LEASE_S, SWEEP_S = 3.0, 0.5




@pytest.fixture
def fres(res):
    res.env.update(FAST)
    return res


# ---------------------------------------------------------------- reconcilers as processes


class Loop:
    """A `res serve` (or one-shot `res reconcile`) subprocess of this test, its output in a file."""

    count = 0

    def __init__(self, res, *args: str, env: dict | None = None):
        Loop.count += 1
        self.res, self.args = res, args
        self.out = res.tmp / f"loop-{Loop.count}-{args[0]}.log"
        e = dict(res.env)
        e.update(env or {})
        with open(self.out, "w") as f:
            self.p = res.popen([PY, "-m", "reconciler.cli", *args], env=e, stdout=f, stderr=subprocess.STDOUT)
        self.pid = self.p.pid
        self.started = time.monotonic()

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL) -> bool:
        """Signal it by pid; True if it was still running to receive it."""
        if self.p.poll() is not None:
            return False
        self.p.send_signal(sig)
        return True

    def wait(self, timeout: float = 60) -> int:
        return self.p.wait(timeout)

    def text(self) -> str:
        return self.out.read_text()

    def serving(self) -> bool:
        """It answers on the socket as the state directory's loop."""
        from reconciler.loop.client import NoDaemon, ask

        try:
            return ask(self.res.state / "serve.sock", {"op": "ping"}, timeout=2)["line"] == f"pid {self.pid}"
        except (NoDaemon, OSError, ValueError):
            return False


def serve(res, *extra: str, env: dict | None = None, ready: bool = True) -> Loop:
    loop = Loop(res, "serve", *extra, env=env)
    if ready:
        wait_for(lambda: loop.serving() or not loop.alive(), f"res serve pid {loop.pid} answering", 30)
        assert loop.alive(), loop.text()
    return loop


def holder_pid(st: dict) -> int | None:
    return int(st["attached_by"].split("/")[1]) if st["attached_by"] else None


def jobs(res) -> dict[str, dict]:
    return {j["id"]: j for j in res.status_all()["jobs"]}


def agent(res, n: int, pace: float, *extra_args: str, mem: str = "100M", queue: bool = False,
          wrap: Path | None = None, gate: Path | None = None) -> str:
    """Start a fake-agent session; its id. `wrap`: the job first appends a line to this file (one
    line per start of its unit); `gate`: and then waits for this file to exist."""
    cmd = [PY, FAKE, str(n), "--pace", str(pace), *extra_args]
    if wrap is not None:
        cmd = ["sh", "-c", 'echo x >> "$0"; until [ -e "$1" ]; do sleep 0.05; done; shift; exec "$@"', str(wrap),
               str(gate or "/"), *cmd]
    extra = ("--agent", "claude") + (("--queue",) if queue else ())
    if queue:
        r = res.run_job(*cmd, mem=mem, extra=extra)
        m = re.match(r"(r-\d+) (started|queued)", r.out)
        assert r.code == 0 and m, str(r)
        return m.group(1)
    return res.started(*cmd, mem=mem, extra=extra)


def log_facts(res, job_id: str) -> tuple[int, int, int]:
    """(lines, bytes, k) of a job's log; k: the fake agent's events in it, checked to be 1..k in order."""
    data = (res.state / "logs" / f"{job_id}.log").read_bytes()
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    seqs = [json.loads(line)["seq"] for line in data.decode().splitlines()
            if line.startswith("{") and '"type": "assistant"' in line]
    assert seqs == list(range(1, len(seqs) + 1)), f"{job_id}: the log itself has a gap: {seqs}"
    return lines, len(data), len(seqs)


def tool_results(res, job_id: str) -> int:
    """The fake agent's tool-result lines in a job's log (whole lines only)."""
    text = (res.state / "logs" / f"{job_id}.log").read_bytes().decode()
    return sum(1 for line in text.split("\n")[:-1] if line.startswith('{"type": "user"'))


def ingested_once(res, job_id: str, st: dict | None = None, n: int | None = None, cost: float | None = None) -> dict:
    """The job's whole log was read into its digest exactly once, and its spend added once. `n`: the
    fake agent ran to the end (n events, and a result event when `cost` is given)."""
    st = st or res.status(job_id)
    lines, size, k = log_facts(res, job_id)
    if n is not None:
        assert k == n, f"{job_id}: {k} events in the log, expected {n}"
        assert lines == 1 + n + (n - 1) + n // 10 + (cost is not None), f"{job_id}: {lines} lines in the log"
    assert st["lines"] == lines, f"{job_id}: digest read {st['lines']} lines, the log has {lines}: {st}"
    assert st["log_offset"] == size, st
    calls = 1 + tool_results(res, job_id) if k else 0  # Claude Code's own count: a call, then one per tool result
    assert (st["input_tokens"], st["output_tokens"], st["iterations"]) == (k * (k + 1) // 2, k, calls), st
    want = cost if cost is not None else token_cost(k)
    assert abs(st["spend_usd"] - want) < 2e-6, f"{job_id}: spend {st['spend_usd']} != {want}"
    return st


def settled(res, st: dict, rc: int | None = 0) -> None:
    assert st["state"] == "done", st
    assert st["rc"] == rc, st
    assert st["attached_by"] is None and st["lease_until"] is None, st
    assert res.active(st["id"]) not in ("active", "activating", "deactivating")


def all_done(res, ids, limit_s: float = 90) -> dict[str, dict]:
    def done():
        js = jobs(res)
        return js if all(js[i]["state"] == "done" for i in ids) else None

    return wait_for(done, f"{', '.join(ids)} all done", limit_s, step=0.3)


def attached_by(res, ids, pids, what: str, limit_s: float = 30) -> float:
    """Poll until every job in `ids` is running and held by one of `pids`; seconds it took."""
    t0 = time.monotonic()

    def held():
        js = jobs(res)
        for i in ids:
            assert js[i]["state"] == "running", f"{i} ended before it was {what}: {js[i]}"
        return all(holder_pid(js[i]) in pids for i in ids)

    wait_for(held, what, limit_s, step=0.1)
    return time.monotonic() - t0


def streaming(res, ids, pid: int, lines: int = 20, limit_s: float = 30) -> None:
    """Every job is running, held by `pid`, and has at least `lines` lines ingested."""
    wait_for(lambda: all((j := jobs(res)[i])["state"] == "running" and holder_pid(j) == pid and j["lines"] >= lines
                         for i in ids), f"{ids} streaming under pid {pid}", limit_s, step=0.2)


# ---------------------------------------------------------------- 1. SIGKILL of the only reconciler


def test_sigkill_of_the_only_reconciler_new_one_reattaches_all(fres):
    res = fres
    a = serve(res)
    n = 400  # 20 s: still running when the new serve takes over
    ids = [agent(res, n, 0.05) for _ in range(4)]
    ids.append(agent(res, 60, 0.3, "--result", "success", "--cost", "0.4321"))  # a result event: its cost
    streaming(res, ids, a.pid, lines=10)
    t_kill = time.monotonic()
    assert a.kill()
    a.wait()
    b = serve(res)
    attached_by(res, ids, {b.pid}, f"re-attached by the new serve (pid {b.pid})")
    took = time.monotonic() - t_kill
    print(f"\n[1] SIGKILL -> all 5 re-attached by a new serve {took:.2f} s after the kill (lease {LEASE_S} + "
          f"sweep {SWEEP_S})")
    final = all_done(res, ids)
    for i in ids[:4]:
        settled(res, final[i])
        ingested_once(res, i, final[i], n=n)
    settled(res, final[ids[4]])
    st = ingested_once(res, ids[4], final[ids[4]], n=60, cost=0.4321)
    print(f"[1] per job: lines {final[ids[0]]['lines']}, input_tokens {final[ids[0]]['input_tokens']}, "
          f"spend {final[ids[0]]['spend_usd']}; result job spend {st['spend_usd']}")
    assert b.alive()


@pytest.mark.parametrize("after", ["a new serve", "res wait alone"])
def test_a_killed_loops_leases_are_void_at_once_on_its_host(fres, after):
    """A lease far longer than the test: only "its holder's process is gone" (DESIGN §5.4) lets the
    job be re-attached and settled, by a new loop or by `res wait`'s own passes."""
    res = fres
    res.env["RES_ATTACH_LEASE_S"] = "3600"
    a = serve(res)
    i = agent(res, 60, 0.05)  # about 3 s of output
    streaming(res, [i], a.pid, lines=5)
    assert a.kill()
    a.wait()
    b = serve(res) if after == "a new serve" else None
    w = res("wait", i, "--timeout", "5m")
    assert w.code == 0 and w.one_line().startswith(f"{i} done rc=0 "), str(w)
    st = res.status(i)
    settled(res, st)
    ingested_once(res, i, st, n=60)
    if b is not None:
        assert b.alive()


# ---------------------------------------------------------------- 2. three reconcilers


def test_three_reconcilers_the_holder_killed_another_takes_over(fres):
    res = fres
    a = serve(res)
    standbys = [serve(res, "--standby", ready=False) for _ in range(2)]
    n = 300
    ids = [agent(res, n, 0.05) for _ in range(3)]
    streaming(res, ids, a.pid)
    assert all(s.alive() and not s.serving() for s in standbys)  # standing by, holding nothing
    t_kill = time.monotonic()
    assert a.kill()
    a.wait()
    attached_by(res, ids, {s.pid for s in standbys}, "taken over by a standby")
    took = time.monotonic() - t_kill
    holders = {holder_pid(j) for j in jobs(res).values()}
    assert len(holders) == 1, holders  # one instance took them all
    (winner,) = [s for s in standbys if s.pid in holders]
    (other,) = [s for s in standbys if s is not winner]
    assert winner.serving() and other.alive() and not other.serving()
    print(f"\n[2] SIGKILL of the holder -> a standby attached all 3 in {took:.2f} s (lease + sweep = "
          f"{LEASE_S + SWEEP_S} s)")
    assert took < 30, took  # generous: the lease (3 s) and a sweep, plus startup
    final = all_done(res, ids)
    for i in ids:
        settled(res, final[i])
        ingested_once(res, i, final[i], n=n)
        assert holder_pid(final[i]) is None


# ---------------------------------------------------------------- 3. SIGTERM hands the leases over


def test_sigterm_hands_every_lease_over(fres):
    res = fres
    res.env["RES_ATTACH_LEASE_S"] = "60"  # a takeover within seconds is then a handover, not a lapse
    a = serve(res)
    n = 300
    ids = [agent(res, n, 0.05) for _ in range(3)]
    streaming(res, ids, a.pid)
    assert a.kill(signal.SIGTERM)
    assert a.wait(30) == 0, a.text()
    js = jobs(res)
    for i in ids:  # given up before the process exited: nobody else runs
        assert js[i]["state"] == "running" and js[i]["attached_by"] is None and js[i]["lease_until"] is None, js[i]
    b = serve(res, ready=False)
    attached_by(res, ids, {b.pid}, "attached by the new serve")
    took = time.monotonic() - b.started
    print(f"\n[3] SIGTERM -> leases null at exit; a new serve attached all 3 {took:.2f} s after it was started "
          f"(lease 60 s)")
    assert took < 5, took  # the bound (with a 60 s lease, only a handover makes it)
    final = all_done(res, ids)
    for i in ids:
        settled(res, final[i])
        ingested_once(res, i, final[i], n=n)


# ---------------------------------------------------------------- 4. killed between starting and the unit


def test_killed_between_starting_and_the_unit_start_is_requeued_and_started_once(fres):
    res = fres
    marker = res.tmp / "starts"
    a = serve(res, env={"RES_FAULT_AFTER_STARTING": "kill"})
    r = res.run_job("sh", "-c", 'echo x >> "$0"; exec "$@"', str(marker), PY, FAKE, "30", "--pace", "0.02",
                    mem="100M", extra=("--agent", "claude"))
    assert a.wait(30) == -signal.SIGKILL, a.text()  # it died at the fault point
    # The CLI's loop died before answering: it decides the request that loop recorded, never adds it
    # again. The loop left `starting` on record and no unit; its process is gone, so its lease is void
    # at once (DESIGN §5.4): the CLI's own passes requeue the job and start it, once.
    assert r.code == 0 and re.fullmatch(r"r-1 started; log \S+; ETA ~\d\d:\d\d", r.one_line()), str(r)
    assert [j["id"] for j in res.status_all()["jobs"]] == ["r-1"] and "r-2" not in res.queue.read_text(), str(r)
    seen = ["requeue", "start"]
    w = res("wait", "r-1", "--timeout", "1m")
    assert w.code == 0, str(w)
    st = res.status("r-1")
    settled(res, st)
    assert st["attempt"] == 1, st  # the attempt that never ran is not counted
    assert marker.read_text() == "x\n"  # its unit ran once
    ingested_once(res, "r-1", st, n=30)
    assert not (res.state / "logs" / "r-1.attempt1.log").exists()
    print(f"\n[4] killed after `starting`: `res run` said {r.one_line()!r}; passes {seen}; attempt "
          f"{st['attempt']}, one start, lines {st['lines']}, tokens {st['input_tokens']}/{st['output_tokens']}")


# ---------------------------------------------------------------- 5. stopped from outside


def test_unit_stopped_from_outside_is_settled_with_that_reason(fres):
    res = fres
    serve(res)
    (i,) = [agent(res, 600, 0.05)]
    wait_for(lambda: res.status(i)["lines"] >= 30, f"{i} streaming", 30, step=0.2)
    r = subprocess.run(["systemctl", "--user", "stop", res.unit(i)], env=res.env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    st = all_done(res, [i])[i]
    settled(res, st, rc=128 + signal.SIGTERM)
    assert st["why"] == "stopped from outside res (signal TERM)", st
    st = ingested_once(res, i, st)
    assert 0 < st["iterations"] < 600, st
    print(f"\n[5] stopped from outside: why {st['why']!r}, rc {st['rc']}, lines {st['lines']}, "
          f"tokens {st['input_tokens']}/{st['output_tokens']}, spend {st['spend_usd']}")


# ---------------------------------------------------------------- 6. a failed read


def test_read_failure_once_is_reattached_and_counted_once(fres):
    res = fres
    serve(res, env={"RES_FAULT_INGEST": "once"})
    n = 100
    ids = [agent(res, n, 0.03), agent(res, n, 0.03, "--result", "success", "--cost", "0.1234")]
    final = all_done(res, ids)
    for i, cost in zip(ids, (None, 0.1234)):
        settled(res, final[i])
        ingested_once(res, i, final[i], n=n, cost=cost)
        assert "injected read failure" in (final[i]["last_error"] or ""), final[i]  # it did fail once
        assert final[i]["attach_failures"] == 0, final[i]
        assert final[i]["why"] == "exited 0", final[i]
    print(f"\n[6a] once: lines {final[ids[0]]['lines']}, tokens {final[ids[0]]['input_tokens']}/"
          f"{final[ids[0]]['output_tokens']}, spend {final[ids[0]]['spend_usd']} / {final[ids[1]]['spend_usd']}")


def test_read_failure_every_time_fails_the_job_after_three_and_stops_it(fres):
    res = fres
    a = serve(res, env={"RES_FAULT_INGEST": "always"})
    n = 1200
    i = agent(res, n, 0.05)  # a minute if left alone
    st = all_done(res, [i], limit_s=40)[i]
    settled(res, st, rc=128 + signal.SIGTERM)  # stopped by res
    assert st["why"].startswith("attachment failed 3 times in a row: "), st
    assert "injected read failure (RES_FAULT_INGEST)" in st["why"], st
    assert "injected read failure" in st["last_error"], st
    lines, _, k = log_facts(res, i)
    assert k < n and st["lines"] == 0 and st["spend_usd"] == 0, st  # nothing was ever read
    assert a.alive()
    print(f"\n[6b] always: why {st['why']!r}, rc {st['rc']}, attach_failures {st['attach_failures']}, "
          f"{k} events in the log")


# ---------------------------------------------------------------- 7. soak


def test_soak_random_sigkills_lose_nothing_and_count_nothing_twice(fres):
    res = fres
    # Sessions wait their turn: ~50 s of work (50 sessions of 80-160 lines, 15 ms apart, two at a
    # time), about as long as the 60 kills take, so the kills fall all through it.
    res.env["RES_MAX_CONCURRENT_SESSIONS"] = "2"
    seed = int(os.environ.get("RES_SOAK_SEED") or random.randrange(1, 1 << 30))
    rng = random.Random(seed)
    # Printed first, so a failing run's report names it: RES_SOAK_SEED=<seed> makes the same run.
    print(f"\n[7] soak seed {seed} (RES_SOAK_SEED={seed} repeats this run)")
    marks = res.tmp / "marks"
    marks.mkdir()
    total, kill_count = 50, 60
    plan = []
    for k in range(total):
        n = rng.randrange(80, 160)
        cost = round(rng.uniform(0.01, 0.2), 4) if k % 3 == 0 else None
        plan.append((n, cost))
    first = serve(res)
    ids = []
    for k, (n, cost) in enumerate(plan):
        extra = ("--result", "success", "--cost", str(cost)) if cost is not None else ()
        # The last few wait for a second gate, opened only after the last kill: however fast or slow
        # this machine is, the kills fall while sessions are still to run.
        gate = res.tmp / ("go" if k < total - 3 else "go-last")
        ids.append(agent(res, n, 0.015, *extra, mem="64M", queue=True, wrap=marks / f"m{k}", gate=gate))
    assert ids == [f"r-{k + 1}" for k in range(total)]
    (res.tmp / "go").touch()  # the sessions started so far wait for this: the run begins with the kills

    # 60 SIGKILLs, each of a reconciler that is still running: a `res serve` killed at a random
    # moment of its life, then a one-shot `res reconcile` killed at a random moment of its pass, ...
    loop, kills, kinds = first, 0, []
    t0 = time.monotonic()
    while kills < kill_count:
        time.sleep(rng.uniform(0.2, 1.2) if loop.args[0] == "serve" else rng.uniform(0.2, 0.9))
        if loop.kill():
            kills += 1
            kinds.append(loop.args[0])
        loop.wait()
        # Serve and one-shot reconcile take turns whether or not the kill fell in time: a one-shot
        # pass that ended before its kill (a fast machine, little left to do) is followed by a serve,
        # which always runs until killed, so the kills are always made (taking turns by the number of
        # kills made spun on one-shot passes for ever once each ended under the shortest sleep).
        loop = serve(res, ready=False) if loop.args[0] == "reconcile" else Loop(res, "reconcile")
    if loop.args[0] != "serve":
        loop.wait()
        loop = serve(res, ready=False)
    chaos = time.monotonic() - t0
    left = [i for i, j in jobs(res).items() if j["state"] != "done"]
    assert left, f"every job ended before the last kill ({chaos:.1f} s): the kills did not fall during the run"
    (res.tmp / "go-last").touch()
    final = all_done(res, ids, limit_s=300)
    took = time.monotonic() - t0
    spend = 0.0
    for k, i in enumerate(ids):
        n, cost = plan[k]
        st = final[i]
        settled(res, st)
        assert (marks / f"m{k}").read_text() == "x\n", f"{i} started {(marks / f'm{k}').read_text().count('x')} times"
        assert st["attempt"] == 1, st
        ingested_once(res, i, st, n=n, cost=cost)
        spend += st["spend_usd"]
    want = sum(cost if cost is not None else token_cost(n) for n, cost in plan)
    assert abs(spend - want) < 1e-4, (spend, want)
    # today's spend (since local midnight: a run may cross it) is that of the sessions that ended today
    from reconciler.config.zone import system_zone
    from reconciler.core.quantities import local_midnight

    midnight = local_midnight(time.time(), system_zone)
    today = sum(j["spend_usd"] for j in final.values() if (j["ended"] or 0) >= midnight)
    assert abs(res.status_all()["budget"]["spend_today_usd"] - today) < 1e-4
    print(f"[7] soak (seed {seed}): {total} jobs, {kills} SIGKILLs ({kinds.count('serve')} serve, "
          f"{kinds.count('reconcile')} reconcile) over {chaos:.1f} s ({len(left)} jobs not done at the last), all "
          f"done {took:.1f} s after the first; lines {sum(j['lines'] for j in final.values())}, "
          f"spend ${spend:.6f} == ${want:.6f}")


# ---------------------------------------------------------------- 8. session caps


BLOCKED_AGENT = 'until [ -e "$0" ]; do sleep 0.05; done; exec "$@"'


def test_session_caps_through_the_cli(fres):
    res = fres
    res.env["RES_MAX_CONCURRENT_SESSIONS"] = "2"
    serve(res)
    gos = [res.tmp / f"go{k}" for k in range(3)]
    held = [res.started("sh", "-c", BLOCKED_AGENT, str(gos[k]), PY, FAKE, "5", mem="100M",
                        extra=("--agent", "claude", "--title", f"session {k}")) for k in range(2)]
    assert held == ["r-1", "r-2"]
    r = res.run_job(PY, FAKE, "5", mem="100M", extra=("--agent", "claude"))
    line = r.one_line()
    assert r.code == 3 and line.startswith("busy: 2 agent sessions running (max 2): "), str(r)
    assert f"(r-1, by {ME})" in line and f"(r-2, by {ME})" in line and '"session 0"' in line, line
    print(f"\n[8a] over the cap: exit {r.code}: {line}")
    assert res.started("true", mem="100M") == "r-4"  # a plain job is no session
    r = res.run_job("sh", "-c", BLOCKED_AGENT, str(gos[2]), PY, FAKE, "5", mem="100M",
                    extra=("--agent", "claude", "--queue"))
    assert r.code == 0 and r.one_line().startswith("r-5 queued, position 1; 2 agent sessions running (max 2)"), str(r)
    assert res.status("r-5")["state"] == "queued"
    gos[0].touch()  # one session ends: the queued one starts by itself
    wait_for(lambda: res.status("r-5")["state"] == "running", "r-5 started when r-1 ended", 30, step=0.2)
    assert res.status("r-1")["state"] == "done"
    for g in gos[1:]:
        g.touch()
    final = all_done(res, ["r-1", "r-2", "r-4", "r-5"])
    for i in ("r-1", "r-2", "r-5"):
        settled(res, final[i])
        ingested_once(res, i, final[i], n=5)


def test_daily_cost_cap_refuses_new_sessions(fres):
    res = fres
    res.env["RES_DAILY_COST_USD"] = "0.25"
    serve(res)
    i = agent(res, 5, 0.0, "--result", "success", "--cost", "0.30")
    st = all_done(res, [i])[i]
    settled(res, st)
    ingested_once(res, i, st, n=5, cost=0.30)
    r = res.run_job(PY, FAKE, "5", mem="100M", extra=("--agent", "claude"))
    assert r.code == 3 and r.one_line() == ("busy: agent sessions spent $0.30 today, daily_cost_usd is $0.25; "
                                            "new sessions start again tomorrow, or raise daily_cost_usd"), str(r)
    assert res.status("r-2")["state"] == "refused"
    assert res.started("true", mem="100M") == "r-3"  # plain jobs are not capped by spend
    assert res.status_all()["budget"]["spend_today_usd"] == 0.3


def test_broken_pricing_override_refuses_sessions_not_plain_jobs(fres):
    res = fres
    bad = res.tmp / "pricing.toml"
    bad.write_text("[default]\ninput = -1\n")
    res.env["RES_PRICING_FILE"] = str(bad)
    serve(res)
    r = res.run_job(PY, FAKE, "5", mem="100M", extra=("--agent", "claude"))
    line = r.one_line("err")
    print(f"\n[8c] broken pricing: exit {r.code}: {line}")
    assert r.code == 1 and r.out == "" and line.startswith(f"res: {bad}: ") and "no agent session starts" in line, str(r)
    assert res.status("r-1")["state"] == "refused"
    i = res.started("true", mem="100M")
    assert all_done(res, [i])[i]["rc"] == 0
