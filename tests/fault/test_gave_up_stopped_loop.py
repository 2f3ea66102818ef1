"""A caller that gives up never gets its job run (issue 40 item 1), against a real `res serve`
stopped with SIGSTOP and resumed with SIGCONT by pid, real units on the real user manager: a request
is answered or never run; asking again with the same request id is the same request, never a second
job. Each job appends its request id to a file, so every start is counted. Nothing asserts on
wall-clock figures: waits are polls with generous limits; exit codes, lines and counts are checked."""
from __future__ import annotations

import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from clihelp import PY, res, wait_for  # noqa: F401

pytestmark = [pytest.mark.fault, pytest.mark.systemd]

WAIT_S = "4"  # each caller's answer wait (RES_ANSWER_WAIT_S)


def _loop(res) -> subprocess.Popen:
    """`res serve` of this test, its log in a file (a stopped loop must not fill a pipe)."""
    log = open(res.tmp / "serve.log", "ab")
    p = res.popen([PY, "-m", "reconciler.cli", "serve"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    wait_for(lambda: (res.state / "serve.sock").exists() or p.poll() is not None, "the loop listens", 60)
    assert p.poll() is None, (res.tmp / "serve.log").read_text()
    return p


def _marks(res) -> Counter:
    path = res.tmp / "marks"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _ask(res, rid: str, queue: bool = False) -> subprocess.CompletedProcess:
    marks = res.tmp / "marks"
    args = ["run", "--mem", "32M", "--for", "1m", "--cpus", "0.05", "--request-id", rid, "--title", rid,
            *(["--queue"] if queue else []), "--", "sh", "-c", f'echo {rid} >> "$0"', str(marks)]
    return subprocess.run([PY, "-m", "reconciler.cli", *args], cwd=str(res.work), env={**res.env,
                          "RES_ANSWER_WAIT_S": WAIT_S}, capture_output=True, text=True, timeout=120)


def _settled(res) -> None:
    """Every entry finished (a pass or two after the loop runs freely again)."""
    def done() -> bool:
        jobs = res.status_all()["jobs"]
        return all(j["state"] in ("done", "refused", "cancelled") for j in jobs)

    wait_for(done, "every entry finished", 120, step=0.3)


def test_a_request_whose_caller_gave_up_on_a_stopped_loop_never_runs(res):
    res.env["RES_TICK_S"] = "0.5"
    loop = _loop(res)
    try:
        assert _ask(res, "warm-up").returncode == 0  # the loop answers, the job runs
        loop.send_signal(signal.SIGSTOP)
        r = _ask(res, "gave-up")
        assert r.returncode == 1 and r.stdout == "", r
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"res: no answer from the reconciler loop in {WAIT_S} s (stopped or stuck?): "
                               "request gave-up is not started after "), line
        assert line.endswith("ask again with --request-id gave-up to learn which (the same request: never a "
                             "second job)"), line
    finally:
        loop.send_signal(signal.SIGCONT)
    res.passes(3)
    _settled(res)
    assert _marks(res) == Counter({"warm-up": 1})  # the one that gave up never ran
    r = _ask(res, "gave-up")  # asked again, the loop running: now it runs, once
    assert r.returncode == 0 and re.match(r"r-\d+ started", r.stdout), r
    _settled(res)
    assert _marks(res) == Counter({"warm-up": 1, "gave-up": 1})
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(30) == 0
    assert "Traceback" not in (res.tmp / "serve.log").read_text()


def test_a_queued_request_that_reached_a_stopped_loop_too_late_is_never_written(res):
    loop = _loop(res)
    try:
        loop.send_signal(signal.SIGSTOP)
        r = _ask(res, "queued-late", queue=True)
        assert r.returncode == 1, r
        assert "waits in the queue if the loop took it by " in r.stderr and "else it never starts" in r.stderr, r
    finally:
        loop.send_signal(signal.SIGCONT)
    res.passes(3)
    # it reached the loop after its caller's deadline: never written
    assert not res.queue.exists() or "queued-late" not in res.queue.read_text()
    assert _marks(res) == Counter()
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(30) == 0


def test_twenty_callers_a_loop_stopped_at_random_each_request_runs_at_most_once(res):
    """20 callers, each asking once and once more with the same request id after giving up; the loop
    stopped and resumed at random meanwhile. Then, the loop running freely, each asks a last time.
    Every request id has its job started exactly once; no caller ever got a second one."""
    res.env["RES_TICK_S"] = "0.5"
    res.env["RES_MAX_STARTS_PER_TICK"] = "20"
    loop = _loop(res)
    rng = random.Random(40)
    stop = threading.Event()
    stops: list[float] = []

    def toggler() -> None:
        while not stop.is_set():
            if stop.wait(rng.uniform(0.5, 3.0)):
                break
            loop.send_signal(signal.SIGSTOP)
            stops.append(time.monotonic())
            stop.wait(rng.uniform(0.5, 6.0))
            loop.send_signal(signal.SIGCONT)

    answers: dict[str, list[tuple[int, str]]] = {}

    def said(r) -> str:  # its one line (a `hint:` beside it is advice, not the answer)
        return "\n".join(ln for ln in (r.stdout + r.stderr).splitlines() if not ln.startswith("hint: ")).strip()

    def caller(i: int) -> None:
        rid = f"agent-{i:02d}"
        got = answers.setdefault(rid, [])
        r = _ask(res, rid)
        got.append((r.returncode, said(r)))
        if r.returncode != 0:  # gave up (or was told it did not start): asks once more, the same request
            r = _ask(res, rid)
            got.append((r.returncode, said(r)))

    t = threading.Thread(target=toggler, daemon=True)
    t.start()
    callers = [threading.Thread(target=caller, args=(i,)) for i in range(20)]
    try:
        for c in callers:
            c.start()
            time.sleep(rng.uniform(0, 0.3))
        for c in callers:
            c.join(300)
    finally:
        stop.set()
        t.join(30)
        loop.send_signal(signal.SIGCONT)
    assert stops, "the loop was never stopped"
    res.passes(3)
    _settled(res)
    marks = _marks(res)
    assert all(n == 1 for n in marks.values()), marks  # never twice
    for rid, got in answers.items():
        for code, text in got:
            assert code in (0, 1, 3), (rid, got)
            assert "\n" not in text and "Traceback" not in text, (rid, got)
            if code == 0 and " started" in text:
                assert marks[rid] == 1, (rid, got, marks)
        # never started behind its caller's back: a request none of whose answers said it started ran
        # only where its caller was told it might have ("… unless it already was": a start under way
        # when the loop stopped); one told "withdrawn: it never starts" or "never started" did not run
        if marks[rid] and not any(code == 0 for code, _ in got):
            assert any("unless it already was" in text for _, text in got), (rid, got, marks)
    # the loop running freely, every caller asks a last time: each request runs exactly once
    for rid in answers:
        r = _ask(res, rid)
        assert r.returncode == 0 and re.match(r"r-\d+ (started|starting|done)", r.stdout.strip()), (rid, r)
    _settled(res)
    marks = _marks(res)
    assert marks == Counter({rid: 1 for rid in answers}), marks
    gave_up = sum(1 for got in answers.values() if got[0][0] == 1)
    print(f"\n[item 1] {len(stops)} stops; {gave_up} of 20 callers gave up at first; every request id started once")
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(60) == 0
    assert "Traceback" not in (res.tmp / "serve.log").read_text()


def test_every_command_answers_in_its_own_time_while_the_loop_is_stopped(res):
    """Each command's --timeout or answer wait holds with the loop stopped (issue 40): a bound far
    below what a stuck loop would cost, and the documented exit code and one line."""
    res.env["RES_TICK_S"] = "0.5"
    loop = _loop(res)
    blocker = res.tmp / "go"
    assert res.started("sh", "-c", 'until [ -e "$0" ]; do sleep 0.1; done', str(blocker)) == "r-1"
    loop.send_signal(signal.SIGSTOP)
    try:
        env = {**res.env, "RES_ANSWER_WAIT_S": "3"}

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([PY, "-m", "reconciler.cli", *args], cwd=str(res.work), env=env, capture_output=True,
                                  text=True, timeout=20)

        r = cli("wait", "r-1", "--timeout", "2s")
        assert r.returncode == 124 and "did not answer by then" in r.stderr, r
        r = cli("status", "r-1")
        assert r.returncode == 0 and "r-1" in r.stdout, r  # read from state.db itself
        r = cli("reconcile")
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "did not answer in time" in r.stderr, r
        r = cli("release", "--stop", "r-1")
        assert r.returncode == 1 and r.stderr.startswith("res: no answer from the reconciler loop in 3 s"), r
    finally:
        loop.send_signal(signal.SIGCONT)
    blocker.touch()
    assert res("wait", "r-1", timeout=120).code in (0, 143)  # released meanwhile, or ended by itself
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(30) == 0
