"""`--mem/--cpus/--for auto` end to end on a real user manager (DESIGN §5.9, issue 25): sizes from the
policy's default, then from the project's own history of the same command (as the loop publishes it
in gate.json); an auto-sized job killed at its memory limit by the kernel is started again once,
bigger, and the one who waits sees one job, one output, one exit code; a second kill is final; a job
sized by its caller is never retried, and its line suggests a size.

The memory figures are the job's own (a script that touches N MB), small, and far under the budget;
nothing asserts on wall-clock time or on the host's free memory."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clihelp import PY, res, wait_for  # noqa: F401

from reconciler.core.hist import round_est_s, suggest_mem_gb

GROW = '''import sys, time
mb = int(sys.argv[1])
x = bytearray(mb << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
print("grew", mb, flush=True)
'''


@pytest.fixture
def auto(res):
    """A project with a script that uses as many MB as it is told, a policy whose default auto size is
    256 MB, and `res serve`."""
    proj = res.tmp / "proj"
    (proj / ".git").mkdir(parents=True)  # the project: its checkout's root
    (proj / "grow.py").write_text(GROW)
    res.env.update(RES_AUTO_MEM_GB="0.25", RES_AUTO_CPUS="1", RES_AUTO_MINUTES="1")
    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() and (res.state / "gate.json").exists(), "res serve up", 60)
    res.proj = proj
    yield res
    serve.terminate()
    serve.wait(60)


def learned(res) -> dict:
    return json.loads((res.state / "gate.json").read_text())["learned"].get("proj", {})


def run_auto(res, mb: int, *flags: str):
    return res("run", "--wait", *(flags or ("--mem", "auto", "--cpus", "auto", "--for", "auto")), "--",
               PY, "grow.py", str(mb), cwd=res.proj, timeout=300)


def started_id(r) -> str:
    m = re.match(r"(r-\d+) started", r.err_lines[0])
    assert m, str(r)
    return m.group(1)


def test_sizes_come_from_the_policy_then_from_this_projects_runs(auto):
    res = auto
    first = run_auto(res, 40)
    # Learned before the run's waiter was answered: the agent's very next call is sized from it.
    learned_at_once = learned(res)
    assert first.code == 0 and first.out == "grew 40\n", str(first)
    assert re.match(r"r-\d+ started; 256 MB, 1 cpu, 60 s from the policy's default; log ", first.err_lines[0]), str(first)
    one = res.status(started_id(first))
    assert one["auto"] == ["mem", "cpus", "for"] and one["sized_from"] == "the policy's default" and one["cpu_s"] is not None

    assert "python3 grow.py" in learned_at_once or "python grow.py" in learned_at_once, learned_at_once
    fp, entry = next(iter(learned(res).items()))
    took = one["ended"] - one["started"]
    assert entry[:4] == [suggest_mem_gb(one["peak_gb"], killed=False), round_est_s(took * 1.5), False, 1], entry
    second = run_auto(res, 40)
    assert second.code == 0, str(second)
    assert f"from 1 earlier run of {fp};" in second.err_lines[0], str(second)
    two = res.status(started_id(second))
    assert two["mem_gb"] == entry[0] and two["sized_from"] == f"1 earlier run of {fp}"

    hist = res.ok("hist", cwd=res.proj).out
    assert re.search(rf'proj\s+"{re.escape(fp)}"\s+2\s+256M\s+', hist), hist


def test_an_auto_sized_job_killed_at_its_limit_runs_again_once_bigger(auto):
    res = auto
    r = run_auto(res, 400)  # 256 MB from the policy: killed; started again at 512 MB, where it fits
    assert r.code == 0, str(r)
    assert r.out.count("grew 400") == 1, str(r)
    job = started_id(r)
    retry = f"res: {job} killed at its memory limit (256 MB"
    assert retry in r.out and "res sized it, so it starts again once, at 512 MB" in r.out, str(r)
    assert re.search(rf"{job} done rc=0 .*; started again at 512 MB after a kill at its 256 MB limit$", r.err_lines[-1]), str(r)
    st = res.status(job)
    assert (st["state"], st["rc"], st["mem_gb"], st["grown_from_gb"], st["attempt"]) == ("done", 0, 0.5, 0.25, 2), st
    jobs = [j for j in res.status_all()["jobs"] if j["kind"] == "job"]
    assert [j["id"] for j in jobs] == [job]  # one job, not two
    log = Path(st["log"]).read_text()
    assert log.count(retry) == 1 and log.index(retry) < log.index("grew 400")  # one log: the kill, then the run
    queue = res.queue.read_text()
    assert "grown_from_gb = 0.25" in queue or "grown_from_gb" not in queue  # retired once done


def test_a_second_kill_is_final(auto):
    res = auto
    r = run_auto(res, 900)  # 256 MB, then 512 MB: killed both times
    job = started_id(r)
    st = res.status(job)
    assert st["state"] == "done" and st["reason"]["code"] == "memory_limit" and st["mem_gb"] == 0.5, st
    assert r.code == st["rc"] & 0xFF and r.code != 0, str(r)
    assert r.out.count("res sized it, so it starts again once") == 1, str(r)
    assert "try --mem 768M" in st["why"], st


def test_a_size_the_caller_gave_is_not_retried_and_its_line_suggests_one(auto):
    res = auto
    r = run_auto(res, 400, "--mem", "256M", "--for", "1m")
    job = started_id(r)
    st = res.status(job)
    assert st["state"] == "done" and st["reason"]["code"] == "memory_limit" and st["attempt"] == 1, st
    assert "starts again" not in r.out and st["auto"] == [] and st["grown_from_gb"] is None, str(r)
    assert "try --mem 512M" in st["why"], st
