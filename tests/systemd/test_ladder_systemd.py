"""Systemd tier: the pressure ladder on a real user manager (DESIGN §5.1). A job booked low from its
command's history that outgrows its book while another job holds the rest of the budget is stopped
by res before the kernel's OOM killer acts at its cap, goes back to the head of the queue, and runs
again; the agent's `res run --wait` sees one job and the last attempt's exit code."""
from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

from clihelp import res, serving, wait_for  # noqa: F401 - `res` is a fixture

pytestmark = pytest.mark.systemd

# What one job runs (the same command every time, so history knows it by one fingerprint); what it
# does is told by files in its directory: `mode` small (allocate and exit) or grow; a first attempt of
# grow leaves `attempt1` behind and grows 50 MB every 0.25 s towards 1.9 GB (past its 1.5 GB cap the
# kernel would kill it), a second attempt allocates a little and exits 0.
GROW = textwrap.dedent("""
    import os, sys, time
    mode = open("mode").read().strip()
    held = [bytearray(150 << 20)]  # touched: 150 MB in use
    for b in held:
        for i in range(0, len(b), 4096):
            b[i] = 1
    if mode == "small" or os.path.exists("attempt1"):
        print("second attempt ok" if mode != "small" else "small ok", flush=True)
        time.sleep(0.5)
        sys.exit(0)
    open("attempt1", "w").close()
    print("first attempt: growing", flush=True)
    for _ in range(35):
        b = bytearray(50 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        held.append(b)
        time.sleep(0.25)
    time.sleep(30)
    print("first attempt was never stopped", flush=True)
    sys.exit(5)
""")

FILL = textwrap.dedent("""
    import time
    b = bytearray(800 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    time.sleep(float(open("fill_s").read()))
""")


def test_a_job_that_outgrows_its_book_is_stopped_by_res_before_the_kernel_and_runs_again(res):
    res.shape(free_gb=1.5)  # agents may use about 1.5 GB now
    res.env.update({"RES_GUARD_GB": "0.4", "RES_MARGIN": "1.0", "RES_TICK_S": "0.5", "RES_CPU_OVERCOMMIT": "4"})
    (res.work / "grow.py").write_text(GROW)
    (res.work / "fill.py").write_text(FILL)
    loop = serving(res)

    # ------------------------------------------------ history: three runs of the command at ~160 MB
    (res.work / "mode").write_text("small")
    for _ in range(3):
        r = res("run", "--wait", "--mem", "400M", "--for", "1m", "--cpus", "0.1", "--", "python3", "grow.py")
        assert r.code == 0 and "small ok" in r.out, str(r)

    # ------------------------------------------------ one job holds most of the budget
    (res.work / "fill_s").write_text("12")
    filler = res.spawn("run", "--wait", "--mem", "1G", "--for", "1m", "--cpus", "0.1", "--title", "fill", "--",
                       "python3", "fill.py")
    wait_for(lambda: any(e["title"] == "fill" and e["state"] == "running" for e in res.status_all()["jobs"]),
             "the filler running")

    # ------------------------------------------------ the job booked from history grows past its book
    (res.work / "mode").write_text("grow")
    grower = res.spawn("run", "--wait", "--mem", "1500M", "--for", "1m", "--cpus", "0.1", "--title", "grow", "--",
                       "python3", "grow.py")
    wait_for(lambda: any(e["title"] == "grow" for e in res.status_all()["jobs"]), "the grower asked for")
    grow_id = next(e["id"] for e in res.status_all()["jobs"] if e["title"] == "grow")
    asked = res.status(grow_id)
    assert 0.15 <= asked["book_gb"] <= 0.25, asked  # the runs' peak × 1.0
    assert asked["booked_from"] == "3 runs of python3 grow.py" and asked["mem_gb"] == pytest.approx(1500 / 1024)

    out, err = grower.communicate(timeout=180)
    assert grower.returncode == 0, (out, err)  # the second attempt's exit code: one job for the agent
    assert "second attempt ok" in out and "first attempt was never stopped" not in out
    filler.communicate(timeout=60)

    st = res.status(grow_id)
    assert st["state"] == "done" and st["rc"] == 0, st
    (stop,) = st["evictions"]
    assert stop["oom_kills"] == 0  # res stopped it: the kernel's OOM killer never acted in its cgroup
    assert stop["used_gb"] > stop["book_gb"]
    assert st["book_gb"] >= stop["used_gb"] and st["booked_from"] != "3 runs of python3 grow.py"  # raised
    log = (res.state / "logs" / f"{grow_id}.log").read_text()
    assert log.count("first attempt: growing") == 1 and log.count("second attempt ok") == 1
    said = [line for line in log.splitlines() if line.startswith(f"res: {grow_id} stopped by res above its book")]
    assert len(said) == 1 and "back at the queue's head" in said[0], log
    # the change log says who changed the queue entry and why
    changes = res.ok("hist", "--changes").out
    assert re.search(rf"evict {grow_id}: stopped by res above its book \(\S+ \S+ used, \S+ \S+ booked\)", changes), changes
    loop.terminate()
    loop.wait(30)
    assert json.loads(res.ok("status", grow_id, "--json").out)["rc"] == 0


def test_a_policy_with_a_bad_overcommit_or_margin_is_named_and_the_loop_keeps_the_last_good_one(res):
    from clihelp import nproc

    policy = res.tmp / "policy.toml"

    def put(text: str) -> None:  # as an editor saves: whole, never a pass reading it half written
        part = policy.with_suffix(".part")
        part.write_text(text)
        os.replace(part, policy)

    put("cpu_overcommit = 2\n")
    res.env["RES_TICK_S"] = "0.5"
    serving(res)
    wait_for(lambda: res.status_all()["budget"]["cpus"] == pytest.approx(2 * nproc()), "2 × the CPUs")
    for bad, key in (("cpu_overcommit = 0.5\n", "cpu_overcommit"), ("margin = -1\n", "margin")):
        put(bad)
        wait_for(lambda: any("keeping the policy loaded before" in n for n in res.status_all()["notices"]),
                 f"{key} named in status")
        (line,) = [n for n in res.status_all()["notices"] if "keeping the policy loaded before" in n]
        assert line.startswith(f"{policy}: {key} = ") and "; allowed: a number" in line and "\n" not in line, line
        assert res.status_all()["budget"]["cpus"] == pytest.approx(2 * nproc())  # the last good policy
        put("cpu_overcommit = 2\n")
        wait_for(lambda: not res.status_all()["notices"], "fixed")
