"""Issue 14 through the real command line on a real systemd user manager: who asked (a job's own
`res run` recorded as part of it), locks scoped to a repository (two worktrees of one real git
repository, made by `git worktree add`), and the --force advice when a holder does not use what it
reserved. Nothing asserts on wall-clock time; every job that must run for a while ends when the test
creates its file."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from clihelp import CLOCK, PY, res, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd

BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def blocker(res, name: str):
    go = res.tmp / f"go-{name}"
    return ["sh", "-c", BLOCK, str(go)], go


def git(*args: str, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, timeout=30)


def test_a_res_run_made_by_a_jobs_command_is_recorded_as_part_of_it(res):
    """The outer job's environment carries RES_ID (and who asked, and the task): the `res run` its
    command makes is recorded as `batch r-1`, asked by the same one, for the same task."""
    inner = f"{PY} -m reconciler.cli run --mem 64M --for 1m --cpus 0.1 --title inner -- true; echo inner-rc=$?"
    r = res.run_job("sh", "-c", inner, extra=("--by", "review-bot", "--task", "release 2.1", "--title", "outer"))
    assert r.code == 0 and r.one_line().startswith("r-1 started"), str(r)
    outer = res.reconcile_until("r-1", lambda s: s["state"] == "done", "outer job done")
    assert outer["rc"] == 0 and outer["by"] == {"name": "review-bot", "task": "release 2.1"}, outer
    assert "inner-rc=0" in (res.state / "logs" / "r-1.log").read_text()
    st = res.status("r-2")
    assert st["title"] == "inner" and st["by"] == {"name": "review-bot", "task": "release 2.1", "batch": "r-1"}, st


def test_a_live_entry_in_status_ends_with_who_asked(res):
    cmd, go = blocker(res, "a")
    job = res.started(*cmd, extra=("--by", "alice", "--task", "fix-login"), env={"RES_REPLY_TO": "mailto:alice@example.org"})
    line = next(ln for ln in res.ok("status").out.splitlines() if ln.startswith(job))
    assert line.endswith("[by alice fix-login, message mailto:alice@example.org]"), line
    assert res.status(job)["by"] == {"name": "alice", "task": "fix-login", "message": "mailto:alice@example.org"}
    go.touch()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_two_worktrees_of_one_repository_contend_for_one_lock_and_other_repositories_do_not(res):
    app, other = res.tmp / "app", res.tmp / "other"
    for d in (app, other):
        d.mkdir()
        git("init", "-q", "-b", "main", cwd=d)
        git("commit", "-q", "--allow-empty", "-m", "first", cwd=d)
    wt = res.tmp / "app-fix"
    git("worktree", "add", "-q", "-b", "fix", str(wt), cwd=app)

    cmd, go = blocker(res, "gate")
    first = res.started(*cmd, extra=("--lock", "gate", "--by", "agent-a"), cwd=app)
    assert res.status(first)["lock"] == f"gate@{app}"
    # the same key from the other worktree of the same repository: busy, naming the holder and who asked
    r = res.run_job("true", extra=("--lock", "gate"), cwd=wt)
    assert r.code == 3, str(r)
    assert re.fullmatch(rf'busy: lock "gate@{re.escape(str(app))}" held by app "sh -c .*" \({first}, by agent-a\) '
                        rf"until ~{CLOCK}; retry after ~{CLOCK} or work on something else", r.one_line()), str(r)
    # the same key in another repository: no contention
    other_job = res.run_job("true", extra=("--lock", "gate"), cwd=other)
    assert other_job.code == 0 and other_job.one_line().startswith("r-3 started"), str(other_job)
    # --force never overrides a lock
    r = res.run_job("true", extra=("--lock", "gate", "--force"), cwd=wt)
    assert r.code == 3 and "--force never overrides a lock" in r.one_line(), str(r)
    line = next(ln for ln in res.ok("status").out.splitlines() if ln.startswith(first))
    assert f'lock "gate@{app}" [by agent-a main]' in line, line
    go.touch()


HOLD_1G = ("import os, sys, time\n"
           "block = bytearray(1 << 30)\n"
           "for i in range(0, len(block), 4096): block[i] = 1\n"  # touched: really in use
           "open(sys.argv[1], 'w').close()\n"
           "while not os.path.exists(sys.argv[2]): time.sleep(0.05)\n")


def test_a_holder_that_does_not_use_its_memory_makes_the_busy_line_offer_force_and_force_starts(res):
    """Agents may use ~3 GB; a job reserves 2 GB and uses next to nothing: 1.5 GB more does not fit
    the ledger (1 GB left) but does fit what is really free: the line says so (exit 3), and the same
    request with --force starts (here: a job that then really uses 1 GB). Once it does, a --force
    request for more than is really free is refused, saying how much is."""
    res.shape(free_gb=3.0)
    cmd, go = blocker(res, "idle")
    holder = res.started(*cmd, mem="2G", extra=("--by", "agent-a"))
    r = res.run_job("true", mem="1.5G")
    assert r.code == 3, str(r)
    m = re.fullmatch(rf'busy: 2.0 GB held by \S+ "sh -c .*" \({holder}, by agent-a\) until ~{CLOCK}; '
                     rf"[\d.]+ (GB|MB) free for agents; retry after ~{CLOCK} or work on something else; "
                     r"([\d.]+) GB really free beyond the reserve: --force starts it past the ledger "
                     r"\(only if the holders will not use what they reserved\)", r.one_line())
    assert m and float(m.group(2)) >= 1.5, str(r)
    allocated = res.tmp / "allocated"
    forced = res.run_job(PY, "-c", HOLD_1G, str(allocated), str(go), mem="1.5G", extra=("--force",))
    assert forced.code == 0 and re.match(r"r-\d+ started", forced.one_line()), str(forced)
    wait_for(allocated.exists, "the forced job holds 1 GB", 60)
    r = res.run_job("true", mem="2.5G", extra=("--force",))
    m = re.match(r"busy even with --force: only ([\d.]+) (GB|MB) really free beyond the reserve; ", r.one_line())
    assert r.code == 3 and m and (m.group(2) == "MB" or float(m.group(1)) < 2.5), str(r)
    go.touch()
