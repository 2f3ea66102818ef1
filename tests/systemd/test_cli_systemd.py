"""The core capabilities through the real command line on a real systemd user manager.

Every `res` call is a subprocess with the cwd and environment the test chooses, so exit codes and
output lines are exactly what a user (or an agent) sees. Capacity is shaped through RES_* variables
computed from this machine's /proc/meminfo; nothing asserts on wall-clock time. The `res` fixture
stops every unit and process the test started (by its unique prefix / by pid)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from clihelp import CLOCK, GIB, ME, PY, meminfo_gb, nproc, res, unit_props, serving, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd

ARGS_PROBE = ("import sys, os, json, time\n"
              "while not os.path.exists(os.environ['RES_CLI_GO']): time.sleep(0.05)\n"
              "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
              "'mark': os.environ.get('RES_CLI_MARK'), 'token': os.environ.get('FOO_TOKEN'), "
              "'nice': os.nice(0)}))")
HOSTILE = ["%h", "$HOME", "${HOME}", "a;b", "; rm -rf nothing", "'single'", '"double"', "two\nlines", "100%", "$$"]
BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"  # a job that ends when the test creates its file


def blocker(res, name: str) -> tuple[list[str], "os.PathLike"]:
    """A command that runs until the test touches a file (controlled end, no sleeping on time)."""
    go = res.tmp / f"go-{name}"
    return ["sh", "-c", BLOCK, str(go)], go


# ---------------------------------------------------------------- item 2: a real unit


def test_run_starts_a_unit_with_the_requested_properties(res):
    cwd = res.tmp / "caller dir"
    cwd.mkdir()
    r = res("run", "--mem", "1G", "--for", "5m", "--title", "unit tests", "--", PY, "-c", ARGS_PROBE, *HOSTILE,
            cwd=cwd, env={"RES_CLI_MARK": "only-in-the-caller", "FOO_TOKEN": "must-not-leak",
                          "RES_CLI_GO": str(res.tmp / "go")})
    m = re.fullmatch(rf"r-1 started; log (\S+); ETA ~{CLOCK}", r.one_line())
    assert r.code == 0 and m and r.err == "", str(r)
    log = res.state / "logs" / "r-1.log"
    assert m.group(1) == str(log)

    unit = res.unit("r-1")
    p = unit_props(unit)  # it runs until the test creates the file RES_CLI_GO names
    assert p["ActiveState"] == "active", p["ActiveState"]
    assert p["Slice"] == res.jobs_slice
    assert unit_props(res.jobs_slice, "Slice")["Slice"] == res.agents_slice  # jobs slice under the agents slice
    assert p["MemoryMax"] == GIB
    assert p["MemoryHigh"] == 2**64 - 1  # none: the cap kills, nothing throttles under it
    assert p["MemorySwapMax"] == 0
    assert p["Nice"] == 10
    assert p["WorkingDirectory"] == str(cwd)
    assert "RES_CLI_MARK=only-in-the-caller" in p["Environment"]
    assert not [e for e in p["Environment"] if "TOKEN" in e], p["Environment"]

    (res.tmp / "go").touch()
    w = res("wait", "r-1", "--timeout", "1m")
    assert w.code == 0 and w.one_line().startswith("r-1 done rc=0"), str(w)
    got = json.loads(log.read_text())
    assert got["argv"] == HOSTILE  # verbatim: no %-specifiers, no $-expansion, no shell
    assert got["cwd"] == str(cwd)
    assert got["mark"] == "only-in-the-caller"
    assert got["token"] is None
    assert got["nice"] == 10
    st = res.status("r-1")
    assert st["title"] == "unit tests" and st["mem_gb"] == 1.0 and st["cmd"][3:] == HOSTILE


# ---------------------------------------------------------------- item 3: busy, queue, locks, never, force


def test_busy_line_names_the_holder_free_memory_and_retry(res):
    res.pin(1.5)
    hold, _ = blocker(res, "1")
    assert res.started(*hold, mem="1G", extra=("--title", "holder job", "--project", "proj-a")) == "r-1"
    r = res.run_job("true", mem="1G")
    line = r.one_line()
    # the holder sleeps: it uses next to nothing of its 1 GB, so --force would start this one
    m = re.fullmatch(rf'busy: 1\.0 GB held by proj-a "holder job" \(r-1, by {re.escape(ME)}\) until ~({CLOCK}); '
                     rf"(\d+) MB free for agents; retry after ~({CLOCK}) or work on something else; "
                     r"[\d.]+ GB really free beyond the reserve: --force starts it past the ledger \(only if the "
                     r"holders will not use what they reserved\)", line)
    assert r.code == 3 and m and r.err == "", str(r)
    assert m.group(1) == m.group(3)  # retry when the holder is expected to end
    assert float(m.group(2)) < 1024  # under 1 GB free: said in MB
    assert res.status("r-2")["state"] == "refused"
    assert res.status("r-1")["state"] == "running"


def test_busy_line_names_holders_earliest_eta_first(res):
    res.pin(1.5)
    late, _ = blocker(res, "1")
    early, _ = blocker(res, "2")
    assert res.started(*late, mem="512M", est="50m", extra=("--title", "late")) == "r-1"
    assert res.started(*early, mem="512M", est="10m", extra=("--title", "early")) == "r-2"
    r = res.run_job("true", mem="1280M")  # needs both to end
    by = f", by {re.escape(ME)}"
    m = re.fullmatch(rf'busy: 512 MB held by \S+ "early" \(r-2{by}\) until ~({CLOCK}), 512 MB by \S+ "late" \(r-1{by}\) '
                     rf"until ~({CLOCK}); [\d.]+ [GM]B free for agents; retry after ~({CLOCK}) or work on something else"
                     r"; [\d.]+ GB really free beyond the reserve: --force starts it past the ledger \(only if the "
                     r"holders will not use what they reserved\)", r.one_line())
    assert r.code == 3 and m, str(r)
    assert m.group(3) == m.group(2)  # retry when enough is free: after the later of the two
    st = {j: res.status(j) for j in ("r-1", "r-2")}
    assert st["r-2"]["eta"] < st["r-1"]["eta"]


def test_busy_line_names_a_cpu_shortage(res):
    res.env["RES_CPU_OVERCOMMIT"] = "1"  # every CPU promised once (CPUs shared past that: test_book.py)
    n = nproc()
    hold, _ = blocker(res, "1")
    assert res.started(*hold, cpus=str(n), extra=("--title", "all cpus")) == "r-1"
    r = res.run_job("true", cpus="1")
    m = re.fullmatch(rf'busy: {n} cpus? held by \S+ "all cpus" \(r-1, by {re.escape(ME)}\) until ~({CLOCK}); '
                     rf"0 cpus free for agents; retry after ~({CLOCK}) or work on something else", r.one_line())
    assert r.code == 3 and m, str(r)


def test_queue_is_fifo_with_backfill_and_starts_by_itself_when_the_head_fits(res):
    """DESIGN §5.2 on real units: the head waits for memory and every CPU; a later entry that would
    still run when the head is expected to start waits behind it; one that ends before then (by its
    --for) starts at once (EASY backfill); once the holders are gone the head starts by itself."""
    res.pin(1.5)
    res.env["RES_CPU_OVERCOMMIT"] = "1"  # the head takes every CPU there is, promised once
    n = nproc()
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, mem="1G", est="5m") == "r-1"
    head_cmd, head_go = blocker(res, "2")
    r = res.run_job(*head_cmd, mem="1G", cpus=str(n), extra=("--queue",))
    assert r.code == 0 and re.fullmatch(rf"r-2 queued, position 1; est\. start ~{CLOCK}; cancel: res release r-2",
                                        r.one_line()), str(r)
    # r-3 fits now, but by its --for would still hold a CPU when r-2 is to start (r-2 takes them all)
    late_cmd, late_go = blocker(res, "3")
    r = res.run_job(*late_cmd, est="10m", extra=("--queue",))
    assert r.code == 0 and re.fullmatch(rf"r-3 queued, position 2; est\. start ~{CLOCK}(; [^;]+)?; cancel: res release r-3",
                                        r.one_line()), str(r)
    # r-4 ends before r-1 is expected to: it jumps the queue
    quick_cmd, quick_go = blocker(res, "4")
    assert res.started(*quick_cmd, est="1m", extra=("--queue",)) == "r-4"
    res.ok("reconcile")
    assert [res.status(j)["state"] for j in ("r-1", "r-2", "r-3", "r-4")] == ["running", "queued", "queued", "running"]
    assert res.active("r-4") == "active" and res.active("r-2") != "active" and res.active("r-3") != "active"

    hold_go.touch()
    quick_go.touch()
    st = res.reconcile_until("r-2", lambda s: s["state"] == "running", "the head started once its holders ended")
    assert res.status("r-1")["state"] == "done" and res.status("r-4")["state"] == "done"
    assert res.active("r-2") == "active" and res.status("r-3")["state"] == "queued"  # r-2 holds every CPU
    head_go.touch()
    res.reconcile_until("r-3", lambda s: s["state"] == "running", "started after the head")
    late_go.touch()
    assert res("wait", "r-2").code == 0 and res("wait", "r-3").code == 0


def test_lock_held_entries_are_skipped_not_blocking(res):
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, extra=("--lock", "db")) == "r-1"
    locked_cmd, locked_go = blocker(res, "2")
    r = res.run_job(*locked_cmd, extra=("--queue", "--lock", "db"))
    assert r.code == 0 and re.fullmatch(rf"r-2 queued, position 1; .*lock 'db@{re.escape(str(res.work))}' held by r-1.*; cancel: res release r-2",
                                        r.one_line()), str(r)
    other, other_go = blocker(res, "3")
    assert res.started(*other, extra=("--queue",)) == "r-3"  # behind a lock-held entry, not blocked by it
    r = res.run_job("true", extra=("--lock", "db"))
    db = f'"db@{re.escape(str(res.work))}"'
    m = re.fullmatch(rf'busy: lock {db} held by \S+ "[^"]*" \(r-1, by {re.escape(ME)}\) until ~{CLOCK}; retry after '
                     rf"~{CLOCK} or work on something else", r.one_line())
    assert r.code == 3 and m, str(r)
    r = res.run_job("true", extra=("--lock", "db", "--force"))  # --force never overrides a lock, and says so
    assert r.code == 3 and re.match(rf"busy: lock {db} held by .*; --force never overrides a lock; retry after ",
                                    r.one_line()), str(r)

    hold_go.touch()
    st = res.reconcile_until("r-2", lambda s: s["state"] == "running", "started after the lock was freed")
    assert st["lock"] == f"db@{res.work}" and res.status("r-1")["state"] == "done"
    locked_go.touch()
    other_go.touch()
    assert res("wait", "r-2").code == 0 and res("wait", "r-3").code == 0


def test_lock_held_queue_line_has_est_start(res):
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, extra=("--lock", "db")) == "r-1"
    r = res.run_job("true", extra=("--queue", "--lock", "db"))
    try:
        assert r.code == 0 and re.fullmatch(rf"r-2 queued, position 1; est\. start ~{CLOCK}(; [^;]+)?; "
                                            r"cancel: res release r-2", r.one_line()), str(r)
    finally:
        hold_go.touch()


def test_a_request_larger_than_the_whole_budget_can_never_fit(res):
    total = meminfo_gb("MemTotal")
    size = int(total) + 4
    for extra in ((), ("--queue",), ("--force",)):
        r = res.run_job("true", mem=f"{size}G", extra=extra)
        m = re.fullmatch(rf"res: {size} GB can never fit \(max ([\d.]+) GB\)", r.one_line("err"))
        assert r.code == 1 and m and r.out == "", str(r)
        # the whole agent budget: MemTotal − the user's reserve − headroom, the shipped defaults (6 + 2 GB,
        # scaled down on a machine where they would take over 3/4 of it: the guest tier's 8 GB)
        from reconciler.core.capacity import mem_reserve

        reserve, headroom = mem_reserve(6, 2, total)
        assert abs(float(m.group(1)) - (total - reserve - headroom)) < 0.6, (m.group(1), total)
    assert [j["state"] for j in res.status_all()["jobs"]] == ["refused"] * 3
    assert res.units() == []


def test_force_fits_against_free_memory_ignoring_the_ledger(res):
    res.pin(1.5)
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, mem="1G") == "r-1"
    r = res.run_job("true", mem="1G")
    assert r.code == 3 and r.one_line().startswith("busy: "), str(r)
    forced, forced_go = blocker(res, "3")
    assert res.started(*forced, mem="1G", extra=("--force",)) == "r-3"
    st = res.status("r-3")
    assert st["state"] == "running" and res.active("r-3") == "active"
    # still recorded: the forced job counts in the ledger
    assert res.status_all()["budget"]["mem_gb"] < 0.6
    r = res.run_job("true", mem="2G", extra=("--force",))  # more than is free even ignoring the ledger
    assert r.code in (1, 3), str(r)
    hold_go.touch()
    forced_go.touch()


# ---------------------------------------------------------------- item 4: notes

NOTE_PARENT = """\
import ctypes, subprocess, sys, time
if sys.argv[1] != "-":
    ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: how `ps` names us
r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
print(r.returncode, r.stdout.strip() or r.stderr.strip(), flush=True)
time.sleep(600)
"""


def _ancestor_named(name: str) -> bool:
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        if stat[stat.index("(") + 1: stat.rindex(")")] == name:
            return True
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return False


def _owner_of(res, note_id: str) -> int:
    import tomllib

    data = tomllib.loads(res.queue.read_text())
    (entry,) = [n for n in data.get("note", []) if n["id"] == note_id]
    return entry["owner_pid"]


def _note_from(res, name: str, *note_args: str, shell: bool = False):
    """Run `res note` from a parent process of ours (named `name`, "-" to keep its name); return
    (parent, outcome line)."""
    cli = [PY, "-m", "reconciler.cli", "note", *note_args]
    if shell:  # an intermediate shell that exits as soon as `res note` is done
        cli = ["sh", "-c", '"$@"; true', "sh", *cli]
    parent = res.popen([PY, "-c", NOTE_PARENT, name, *cli], stdout=subprocess.PIPE, text=True)
    code, _, line = parent.stdout.readline().strip().partition(" ")
    assert code == "0", line
    return parent, line


def _budget(res) -> float:
    """What the ledger claims of MemAvailable (reserve, headroom, notes, jobs' unused reservations) as
    of a pass: `res status --json`'s budget, taken from the MemAvailable it gives with it, so a
    machine whose free memory moves meanwhile does not move this figure."""
    res.ok("reconcile")
    b = res.status_all()["budget"]
    return b["mem_gb"] - b["mem_available_gb"]


def test_note_is_freed_when_its_owner_exits(res):
    if _ancestor_named("claude"):
        pytest.skip("running under a process named claude: it, not our parent, would own the note")
    before = _budget(res)
    parent, line = _note_from(res, "-", "--mem", "1G", "--for", "20m", "debugging in a shell")
    name = Path(f"/proc/{parent.pid}/comm").read_text().strip()  # python3, or python: a venv's link's name
    assert re.fullmatch(rf"r-1 noted: 1\.0 GB until ~{CLOCK}, while pid {parent.pid} \({name}\) runs; "
                        rf"free it: res release r-1", line), line
    assert _owner_of(res, "r-1") == parent.pid
    held = _budget(res)
    assert abs((before - held) - 1.0) < 1e-6, (before, held)
    st = res.status("r-1")
    assert st["state"] == "running" and st["kind"] == "note" and st["mem_gb"] == 1.0

    parent.kill()
    parent.wait()
    res.ok("reconcile")
    st = res.status("r-1")
    assert st["state"] == "done" and st["why"] == f"owner pid {parent.pid} is gone", st
    assert abs(_budget(res) - before) < 1e-6
    assert 'id = "r-1"' not in res.queue.read_text()  # gone from the desired file too


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_note_owner_is_the_nearest_agent_ancestor(res, agent):
    """Agents run each command in a shell that exits at once: the note lives as long as the agent
    session, not that shell, and the line says whose it is."""
    claude, line = _note_from(res, agent, "--mem", "512M", "--for", "20m", "claude's own work", shell=True)
    assert line.startswith("r-1 noted: 512 MB until ") and f", while pid {claude.pid} ({agent}) runs;" in line, line
    assert _owner_of(res, "r-1") == claude.pid  # not the shell in between
    res.ok("reconcile")  # the shell is gone by now; the note stays
    assert res.status("r-1")["state"] == "running"
    claude.kill()
    claude.wait()
    res.ok("reconcile")
    assert res.status("r-1")["why"] == f"owner pid {claude.pid} is gone"


def test_note_with_an_explicit_owner_or_none(res):
    shell, line = _note_from(res, "-", "--mem", "256M", "--for", "20m", "--until-expiry", "kept", shell=True)
    assert re.fullmatch(rf"r-1 noted: 256 MB until ~{CLOCK}; free it: res release r-1", line), line
    res.ok("reconcile")  # the shell that asked is gone: the note stays until its time or a release
    assert res.status("r-1")["state"] == "running"
    shell.kill()
    shell.wait()
    sleeper = res.popen(["sleep", "600"])
    r = res("note", "--mem", "256M", "--for", "20m", "--owner", str(sleeper.pid), "owned")
    assert r.code == 0 and f", while pid {sleeper.pid} (sleep) runs;" in r.one_line(), str(r)
    sleeper.kill()
    sleeper.wait()
    res.ok("reconcile")
    assert res.status("r-2")["why"] == f"owner pid {sleeper.pid} is gone"
    assert res.status("r-1")["state"] == "running"
    r = res("note", "--mem", "256M", "--for", "20m", "--owner", "4000000", "nobody")
    assert r.code == 2 and r.one_line("err").startswith("res: --owner 4000000: "), str(r)


def test_note_expires(res):
    r = res("note", "--mem", "512M", "--for", "2s", "short")
    assert r.code == 0 and r.one_line().startswith("r-1 noted: 512 MB until ~"), str(r)
    st = res.reconcile_until("r-1", lambda s: s["state"] == "done", "expired")
    assert st["why"].startswith("expired at "), st


def test_note_released(res):
    before = _budget(res)
    r = res("note", "--mem", "1G", "--for", "20m", "held by hand")
    assert r.code == 0, str(r)
    assert abs((before - _budget(res)) - 1.0) < 1e-6
    r = res("release", "r-1")
    assert r.code == 0 and r.one_line() == "r-1 released (done)", str(r)
    assert res.status("r-1")["why"] == "released"
    assert abs(_budget(res) - before) < 1e-6


# ---------------------------------------------------------------- item 5: status


def test_status_lines_budget_and_json(res):
    run_cmd, run_go = blocker(res, "1")
    assert res.started(*run_cmd, mem="512M", est="30m", extra=("--title", "status probe", "--project", "projx",
                                                               "--lock", "k")) == "r-1"
    r = res.run_job("true", extra=("--queue", "--lock", "k", "--title", "waits for k"))
    assert r.code == 0, str(r)
    assert res("note", "--mem", "256M", "--for", "10m", "a note").code == 0
    res.ok("reconcile")
    r = res.ok("status")
    lines = r.lines
    assert len(lines) == 6, r.out  # the header, one per live entry, the budget line, the agents slice's memory
    assert lines[0].split() == ["ID", "PROJECT", "TITLE", "STATE", "MEM", "USED", "PEAK", "CPUS", "START", "WHY", "/", "WHEN"]
    assert re.match(rf'r-1 +projx +"status probe" +running +512 MB +\d+ MB +- +0\.1 +{CLOCK} +ETA ~{CLOCK} '
                    rf'lock "k@{re.escape(str(res.work))}" \[by {re.escape(ME)}\]$', lines[1]), lines[1]
    # a queued entry says where it stands, when it is expected to start, and what it waits for
    assert re.match(rf'r-2 +\S+ +"waits for k" +queued +256 MB +- +- +0\.1 +- +position 1; est\. start ~{CLOCK}; '
                    rf"lock 'k@{re.escape(str(res.work))}' held by r-1 \[by {re.escape(ME)}\]$", lines[2]), lines[2]
    assert re.match(r'r-3 +\S+ +"a note" +running +256 MB ', lines[3]), lines[3]
    assert re.fullmatch(r"agents may use [\d.]+ [GM]B, [\d.]+ cpus? now; reserve [\d.]+ GB/0 cpus; "
                        r"sessions spent \$0\.00 today", lines[4]), lines[4]
    assert re.fullmatch(r"agents slice uses [\d.]+ [GM]B: jobs [\d.]+ [GM]B, unreserved [\d.]+ [GM]B "
                        r"\(of which [\d.]+ [GM]B reclaimable cache\)", lines[5]), lines[5]
    side = res.status_all()
    assert side["game"]["on"] is False and side["agents_slice"]["name"] == res.agents_slice

    run_go.touch()
    assert res("wait", "r-1").code == 0
    st = res.status("r-1")
    assert {"id", "state", "title", "mem_gb", "cpus", "rc", "peak_gb", "why"} <= set(st)
    assert (st["id"], st["state"], st["title"], st["mem_gb"], st["cpus"], st["rc"], st["why"]) == \
        ("r-1", "done", "status probe", 0.5, 0.1, 0, "exited 0")
    assert isinstance(st["peak_gb"], float) and 0 <= st["peak_gb"] < 0.5
    text = res.ok("status", "r-1").out
    assert "rc: 0" in text and "why: exited 0" in text and "peak_gb: " in text
    every = res.status_all()
    assert [j["id"] for j in every["jobs"]][:3] == ["r-1", "r-2", "r-3"]
    assert set(every["budget"]) >= {"mem_gb", "cpus", "reserve_gb", "reserve_cpus"}
    r = res("status", "r-99")
    assert r.code == 1 and r.one_line("err") == "res: no such entry: r-99", str(r)
    res.ok("release", "r-3")


# ---------------------------------------------------------------- item 6: wait


def test_wait_exits_with_the_jobs_own_code(res):
    """`res wait && git commit` must not commit broken code: the job's own code, as systemd-run --wait."""
    for n, code in enumerate((3, 0, 1, 7), start=1):
        assert res.started("sh", "-c", f"exit {code}") == f"r-{n}"
        r = res("wait", f"r-{n}", "--timeout", "1m")
        assert r.code == code, str(r)
        tail = f" \\(exit code {code}\\)" if code else ""
        assert re.fullmatch(rf"r-{n} done rc={code} peak \d+ MB in \d+ s{tail}", r.one_line()), str(r)
    st = json.loads(res.ok("wait", "r-2", "--json").out)
    assert (st["id"], st["state"], st["rc"], st["exit_code"], st["reason"]["code"]) == ("r-2", "done", 0, 0, "exited"), st


def test_wait_on_an_entry_that_never_ran_exits_125(res):
    res.pin(1.0)
    held, held_go = blocker(res, "1")
    assert res.started(*held, mem="768M") == "r-1"
    r = res.run_job("true", mem="512M")  # does not fit now: refused at once
    assert r.code == 3, str(r)
    r = res("wait", "r-2")
    assert r.code == 125 and r.one_line().startswith("r-2 refused: busy: "), str(r)
    held_go.touch()
    assert res("wait", "r-1").code == 0
    # a start that fails: the program is no longer executable when its turn comes
    hold, hold_go = blocker(res, "2")
    assert res.started(*hold, extra=("--lock", "k")) == "r-3"
    prog = res.work / "prog.sh"
    prog.write_text("#!/bin/sh\necho ran\n")
    prog.chmod(0o755)
    r = res.run_job(str(prog), extra=("--lock", "k", "--queue"))
    assert r.code == 0 and r.one_line().startswith("r-4 queued, position 1;"), str(r)
    prog.chmod(0o644)
    hold_go.touch()
    r = res("wait", "r-4", "--timeout", "1m")
    assert r.code == 125 and r.one_line().startswith("r-4 never ran (start failed: "), str(r)
    assert json.loads(res("wait", "r-4", "--json").out)["reason"]["code"] == "start_failed"


def test_wait_times_out_on_a_long_job(res):
    cmd, go = blocker(res, "1")
    assert res.started(*cmd) == "r-1"
    r = res("wait", "r-1", "--timeout", "1s")
    assert r.code == 124 and r.out == "" and r.one_line("err") == "res: r-1 still running after 1 s", str(r)
    assert res.active("r-1") == "active"
    go.touch()
    assert res("wait", "r-1").code == 0


# ---------------------------------------------------------------- item 7: release


def test_release_queued_running_and_stop(res):
    cmd, go = blocker(res, "1")
    assert res.started(*cmd, extra=("--lock", "k")) == "r-1"
    assert res.run_job("true", extra=("--queue", "--lock", "k")).code == 0
    r = res("release", "r-2")
    assert r.code == 0 and r.one_line() == "r-2 released (cancelled)", str(r)
    assert res.status("r-2")["state"] == "cancelled"
    assert 'id = "r-2"' not in res.queue.read_text()

    r = res("release", "r-1")
    assert r.code == 1 and r.out == "" and r.one_line("err") == "res: r-1 is running; --stop to kill it", str(r)
    assert res.active("r-1") == "active" and 'id = "r-1"' in res.queue.read_text()
    r = res("release", "r-1", "--stop")
    assert r.code == 0 and r.one_line().startswith("r-1 released (done"), str(r)
    st = res.status("r-1")
    assert st["state"] == "done" and st["why"] == "released", st
    assert res.active("r-1") != "active"
    r = res("release", "r-1")
    assert r.code == 0 and r.one_line() == "r-1 already done (released)", str(r)
    r = res("release", "r-77")
    assert r.code == 1 and r.one_line("err") == "res: no such entry: r-77", str(r)


# ---------------------------------------------------------------- item 8: a real MemoryMax kill


def test_job_over_its_memory_is_killed_and_says_so(res):
    hog = "x = 'x' * (300 << 20); print('survived', len(x))"
    assert res.started(PY, "-c", hog, mem="64M", extra=("--title", "memory hog")) == "r-1"
    r = res("wait", "r-1", "--timeout", "2m")
    assert r.code == 137 and r.one_line().startswith("r-1 done rc=137 "), str(r)  # 128 + SIGKILL
    st = res.status("r-1")
    assert st["state"] == "done" and st["rc"] == 137, st
    assert "memory limit" in st["why"] and "raise --mem" in st["why"], st["why"]
    log = (res.state / "logs" / "r-1.log").read_text()
    assert "survived" not in log
    # an agent that reads only the log knows why it ended: the unit's own last line says so
    assert log.splitlines()[-1].startswith("res: killed at its memory limit (64 MB"), log[-300:]
    assert st["peak_gb"] is not None and st["peak_gb"] <= 64 / 1024 + 0.01, st


# ---------------------------------------------------------------- item 9: no reconciler at the exit


def test_exit_code_and_peak_recorded_with_no_reconciler_running(res):
    job = "x = 'x' * (100 << 20); import sys; sys.exit(7)"
    assert res.started(PY, "-c", job, mem="512M") == "r-1"
    exit_record = res.state / "logs" / "r-1.exit.json"
    wait_for(lambda: exit_record.exists() and res.active("r-1") in ("inactive", "unknown", "failed"),
             "saw the job end")
    st = res.status("r-1")
    # nobody has settled it since it ended; status reads the exit record the unit wrote (read-only)
    assert (st["state"], st["rc"]) == ("exited", 7) and st["why"].endswith("(not settled yet: no pass since it ended)"), st
    line = [ln for ln in res.ok("status").lines if ln.startswith("r-1 ")][0]
    assert " exited " in line and "rc=7 exit code 7" in line, line
    res.ok("reconcile")
    st = res.status("r-1")
    assert (st["state"], st["rc"], st["why"]) == ("done", 7, "exit code 7"), st
    assert 0.09 <= st["peak_gb"] < 0.5, st
    r = res("wait", "r-1")
    assert r.code == 7 and re.fullmatch(r"r-1 done rc=7 peak \d+ MB in \d+ s \(exit code 7\)", r.one_line()), str(r)


# ---------------------------------------------------------------- item 10: dry run


def _plan_keys(plan: dict) -> list[tuple]:
    return [(a["kind"], a["id"], a.get("rc"), a.get("why")) for a in plan["actions"]]


def test_dry_run_changes_nothing_and_replays_from_a_world_file(res):
    res.pin(1.5)
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, mem="1G") == "r-1"
    go2 = res.tmp / "go-2"
    assert res.started("sh", "-c", BLOCK + "; exit 4", str(go2), mem="256M") == "r-2"
    assert res.run_job("true", mem="1G", extra=("--queue",)).code == 0  # r-3 waits for r-1
    hold_go.touch()
    go2.touch()
    for j in ("r-1", "r-2"):  # both end; no pass has seen it
        wait_for(lambda: (res.state / "logs" / f"{j}.exit.json").exists() and res.active(j) != "active",
                 f"saw {j} end")

    before, units = res.digest(), res.units()
    r = res.ok("reconcile", "--dry-run")
    text = r.lines
    assert any(re.match(r"\s+✓ settle\s+r-1\s", ln) for ln in text), r.out
    assert any(re.match(r"\s+✓ settle\s+r-2\s.*rc=4", ln) for ln in text), r.out
    assert any(re.match(r"\s+\+ start\s+r-3\s", ln) for ln in text), r.out
    assert text[-1] == "Plan: 1 to start, 2 to settle.", r.out
    live = json.loads(res.ok("reconcile", "--dry-run", "--json").out)
    world_file = res.tmp / "world.json"
    world_file.write_text(res.ok("observe", "--json").out)
    replay = json.loads(res.ok("reconcile", "--dry-run", "--world", str(world_file), "--json").out)
    assert res.digest() == before and res.units() == units  # nothing changed
    # status reads the ended jobs' exit records, but settles nothing: still not done
    assert [res.status(j)["state"] for j in ("r-1", "r-2", "r-3")] == ["exited", "exited", "queued"]

    assert _plan_keys(live) == _plan_keys(replay)
    assert sorted(_plan_keys(live)) == sorted([("settle", "r-1", 0, "exited 0"), ("settle", "r-2", 4, "exit code 4"),
                                               ("start", "r-3", None, None)])
    assert abs(live["budget_mem_gb"] - replay["budget_mem_gb"]) < 0.3
    # the real pass does what the plan said
    res.ok("reconcile")
    st = {j: res.status(j) for j in ("r-1", "r-2", "r-3")}
    assert (st["r-1"]["state"], st["r-1"]["rc"], st["r-2"]["state"], st["r-2"]["rc"]) == ("done", 0, "done", 4), st
    assert st["r-3"]["state"] in ("running", "exited", "done") and st["r-3"]["unit"] == res.unit("r-3"), st


def test_dry_run_with_a_bad_world_file_is_one_line(res):
    bad = res.tmp / "world.json"
    bad.write_text('{"mem_total_gb": "lots"')
    r = res("reconcile", "--dry-run", "--world", str(bad))
    assert r.code == 1 and r.out == "" and r.one_line("err") == \
        f'res: --world "{bad}": not JSON text (make one with res observe --json)', str(r)
    r = res("reconcile", "--world", str(bad))
    assert r.code == 2 and r.one_line("err").startswith("res: "), str(r)


# ---------------------------------------------------------------- item 11: res serve



def test_status_is_answered_by_the_loop_with_the_policy_it_enforces(res):
    res.env["RES_USER_RESERVE_GB"] = "3"
    assert res("note", "--mem", "256M", "--for", "10m", "held by me").code == 0
    res.ok("reconcile")
    here = res.status_all()
    serve = serving(res)
    other = {"RES_USER_RESERVE_GB": "5"}  # the caller's environment differs from the loop's
    answer = json.loads(res.ok("status", "--json", env=other).out)
    assert answer["budget"]["reserve_gb"] == 3  # the loop's policy: the loop answered
    assert answer["jobs"] == here["jobs"]  # the same entries as read without the loop
    r = res("status", "r-99", env=other)
    assert r.code == 1 and r.one_line("err") == "res: no such entry: r-99", str(r)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(30) == 0
    assert json.loads(res.ok("status", "--json", env=other).out)["budget"]["reserve_gb"] == 5  # read here again


def test_serve_answers_runs_and_is_the_single_writer(res):
    res.env["RES_TICK_S"] = "0.5"
    res.pin(1.5)
    serve = serving(res)
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, mem="1G") == "r-1"
    st = res.status("r-1")
    host, pid, nonce, started = st["attached_by"].split("/")
    assert pid == str(serve.pid), st["attached_by"]  # the loop started it, not the CLI

    # a second loop on the same state directory says who holds it
    r = res("serve")
    assert r.code == 1 and r.one_line("err") == f"res: res serve is already running for {res.state} (pid {serve.pid})", str(r)

    # a queued request starts by itself when the holder ends: the loop's interval pass
    queued, queued_go = blocker(res, "2")
    r = res.run_job(*queued, mem="1G", extra=("--queue",))
    assert r.code == 0 and r.one_line().startswith("r-2 queued, position 1;"), str(r)
    hold_go.touch()
    wait_for(lambda: res.status("r-2")["state"] == "running", "saw r-2 started by the loop", step=0.2)
    st = res.status("r-2")
    assert st["attached_by"].split("/")[1] == str(serve.pid)
    assert res.status("r-1")["state"] == "done" and res.status("r-1")["rc"] == 0

    # `res reconcile` asks the loop for a pass, and prints it as it would without one
    r = res("reconcile", "--json")
    assert r.code == 0 and r.err == "" and "actions" in json.loads(r.out), str(r)
    r = res("reconcile")
    assert r.code == 0 and (r.lines[-1].startswith(("Plan:", "No changes"))), str(r)

    serve.send_signal(signal.SIGTERM)
    out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0 and err == "", err
    assert not (res.state / "serve.sock").exists()
    assert res.active("r-2") == "active"  # a job outlives the loop
    queued_go.touch()
    assert res("wait", "r-2").code == 0  # and is settled without it


# ---------------------------------------------------------------- item 13: a hand-broken queue.toml


def _break(kind: str, text: str) -> tuple[str, int, str]:
    """(broken text, the line to blame, a word the error must contain)."""
    lines = text.splitlines(keepends=True)
    r3 = text.index('id = "r-3"')
    if kind == "syntax":  # a line of garbage in the middle of r-3's table
        at = text.count("\n", 0, r3) + 1  # the line after r-3's id line (0-based index)
        lines.insert(at, "this is = = not toml\n")
        return "".join(lines), at + 1, "TOML"
    if kind == "truncated":  # cut off inside r-3's title string
        cut = text.index('title = "', r3) + len('title = "') + 3
        broken = text[:cut]
        return broken, broken.count("\n") + 1, "TOML"
    if kind == "type":  # a wrong type in r-3
        start = text.index("mem_gb = ", r3)
        end = text.index("\n", start)
        broken = text[:start] + 'mem_gb = "lots"' + text[end:]
        return broken, text.count("\n", 0, start) + 1, "mem_gb"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["syntax", "truncated"])
def test_a_hand_broken_queue_file_stops_nothing_and_loses_nothing(res, kind):
    keep, keep_go = blocker(res, "1")
    assert res.started(*keep, extra=("--title", "keeps running")) == "r-1"
    lock, lock_go = blocker(res, "2")
    assert res.started(*lock, extra=("--lock", "k", "--title", "holds k")) == "r-2"
    waits, waits_go = blocker(res, "3")
    r = res.run_job(*waits, extra=("--queue", "--lock", "k", "--title", "waits for k"))
    assert r.code == 0 and r.one_line().startswith("r-3 queued"), str(r)
    assert res("note", "--mem", "256M", "--for", "1h", "a note").code == 0  # r-4
    good = res.queue.read_text()

    broken, line, word = _break(kind, good)
    res.queue.write_text(broken)
    where = f"{res.queue}:{line}: "

    def names_the_file(r, code=None):
        said = [ln for ln in (r.out + r.err).splitlines() if where in ln]
        assert len(said) == 1 and word in said[0], f"{kind}: no one line naming {where}: {r}"
        if code is not None:
            assert r.code == code, str(r)

    units = res.units()
    r = res.run_job("true")
    names_the_file(r, 1)
    assert r.one_line("err").startswith(f"res: {where}")
    names_the_file(res("note", "--mem", "1G", "--for", "1m", "x"), 1)
    names_the_file(res("release", "r-3"), 1)
    lock_go.touch()  # r-2 ends: its lock is free, r-3 would start, but the file that says so is broken
    wait_for(lambda: res.active("r-2") != "active", "saw r-2 end")
    r = res("reconcile")
    names_the_file(r, 1)
    assert r.one_line("err").startswith(f"res: {where}")
    names_the_file(res("reconcile", "--dry-run"), 1)
    r = res("reconcile", "--dry-run", "--json")
    assert r.code == 1 and r.one_line("err").startswith(f"res: {where}") and json.loads(r.out)["actions"] == [], str(r)
    names_the_file(res("status"), 0)
    names_the_file(res("status", "r-3"), 0)
    assert kind in json.dumps(res.status_all()["notices"]) or where in json.dumps(res.status_all()["notices"])
    st = {j: res.status(j) for j in ("r-1", "r-2", "r-3", "r-4")}
    assert st["r-2"]["state"] == "done" and st["r-2"]["rc"] == 0  # an observed exit is still settled
    assert (st["r-1"]["state"], st["r-3"]["state"], st["r-4"]["state"]) == ("running", "queued", "running"), st
    assert res.active("r-1") == "active" and res.active("r-3") != "active"
    assert [u for u in res.units() if u[0] != res.unit("r-2")] == [u for u in units if u[0] != res.unit("r-2")]
    assert res.queue.read_text() == broken  # nobody rewrote the user's file

    res.queue.write_text(good)  # the fix
    res.ok("reconcile")
    st = {j: res.status(j) for j in ("r-1", "r-3", "r-4")}
    assert (st["r-1"]["state"], st["r-3"]["state"], st["r-4"]["state"]) == ("running", "running", "running"), st
    assert res.active("r-1") == "active" and res.active("r-3") == "active"
    text = res.queue.read_text()
    for j in ("r-1", "r-3", "r-4"):
        assert f'id = "{j}"' in text
    assert 'id = "r-2"' not in text  # finished: retired from the file once it could be edited
    assert not [ln for ln in res.ok("status").lines if ln.startswith("res: ")]
    for go in (keep_go, waits_go):
        go.touch()


def test_one_hand_broken_entry_is_set_aside_and_the_rest_goes_on(res):
    """A wrong value in one entry: that entry is held (neither started nor taken as released), named in
    one line, and everyone else's work goes on."""
    lock, lock_go = blocker(res, "2")
    assert res.started(*lock, extra=("--lock", "k", "--title", "holds k")) == "r-1"
    waits, waits_go = blocker(res, "3")
    r = res.run_job(*waits, extra=("--queue", "--lock", "k", "--title", "waits for k"))
    assert r.code == 0 and r.one_line().startswith("r-2 queued"), str(r)
    good = res.queue.read_text()
    start = good.index("mem_gb = ", good.index('id = "r-2"'))
    broken = good[:start] + 'mem_gb = "lots"' + good[good.index("\n", start):]
    res.queue.write_text(broken)
    where = f"{res.queue}:{good.count(chr(10), 0, start) + 1}: job r-2: mem_gb"
    assert res.started("true") == "r-3"  # the rest goes on
    lock_go.touch()
    wait_for(lambda: res.active("r-1") != "active", "saw r-1 end")
    r = res("reconcile")
    assert r.code == 1 and any(ln.startswith(f"res: {where}") and "set aside" in ln for ln in r.err_lines), str(r)
    assert res.status("r-2")["state"] == "queued"  # its lock is free, but its entry is unusable: held
    assert any(where in ln for ln in res.ok("status").lines)
    text = res.queue.read_text()
    assert 'mem_gb = "lots"' in text  # nobody rewrote the user's entry
    res.queue.write_text(text.replace('mem_gb = "lots"', "mem_gb = 0.25"))  # the fix
    res.ok("reconcile")
    assert res.status("r-2")["state"] in ("running", "exited", "done")
    waits_go.touch()


# ---------------------------------------------------------------- item 14: sizes and durations


def test_sizes_and_durations(res):
    cmd, go = blocker(res, "1")
    assert res.started(*cmd, mem="512M", est="90s") == "r-1"
    st = res.status("r-1")
    assert st["mem_gb"] == 0.5 and st["eta"] - st["started"] == 90
    assert unit_props(res.unit("r-1"))["MemoryMax"] == GIB // 2
    go.touch()
    assert res.started("true", mem="1.5", est="2h") == "r-2"
    st = res.status("r-2")
    assert st["mem_gb"] == 1.5 and st["eta"] - st["started"] == 7200
