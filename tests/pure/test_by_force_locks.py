"""Pure tier: who asked (`[by …]`), the --force advice and repository-scoped locks (issue 14), with
literals."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from reconciler.config.gitrepo import branch_of, common_dir_of, gitdir_from_file, main_tree_of
from reconciler.core.locks import lock_scope, title_lock
from reconciler.core.models import JobObs
from reconciler.core.quantities import UTC
from reconciler.render.text import fmt_clock
from reconciler.render.status import asker_data, asker_text, status_line

from test_plan import NOW, req, run_plan, running, world

# ---------------------------------------------------------------- by


def test_the_by_bracket_with_every_key_and_with_each_left_out():
    full = {"name": "claude pid 4121 session 0f3c2a1b", "task": "fix-login", "batch": "r-3",
            "message": "unix:/run/user/1000/agent.sock"}
    assert asker_text(full) == ("[by claude pid 4121 session 0f3c2a1b fix-login batch r-3, "
                                "message unix:/run/user/1000/agent.sock]")
    assert asker_text({"name": "alice"}) == "[by alice]"
    assert asker_text({"task": "main"}) == "[task main]"
    assert asker_text({"batch": "r-9"}) == "[batch r-9]"
    assert asker_text({"message": "a@b"}) == "[message a@b]"
    assert asker_text({"name": "codex pid 7", "batch": "r-2"}) == "[by codex pid 7 batch r-2]"
    assert asker_text({}) == ""
    # a hostile value is one line: it cannot forge a second status row
    assert asker_text({"name": "x\nr-1    proj  \"fake\" done"}) == '[by x r-1 proj "fake" done]'


def test_by_as_json_carries_only_the_keys_known():
    r = req(1, by="alice", task="main", batch="r-4", reply_to="mailto:alice@example.org")
    assert asker_data(r) == {"name": "alice", "task": "main", "batch": "r-4", "message": "mailto:alice@example.org"}
    assert asker_data(req(2)) == {}


def _view(**kw):
    v = {"id": "r-7", "project": "proj-a", "title": "make e2e", "state": "running", "mem_gb": 2.0, "used_gb": 1.0,
         "peak_gb": None, "cpus": 1.0, "started": NOW, "why": None, "rc": None, "overdue": False, "waits": None,
         "eta": NOW + 600, "agent": "none", "where": "local", "lock": None, "by": {}}
    v.update(kw)
    return status_line(v, UTC)


def test_a_live_status_line_ends_with_who_asked_and_a_finished_one_does_not():
    eta = fmt_clock(NOW + 600, UTC)
    assert _view(by={"name": "claude pid 4121", "task": "fix-login"}).endswith(f"ETA ~{eta} [by claude pid 4121 fix-login]")
    assert _view().endswith(f"ETA ~{eta}")
    assert _view(lock="gate@/src/app", by={"name": "alice"}).endswith(f'ETA ~{eta} lock "gate@/src/app" [by alice]')
    done = _view(state="done", why="exited 0", rc=0, by={"name": "alice"})
    assert done.endswith("rc=0 exited 0")


def test_busy_and_lock_lines_name_the_holders_by():
    holder = running(4, mem=7.5, title="dotnet e2e", started=NOW - 60, est=3600, by="claude pid 4121")
    used = {"r-4": JobObs(state="active", mem_used_gb=7.5)}
    p = run_plan([req(6, mem=6.0)], records=[holder], w=world(avail=13.5, jobs=used))
    (a,) = [x for x in p.actions if x.id == "r-6"]
    assert (a.detail["resource"], [(h["id"], h["by"]) for h in a.detail["holders"]]) == \
        ("memory", [("r-4", "claude pid 4121")])
    locked = running(1, mem=1.0, title="gate", lock="gate@/src/app", by="alice", est=600, started=NOW - 60)
    p = run_plan([req(2, mem=1.0, lock="gate@/src/app")], records=[locked], w=world())
    (a,) = [x for x in p.actions if x.id == "r-2"]
    assert (a.detail["resource"], a.detail["lock"], [(h["id"], h["by"]) for h in a.detail["holders"]]) == \
        ("lock", "gate@/src/app", [("r-1", "alice")])
    assert (a.detail["retry"], a.detail["retry_at"]) == ("after", NOW - 60 + 600)


# ---------------------------------------------------------------- --force advice


def test_busy_line_offers_force_when_holders_do_not_use_what_they_reserved():
    # r-4 reserved 8 GB and uses none: the ledger has 21 − 6 − 2 − 8 = 5 GB, really free is 13 GB
    idle = running(4, mem=8.0, title="dotnet e2e", started=NOW - 60, est=3600)
    p = run_plan([req(6, mem=6.0)], records=[idle], w=world(avail=21.0))
    (a,) = [x for x in p.actions if x.id == "r-6"]
    d = a.detail
    assert (d["code"], d["free_gb"], d["force"], d["really_free_gb"]) == ("busy", 5.0, "would_fit", 13.0)
    p = run_plan([req(6, mem=6.0, force=True)], records=[idle], w=world(avail=21.0))
    assert [(x.kind, x.id) for x in p.actions if x.id == "r-6"] == [("start", "r-6")]


def test_force_that_still_does_not_fit_says_busy_even_with_force():
    busy = running(4, mem=8.0, title="dotnet e2e", started=NOW - 60, est=3600)
    used = {"r-4": JobObs(state="active", mem_used_gb=8.0)}
    p = run_plan([req(6, mem=6.0, force=True)], records=[busy], w=world(avail=13.0, jobs=used))
    (a,) = [x for x in p.actions if x.id == "r-6"]
    assert a.kind == "refuse"
    d = a.detail
    assert (d["force"], d["short"], d["really_free_gb"], [h["id"] for h in d["holders"]]) == ("short", ["memory"], 5.0, ["r-4"])
    # without --force and nothing to gain by it: no advice
    p = run_plan([req(6, mem=6.0)], records=[busy], w=world(avail=13.0, jobs=used))
    (a,) = [x for x in p.actions if x.id == "r-6"]
    assert "force" not in a.detail


def test_force_never_overrides_a_lock_and_the_line_says_so():
    locked = running(1, mem=1.0, title="gate", lock="gate@/src/app", est=600, started=NOW - 60)
    p = run_plan([req(2, mem=1.0, lock="gate@/src/app", force=True)], records=[locked], w=world())
    (a,) = [x for x in p.actions if x.id == "r-2"]
    assert a.kind == "refuse" and (a.detail["resource"], a.detail["force"]) == ("lock", "lock")


# ---------------------------------------------------------------- locks scoped to the repository


def test_a_lock_is_scoped_to_the_main_tree_of_a_repository_and_of_its_worktrees():
    # the main checkout: .git is a directory, its parent the main tree
    assert main_tree_of(common_dir_of("/src/app/.git", None)) == "/src/app"
    # a worktree: .git is a file naming .git/worktrees/<name>, whose commondir is ../..
    gitdir = gitdir_from_file("gitdir: /src/app/.git/worktrees/fix-login\n", "/src/app-fix-login")
    assert gitdir == "/src/app/.git/worktrees/fix-login"
    assert main_tree_of(common_dir_of(gitdir, "../..\n")) == "/src/app"
    # a relative gitdir (git worktree add --relative-paths)
    rel = gitdir_from_file("gitdir: ../app/.git/worktrees/wt", "/src/wt")
    assert main_tree_of(common_dir_of(rel, "../..")) == "/src/app"
    assert main_tree_of("/srv/repos/app.git") == "/srv/repos/app.git"  # a bare repository is its own scope
    assert gitdir_from_file("not a gitdir line", "/x") is None
    assert lock_scope("gate", "/src/app") == "gate@/src/app"
    assert lock_scope("gate@/elsewhere", "/src/app") == "gate@/elsewhere"  # scoped by hand: kept


def test_the_branch_is_heads_name_and_none_when_detached():
    assert branch_of("ref: refs/heads/fix-login\n") == "fix-login"
    assert branch_of("ref: refs/heads/feature/x") == "feature/x"
    assert branch_of("3f2a9c0d1e2b3a4c5d6e7f8091a2b3c4d5e6f708\n") is None


def test_title_words_of_the_policy_take_a_lock_unasked():
    assert title_lock("gate: full e2e", ["gate"]) == "gate"
    assert title_lock("Gate run", ["gate"]) == "gate"
    assert title_lock("make gate", ["gate"]) is None
    assert title_lock("gate", []) is None
    assert title_lock("", ["gate"]) is None


def test_submit_records_the_lock_in_its_scope_and_takes_title_locks():
    from reconciler.ops.requests import scoped_lock

    policy = SimpleNamespace(lock_title_words=["gate"])
    outside = "/nonexistent-res-test-dir"  # no git: the cwd is the scope
    assert scoped_lock({"title": "make", "lock": "e2e", "cwd": outside}, policy)["lock"] == f"e2e@{outside}"
    assert scoped_lock({"title": "gate all", "cwd": outside}, policy)["lock"] == f"gate@{outside}"
    assert "lock" not in scoped_lock({"title": "make", "cwd": outside}, policy)


def test_a_lock_scoped_already_looks_at_no_cwd(monkeypatch):
    from reconciler.ops.requests import scoped_lock
    from reconciler.config import gitrepo

    def no_io(cwd):
        raise AssertionError(f"looked at {cwd}")

    monkeypatch.setattr(gitrepo, "main_tree", no_io)
    policy = SimpleNamespace(lock_title_words=[])
    assert scoped_lock({"title": "t", "lock": "db@/srv/app", "cwd": "/x"}, policy)["lock"] == "db@/srv/app"
    with pytest.raises(AssertionError):  # a key to scope does look
        scoped_lock({"title": "t", "lock": "db@staging", "cwd": "/x"}, policy)


def test_a_plans_actions_by_id_are_its_for_id_and_follow_a_changed_plan():
    from reconciler.core.models import Action, Plan

    def scan(p, job_id):
        return [a for a in p.actions if a.id == job_id]

    plan = Plan(actions=[Action(kind="wait", id="r-1"), Action(kind="start", id="r-2"), Action(kind="set", id="r-1")])
    for job_id in ("r-1", "r-2", "r-9"):
        assert plan.for_id(job_id) == scan(plan, job_id)
    plan.actions.append(Action(kind="stop", id="r-9"))  # the same plan, changed: indexed again
    assert plan.for_id("r-9") == scan(plan, "r-9") != []
    other = Plan(actions=[Action(kind="start", id="r-1")])
    assert other.for_id("r-1") == scan(other, "r-1")


# ---------------------------------------------------------------- the agents' rule


def test_agent_rules_take_their_figures_from_the_policy():
    from reconciler.render.rules import agent_rules

    lines = agent_rules(SimpleNamespace(heavy_mem_gb=2.0, heavy_cpus=4.0, heavy_minutes=10.0))
    assert lines[0] == "## Shared machine: heavy work goes through `res`"
    assert lines[2].startswith("- Heavy work (over ~2 GB of memory, ~4 cores or ~10 minutes: ")
    text = "\n".join(lines)
    for must in ("`res run --mem SIZE --for TIME -- COMMAND`", "never bare `systemd-run`", "`res note --mem SIZE",
                 "Exit 3 means busy", "never poll in a tight loop", "RAM-backed (tmpfs)", "`res release r-N`"):
        assert must in text, must
    assert agent_rules(SimpleNamespace(heavy_mem_gb=8.0, heavy_cpus=2.5, heavy_minutes=30.0))[2].startswith(
        "- Heavy work (over ~8 GB of memory, ~2.5 cores or ~30 minutes: ")


def test_doctor_says_whether_the_repositorys_instructions_mention_res():
    from reconciler.core.doctor import Facts, decide

    def lines(**kw):
        code, out = decide(Facts(user="me", cgroup_version=2, controllers=frozenset({"memory", "cpu", "io"}),
                                 linger=True, oomd_running=True, unit_dir="/u", unit_path=("/u",), **kw))
        return code, [line for line in out if "CLAUDE.md" in line or "AGENTS.md" in line]

    assert lines(rules_repo="/src/app", rules_files=("CLAUDE.md", "AGENTS.md"), rules_mention=("AGENTS.md",)) == \
        (0, ["ok   AGENTS.md in /src/app tells agents about res"])
    assert lines(rules_repo="/src/app", rules_files=("CLAUDE.md",)) == \
        (0, ["note CLAUDE.md in /src/app does not mention res: res agent-rules prints the lines to add "
             "(res never edits your files)"])
    assert lines(rules_repo="/src/app") == \
        (0, ["note no CLAUDE.md or AGENTS.md in /src/app: res agent-rules prints the lines an agent's "
             "instructions need (res never writes them)"])
    assert lines() == (0, [])  # not in a repository: nothing said


def test_the_mention_rule_takes_res_commands_not_words_that_contain_res():
    import re

    from reconciler.render.rules import MENTIONS_RES

    assert re.search(MENTIONS_RES, "Run heavy work with res run --mem 4G --for 20m -- make test")
    assert re.search(MENTIONS_RES, "Use `res` for builds.")
    assert not re.search(MENTIONS_RES, "Progress run: see the address run by the team; ./res run")


def test_a_long_lock_scope_is_cut_from_the_left_keeping_the_key_and_the_repository():
    from reconciler.render.text import lock_text

    long = "gate@/home/me/" + "very-long-directory-name/" * 8 + "app"
    shown = lock_text(long)
    assert shown.startswith('"gate@…') and shown.endswith('/app"') and len(shown) == 122
    assert lock_text("gate@/src/app") == '"gate@/src/app"' and lock_text("e2e", quote="'") == "'e2e'"
    assert lock_text('a"b\nc') == '"a\'b c"'  # one line; the quote inside cannot close it


def test_force_short_of_cpus_says_cpus_not_memory():
    from reconciler.core.models import Game

    hog = running(1, mem=1.0, cpus=6, title="build")
    # game mode on 16 cpus: its reserve takes 8, so 8 are beyond it (12 outside game mode: it may wait)
    p = run_plan([req(2, mem=1.0, cpus=10, force=True)], records=[hog], w=world(avail=30, nproc=16),
                 game=Game(on=True, until=NOW + 3600))
    (a,) = [x for x in p.actions if x.id == "r-2"]
    d = a.detail
    assert (d["force"], d["short"], d["really_free_cpus"], [h["cpus"] for h in d["holders"]]) == ("short", ["cpus"], 8, [6])


def test_only_a_path_after_the_at_sign_is_a_scope():
    assert lock_scope("db@staging", "/src/app") == "db@staging@/src/app"
    assert lock_scope("gpu@0", "/src/app") == "gpu@0@/src/app"
    assert lock_scope("gate@/src/app", "/elsewhere") == "gate@/src/app"
