"""File tier: who asks (observed/asker.py) and a lock's scope (config/gitrepo.py), read from real git
checkouts made by `git` itself (a repository, a worktree of it made by `git worktree add`, a second
repository) and from this process's own environment and ancestry."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from reconciler.config.gitrepo import branch, checkout, main_tree
from reconciler.observed.asker import asker

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def git(*args: str, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repos(tmp_path):
    """(main checkout on branch main, a worktree of it on branch fix-login, another repository)."""
    app, other = tmp_path / "app", tmp_path / "other"
    for d in (app, other):
        d.mkdir()
        git("init", "-q", "-b", "main", cwd=d)
        git("commit", "-q", "--allow-empty", "-m", "first", cwd=d)
    (app / "src" / "deep").mkdir(parents=True)
    worktree = tmp_path / "app-fix-login"
    git("worktree", "add", "-q", "-b", "fix-login", str(worktree), cwd=app)
    return app, worktree, other


def test_worktrees_of_one_repository_share_its_main_tree_and_two_repositories_do_not(repos, tmp_path):
    app, worktree, other = repos
    assert main_tree(str(app)) == str(app)
    assert main_tree(str(app / "src" / "deep")) == str(app)  # from a subdirectory
    assert main_tree(str(worktree)) == str(app)  # the worktree: its .git file, then commondir
    assert main_tree(str(other)) == str(other)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main_tree(str(plain)) == str(plain)  # outside git: the directory itself


def test_the_task_is_the_branch_checked_out_where_the_caller_is(repos):
    app, worktree, _ = repos
    assert branch(str(app / "src")) == "main" and branch(str(worktree)) == "fix-login"
    git("checkout", "-q", "--detach", cwd=app)
    assert branch(str(app)) is None  # detached: no branch to name


def test_asker_takes_flags_then_the_environment_then_the_tree_and_the_branch(repos):
    _, worktree, _ = repos
    me = os.getpid()
    got = asker({"USER": "alice"}, me, checkout(str(worktree)))
    assert got["task"] == "fix-login" and "batch" not in got and "reply_to" not in got
    # no agent CLI among this test's ancestors (pytest, a shell, the CI runner): the user
    assert got["by"] == "alice" or got["by"].split()[1] == "pid", got
    env = {"USER": "alice", "RES_BY": "review-bot", "RES_TASK": "release 2.1", "RES_ID": "r-12",
           "RES_REPLY_TO": "unix:/run/user/1000/review-bot.sock"}
    assert asker(env, me, checkout(str(worktree))) == {"by": "review-bot", "task": "release 2.1", "batch": "r-12",
                                             "reply_to": "unix:/run/user/1000/review-bot.sock"}
    flagged = asker(env, me, checkout(str(worktree)), by="carol", task="hotfix")
    assert (flagged["by"], flagged["task"]) == ("carol", "hotfix")
    empty = asker(env, me, checkout(str(worktree)), by="", task="")  # an empty flag is no flag
    assert (empty["by"], empty["task"]) == ("review-bot", "release 2.1")


def test_nothing_secret_is_recorded_and_a_secret_flag_is_refused(repos):
    _, worktree, _ = repos
    env = {"USER": "alice", "RES_BY": "ghp_" + "a" * 36, "RES_REPLY_TO": "https://bot:hunter2@chat.example.org/hook",
           "RES_TASK": "two\nlines", "RES_ID": "r-0; rm -rf /"}
    got = asker(env, os.getpid(), checkout(str(worktree)))
    assert got.get("by") != env["RES_BY"] and "reply_to" not in got  # a token, a URL with a password: dropped
    assert got["task"] == "two lines" and "batch" not in got  # one line; not a job id: no batch
    with pytest.raises(ValueError, match="--by looks like a secret"):
        asker(env, os.getpid(), checkout(str(worktree)), by="sk-ant-" + "x" * 40)


def test_doctor_reads_the_instructions_files_at_the_repository_root(repos):
    from reconciler.commands.doctor import gather_rules
    from reconciler.core.doctor import Facts

    app, worktree, other = repos
    (app / "CLAUDE.md").write_text("# house rules\nTests: res run --wait --mem 2G --for 10m -- pytest\n")
    (app / "AGENTS.md").write_text("# agents\nBe nice.\n")
    f = Facts(user="me")
    gather_rules(f, str(app / "src" / "deep"))
    assert (f.rules_repo, f.rules_files, f.rules_mention) == (str(app), ("CLAUDE.md", "AGENTS.md"), ("CLAUDE.md",))
    f = Facts(user="me")
    gather_rules(f, str(worktree))  # a worktree has its own checkout of the files (none committed here)
    assert (f.rules_repo, f.rules_files) == (str(worktree), ())
    f = Facts(user="me")
    gather_rules(f, "/")
    assert f.rules_repo == ""


def test_wait_tells_once_when_the_last_pass_saw_the_job_throttled(tmp_path):
    import io

    from reconciler.config.paths import Paths
    from reconciler.core.models import JobRecord, Phase, Request
    from reconciler.loop.waiting import ThrottleWatch
    from reconciler.recorded.store import Store

    paths = Paths(tmp_path / "state")
    req = Request(id="r-3", title="make e2e", mem_gb=2.0, est_s=600, created=1.0, cmd=["make"], by="codex pid 77")
    with Store.open(paths) as s:
        s.put(JobRecord(request=req, phase=Phase.running, started=2.0))
        s.set_meta_json("last_tick", {"world": {"jobs": {"r-3": {"mem_used_gb": 1.2, "pressure_avg60": 40.0}}}})
    out = io.StringIO()
    watch = ThrottleWatch(paths, "r-3", out=out)
    watch.looked_at = float("-inf")
    watch.poll()
    assert out.getvalue() == ""  # 1.2 of 2 GB: not at its limit, whatever the pressure
    with Store.open(paths) as s:
        s.set_meta_json("last_tick", {"world": {"jobs": {"r-3": {"mem_used_gb": 1.9, "pressure_avg60": 40.0}}}})
    watch.looked_at = float("-inf")
    watch.poll()
    watch.looked_at = float("-inf")
    watch.poll()
    assert out.getvalue() == ('r-3 "make e2e" (by codex pid 77) is throttled at its own limit (1.9 GB of 2.0 GB, '
                              "memory pressure 40%); it would run faster with more --mem\n")


def test_a_fifo_or_a_huge_file_planted_as_git_metadata_is_not_read(tmp_path):
    """A hostile checkout: HEAD a FIFO (opening it would block `res run`), a `.git` file of 1 MB."""
    repo = tmp_path / "r"
    (repo / ".git").mkdir(parents=True)
    os.mkfifo(repo / ".git" / "HEAD")
    assert branch(str(repo)) is None and main_tree(str(repo)) == str(repo)
    big = tmp_path / "big"
    big.mkdir()
    (big / ".git").write_text("gitdir: " + "x" * (1 << 20))
    assert main_tree(str(big)) == str(big) and branch(str(big)) is None
