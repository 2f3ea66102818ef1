"""The gate end to end on a real user manager (DESIGN §5.8, issue 24): `res hook` with a Claude Code
hook input (the real sample's shape) and `res serve` running, the rewritten command run by a real
bash as the CLI would run it, the shims of `res shell-init --shims`, and `res run --start-within`.

CPUs bind, memory does not: the policy books every CPU for a gated pytest (gate_heavy_add), so the
ledger decides who waits, whatever this machine's free memory is. Nothing asserts on wall-clock time."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clihelp import PY, nproc, res, unit_props, wait_for  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = json.loads((ROOT / "tests" / "fixtures" / "hooks" / "claude-2.1.328-pretooluse-bash.json").read_text())
SUITE = '''
import sys
def test_one(): assert True
def test_two(): assert sys.argv is not None
'''


@pytest.fixture
def gated(res):
    """A project with a tiny real pytest suite, a policy that books every CPU for pytest, and `res serve`."""
    n = nproc()
    policy = Path(os.environ["RES_POLICY_FILE"])
    policy.write_text(f'gate_wait_s = 60\ngate_heavy_add = {{ "pytest" = {{ mem_gb = 0.25, cpus = {n}, minutes = 1 }} }}\n')
    proj = res.tmp / "proj"
    (proj / "tests").mkdir(parents=True)
    (proj / ".git").mkdir()  # the project: its checkout's root
    (proj / "tests" / "test_a.py").write_text(SUITE)
    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() and (res.state / "gate.json").exists(), "res serve up", 60)
    res.proj, res.serve, res.ncpus = proj, serve, n
    yield res
    serve.terminate()
    serve.wait(60)


def hook(res, command: str, mode: str = "bypassPermissions", cwd: Path | None = None) -> dict | None:
    event = dict(SAMPLE, cwd=str(cwd or res.proj), permission_mode=mode,
                 tool_input={"command": command, "description": "run it"})
    r = subprocess.run([PY, "-m", "reconciler.cli", "hook"], input=json.dumps(event), capture_output=True, text=True,
                       env=res.env, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return json.loads(r.stdout) if r.stdout else None


def bash(res, command: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command as the CLI's Bash tool runs it: one bash, in the session's directory."""
    return subprocess.run(["bash", "-c", command], cwd=str(cwd), capture_output=True, text=True, env=res.env, timeout=300)


PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests"


def test_a_heavy_command_runs_as_a_job_with_its_own_output_and_exit_code(gated):
    res = gated
    for command, code in ((PYTEST, 0), (PYTEST + " -k no_such_test", 5), (f"cd tests && {PYTEST.replace(' tests', ' .')} | tail -1", 0)):
        alone = bash(res, command, res.proj)
        out = hook(res, command)["hookSpecificOutput"]
        # bypassPermissions: the session runs it unasked, so the rewrite carries the CLI's own allow (issue 37)
        assert out["permissionDecision"] == "allow" and out["updatedInput"]["description"] == "run it"
        rewritten = out["updatedInput"]["command"]
        assert rewritten.endswith("-- bash -c " + shlex.quote(command)) and " --gated " in rewritten
        r = bash(res, rewritten, res.proj)
        assert r.returncode == alone.returncode == code, (r, alone)
        assert r.stdout.splitlines()[-1].split(" in ")[0] == alone.stdout.splitlines()[-1].split(" in ")[0]  # "2 passed"
        started = re.match(r"(r-\d+) started; log ", r.stderr.splitlines()[0])
        assert started and re.search(rf"{started.group(1)} done rc={code}", r.stderr), r.stderr
        st = res.status(started.group(1))
        assert st["state"] == "done" and st["rc"] == code
    jobs = [j for j in res.status_all()["jobs"] if j["kind"] == "job"]
    assert len(jobs) == 3


def test_a_gated_job_books_its_size_but_has_no_memory_limit_at_it(gated):
    res = gated
    rewritten = hook(res, "sleep 30 && " + PYTEST)["hookSpecificOutput"]["updatedInput"]["command"]
    p = res.popen(["bash", "-c", rewritten], cwd=str(res.proj), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = wait_for(lambda: next((j for j in res.status_all()["jobs"] if j["state"] == "running"), None), "the job runs", 60)
    props = unit_props(res.unit(job["id"]))
    assert props["MemoryMax"] == 2**64 - 1 and props["MemoryHigh"] == 2**64 - 1  # infinity: the slices hold it
    assert res.ok("status", job["id"], "--json") and json.loads(res.ok("status", "--json").out)  # booked in the ledger
    res.ok("release", job["id"], "--stop")
    p.wait(60)


def test_a_command_that_would_wait_too_long_is_denied_with_the_busy_line(gated):
    res = gated
    note = res.ok("note", "--cpus", str(res.ncpus), "--mem", "0.1G", "--for", "30m", "--until-expiry", "held by the test")
    note_id = note.out.split()[0]
    got = hook(res, PYTEST)["hookSpecificOutput"]
    assert got["permissionDecision"] == "deny"
    reason = got["permissionDecisionReason"]
    assert reason.startswith("res: not run: `") and "heavy work (table: pytest)" in reason
    assert re.search(rf'held by .*"held by the test" \({note_id}.*until ~\d\d:\d\d.*retry after ~\d\d:\d\d', reason), reason
    assert "\n" not in reason
    # a light command passes, busy or not; a line that already runs res, too
    assert hook(res, "ls -la") is None and hook(res, "res status") is None
    assert [j for j in res.status_all()["jobs"] if j["kind"] == "job"] == []  # the refusal made no job
    res.ok("release", note_id)


def test_where_the_session_would_have_asked_the_gate_leaves_the_command_alone(gated):
    res = gated
    # no allow rule: the CLI would have asked; it still does, about the same line (booked in place)
    out = hook(res, PYTEST, mode="default")["hookSpecificOutput"]
    assert "updatedInput" not in out and "permissionDecision" not in out and "booked" in out["additionalContext"], out
    post = dict(SAMPLE, cwd=str(res.proj), hook_event_name="PostToolUse", tool_input={"command": PYTEST})
    subprocess.run([PY, "-m", "reconciler.cli", "hook"], input=json.dumps(post), text=True, env=res.env, timeout=60, check=True)
    claude = res.tmp / "claude"
    claude.mkdir()
    (claude / "settings.json").write_text(json.dumps({"permissions": {"allow": [f"Bash({sys.executable} -m pytest:*)"]}}))
    res.env["CLAUDE_CONFIG_DIR"] = str(claude)
    assert hook(res, PYTEST, mode="default") is not None  # allowed by a rule: rewritten
    (claude / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"], "deny": ["Bash(rm -rf:*)"]}}))
    assert hook(res, PYTEST, mode="bypassPermissions") is not None  # a deny about another program
    (claude / "settings.json").write_text(json.dumps({"permissions": {"deny": [f"Bash({Path(sys.executable).name} -m pytest -x:*)"]}}))
    assert hook(res, PYTEST, mode="bypassPermissions") is None  # a deny that may be about this line: the CLI judges


def test_start_within_withdraws_a_job_that_did_not_start_in_time(gated):
    res = gated
    note = res.ok("note", "--cpus", str(res.ncpus), "--mem", "0.1G", "--for", "2m", "--until-expiry", "held")
    r = res("run", "--wait", "--queue", "--start-within", "2s", "--gated", "--mem", "256M", "--cpus", str(res.ncpus),
            "--for", "1m", "--", "true")
    assert r.code == 3, str(r)
    assert re.fullmatch(r"busy: r-\d+ would not start within 2 s \(position 1; est\. start ~\d\d:\d\d\); withdrawn; "
                        r"retry after ~\d\d:\d\d or work on something else", r.err_lines[-1]), r.err
    job = r.err_lines[0].split()[0]
    # never ran: withdrawn (cancelled), or refused by a pass at its start_by before the withdrawal came
    st = res.status(job)
    assert (st["state"] == "cancelled" or (st["state"] == "refused" and st["reason"]["code"] == "start_missed")) \
        and st["started"] is None, st
    res.ok("release", note.out.split()[0])


def test_the_shims_gate_agents_without_hooks(gated):
    res = gated
    line = res.ok("shell-init", "--shims").out
    shims = res.state / "shims"
    assert f"export PATH={shims}:" in line and (shims / "pytest").is_file() and (shims / "make").is_file()
    env = dict(res.env, PATH=f"{shims}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    r = subprocess.run(["bash", "-c", "pytest -q -p no:cacheprovider tests"], cwd=str(res.proj), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "2 passed" in r.stdout and re.search(r"r-\d+ done rc=0", r.stderr), r
    # inside a job: straight through (no second job)
    r = subprocess.run(["bash", "-c", "pytest -q -p no:cacheprovider tests"], cwd=str(res.proj), env=dict(env, RES_ID="r-999"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "2 passed" in r.stdout and "done rc=" not in r.stderr
    # a light use of a heavy tool's name: straight through
    r = subprocess.run(["bash", "-c", "pytest --version"], cwd=str(res.proj), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "pytest" in (r.stdout + r.stderr) and "done rc=" not in r.stderr
    assert len([j for j in res.status_all()["jobs"] if j["kind"] == "job"]) == 1


def test_a_stopped_loop_lets_heavy_commands_run_as_they_are_said_once_a_session(gated):
    """Issue 37 item 3: the real loop SIGSTOPped (stuck in a pass, a laptop resumed half way): a heavy
    command is answered as soon as the question gives up (ASK_TIMEOUT_S, 1 s; it was 5), passes as it
    is, and the agent is told once per session, not on every command."""
    import signal

    res = gated
    res.serve.send_signal(signal.SIGSTOP)
    try:
        first = hook(res, PYTEST)
        assert first == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": first[
            "hookSpecificOutput"]["additionalContext"]}} and "did not answer within 1 s" in first[
            "hookSpecificOutput"]["additionalContext"], first  # no rewrite, no decision: it runs as it is
        assert hook(res, PYTEST) is None  # said once a session
        r = bash(res, PYTEST, res.proj)
        assert r.returncode == 0 and "2 passed" in r.stdout, r  # and it does run, as the CLI would run it
    finally:
        res.serve.send_signal(signal.SIGCONT)
    out = hook(res, PYTEST)["hookSpecificOutput"]  # the loop answers again: gated again
    assert out["updatedInput"]["command"].endswith("-- bash -c " + shlex.quote(PYTEST)), out


def test_a_heavy_line_the_session_would_ask_about_runs_as_it_is_booked_in_place_until_it_ran(gated):
    """Admission in place (issue 37, docs/agent-hooks.md): Claude Code in default mode with no rule for
    the line (the person would be asked; a rewrite would change what they are asked about) — the line
    passes unchanged, its size booked under the call's request id while it runs (a note the agent's
    session owns); the post-tool event releases it; the same event again changes nothing."""
    res = gated
    event = dict(SAMPLE, cwd=str(res.proj), permission_mode="default", tool_use_id="toolu_inplace01",
                 tool_input={"command": PYTEST, "description": "run it"})
    r = subprocess.run([PY, "-m", "reconciler.cli", "hook"], input=json.dumps(event), capture_output=True, text=True,
                       env=res.env, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = json.loads(r.stdout)["hookSpecificOutput"]
    assert "updatedInput" not in out and "permissionDecision" not in out, out  # passed as it is
    assert "booked" in out["additionalContext"], out
    notes = [j for j in res.status_all()["jobs"] if j["kind"] == "note" and j["state"] == "running"]
    assert len(notes) == 1 and notes[0]["title"].endswith("(in place)") and notes[0]["cpus"] == res.ncpus, notes
    booking = notes[0]["id"]
    assert bash(res, PYTEST, res.proj).returncode == 0  # the CLI runs it, as it would have
    post = dict(event, hook_event_name="PostToolUse", tool_response={"stdout": "2 passed", "stderr": ""})
    for _ in range(2):  # (a post event may come twice)
        r = subprocess.run([PY, "-m", "reconciler.cli", "hook"], input=json.dumps(post), capture_output=True,
                           text=True, env=res.env, timeout=60)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    wait_for(lambda: res.status(booking)["state"] != "running", "the booking is released")
