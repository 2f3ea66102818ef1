"""A made-up agent CLI, defined in one module as each real one is (tests/quill_cli.py: its record and
its behaviour) and registered in one place (core/agentclis.CLIS, for the length of a test), is seen
by everything that names the CLIs: `res hook --agent` (entry.py's dispatch and the parser), `res run
--agent` (its digest, its output's hint), the gate (its hook input read by its module, with or
without --agent; its refusal, rewrite and note in its own shape; its rules' decision), `res hook
install` (where its file is, what is written in it, its refusal, notes, uninstall), `res doctor`'s
gates, the process a note is owned by (a real process tree, /proc), the session id a caller's
environment names and the rules reader's look at the CLI's own command line. Each check would fail on
a literal list of the real CLIs or on any of their protocols, and the last test shows the CLI is
unknown to all of them without its record (file tier: a temporary HOME, one short-lived process tree
of the test's own)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from reconciler.core.agentclis import CLIS
from tests import quill_cli

RES = "/opt/res/bin/res"
QUILL = quill_cli.RECORD


@pytest.fixture
def quill(monkeypatch):
    """The fifth CLI, registered in the one place, taken out again after the test."""
    monkeypatch.setitem(CLIS, QUILL.name, QUILL)
    return QUILL


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "OPENCODE_CONFIG_DIR", "XDG_CONFIG_HOME", "QUILL_HOME"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return h


def _event(name: str = "quill.before", tool: str = "Shell", cmd: str = "ls -la", **args) -> dict:
    """Quill's own hook input (tests/quill_cli.py): no other CLI's module reads this shape."""
    return {"session": "s-1", "event": name, "tool": tool, "cwd": "/tmp", "call": "c-7", "args": dict(args, cmd=cmd)}


def test_the_registry_lists_the_five_in_order_and_takes_a_sixth(quill):
    assert list(CLIS) == ["claude", "codex", "gemini", "opencode", "copilot", "quill"]


def test_res_hook_and_res_run_take_it_as_agent(quill):
    from reconciler.cli import build_parser
    from reconciler.core.agents import agent_kinds
    from reconciler.entry import _hook_agent

    assert _hook_agent(["hook", "--agent", "quill"]) == (True, "quill")
    assert _hook_agent(["hook", "--agent=quill"]) == (True, "quill")
    assert build_parser("hook").parse_args(["hook", "--agent", "quill"]).agent == "quill"
    assert build_parser("hook").parse_args(["hook", "install", "--agent", "quill"]).agent == "quill"
    run = build_parser("run").parse_args(["run", "--mem", "1G", "--for", "1m", "--agent", "quill", "--", "true"])
    assert run.agent == "quill"
    assert agent_kinds() == ("none", "claude", "codex", "gemini", "opencode", "copilot", "quill")


def test_its_output_is_digested_with_the_digest_its_record_names(quill):
    from pathlib import Path

    from reconciler.core.digest import ClaudeDigest, make_digest
    from reconciler.core.pricing import load_pricing

    table = load_pricing((Path(__file__).resolve().parents[2] / "policies" / "pricing.toml").read_text())
    assert type(make_digest("quill", table)) is ClaudeDigest


def test_the_gate_reads_its_hook_input(quill):
    from reconciler.core.hooks import cli_of, hold_id, read_call

    assert cli_of(_event(), "quill") == "quill"
    assert cli_of(_event()) == "quill"  # without --agent: its module claims its shape
    call = read_call(_event(**{"in": "sub", "seconds": 40}), "quill")
    assert (call.cli, call.command, call.cwd, call.session, call.call_id, call.timeout_s) == (
        "quill", "ls -la", "/tmp/sub", "s-1", "c-7", 40)
    assert read_call(_event(tool="Bash"), "quill") is None  # its shell tool, not Claude Code's
    assert read_call(_event("quill.after"), "quill") is None  # not its pre-tool event
    post = read_call(_event("quill.after"), post=True)
    assert post.cli == "quill" and hold_id(post) == hold_id(call)
    claude_shaped = {"session_id": "s-1", "hook_event_name": "PreToolUse", "tool_name": "Shell", "cwd": "/tmp",
                     "tool_input": {"command": "ls -la"}}
    assert read_call(claude_shaped, "quill") is None  # another CLI's shape


def test_the_gate_answers_it_in_its_own_shape(quill):
    from reconciler.core.hookrules import REWRITE, decide
    from reconciler.core.hooks import deny_output, note_output, read_call, rewrite_output
    from reconciler.core.shellrules import ALL, Rules

    call = read_call(_event(), "quill")
    assert rewrite_output(call, "res run -- ls", "ctx", True) == {"run": "res run -- ls", "why": "ctx"}
    assert note_output(call, "hi") == {"say": "hi"}
    assert deny_output(call, "no") == {"refuse": "no"}
    # its module's rule decision: Quill runs every line unasked (only a deny rule about it keeps it ungated)
    assert decide("quill", None, "pytest", [["pytest"]], Rules(False, (), frozenset())) == REWRITE
    assert decide("quill", None, "pytest", [["pytest"]], Rules(False, (), frozenset({ALL}))) is None


def test_the_gate_refuses_it(quill, tmp_path):
    """`res hook --agent quill` on a heavy line that would wait too long: refused in Quill's words."""
    from reconciler.commands.hook import main
    from reconciler.config import gatefile

    state = tmp_path / "state"
    state.mkdir()
    gatefile.write(state / "gate.json", {"v": 1, "wait_s": 30, "learned": {},
                                         "table": {"pytest": {"mem_gb": 1, "cpus": 1, "minutes": 5}}})
    now = time.time()
    event = _event(cmd="pytest -q tests")
    out, code = main(json.dumps(event), {"RES_STATE_DIR": str(state), "HOME": str(tmp_path)}, now=now, told="quill",
                     ask=lambda environ, size: {"fits": "later", "start": now + 3600, "line": "busy: x"})
    assert code == 0 and list(json.loads(out)) == ["refuse"] and json.loads(out)["refuse"].endswith("busy: x")


def test_the_gate_rewrites_it_in_its_own_shape(quill, tmp_path):
    """A heavy line that fits now: its rules read by the reader its record names, decided by its module,
    answered in Quill's words."""
    from reconciler.commands.hook import main
    from reconciler.config import gatefile

    state = tmp_path / "state"
    state.mkdir()
    gatefile.write(state / "gate.json", {"v": 1, "wait_s": 30, "learned": {},
                                         "table": {"pytest": {"mem_gb": 1, "cpus": 1, "minutes": 5}}})
    out, code = main(json.dumps(_event(cmd="pytest -q tests")), {"RES_STATE_DIR": str(state), "HOME": str(tmp_path)},
                     now=time.time(), told="quill", res_path=RES,
                     ask=lambda environ, size: {"fits": "now", "start": None, "mem_gb": 1.0, "cpus": 1.0})
    answer = json.loads(out)
    assert code == 0 and sorted(answer) == ["run", "why"]
    assert answer["run"].startswith(f"{RES} run --wait ") and answer["run"].endswith(" -- bash -c 'pytest -q tests'")


def test_its_output_hint_and_spend_come_from_its_module(quill):
    from reconciler.core.agents import unread_output
    from reconciler.core.digestbase import DigestState
    from reconciler.core.spend import running_spend_usd

    assert unread_output("quill", ["quill", "-p", "x"]) == "quill prints its usage only with --jsonl"
    assert unread_output("quill", ["quill", "--jsonl"]) is None
    state = DigestState(agent="quill", spend_usd=0.0, estimate_usd=1.0)
    assert running_spend_usd(state) == 1.0  # no margin: its module says its output shows every call


def test_hook_install_knows_its_file_and_writes_its_entries(quill, home, tmp_path, monkeypatch):
    from reconciler.commands.hookinstall import install, installed, settings_path

    assert settings_path("quill", "user", os.environ) == f"{home}/.quill/hooks.json"
    assert settings_path("quill", "project", os.environ, str(tmp_path / "work")) == f"{tmp_path}/work/.quill/hooks.json"
    code, lines = install("all", res=RES)
    assert code == 0 and lines[-1] == (f"quill: installed in {home}/.quill/hooks.json "
                                       f"(PreToolUse Shell, SessionStart -> {RES} hook --agent quill)")
    hooks = json.loads((home / ".quill" / "hooks.json").read_text())["hooks"]
    assert hooks == {"PreToolUse": [{"matcher": "Shell", "hooks": [{"type": "command", "command": f"{RES} hook --agent quill",
                                                                     "timeout": 30}]}],
                     "SessionStart": [{"hooks": [{"type": "command", "command": f"{RES} hook --agent quill", "timeout": 10}]}]}
    assert installed("quill") is True
    assert install("quill", uninstall=True, res=RES) == (0, [f"quill: removed from {home}/.quill/hooks.json"])
    assert installed("quill") is False
    monkeypatch.setenv("QUILL_HOME", str(tmp_path / "q"))
    assert settings_path("quill", "user", os.environ) == f"{tmp_path}/q/hooks.json"


def test_hook_install_says_and_refuses_what_its_module_says(quill, home, tmp_path):
    from reconciler.commands.hookinstall import install

    code, lines = install("quill", scope="project", res=RES)
    assert code == 0 and lines[-1] == f"quill: note: Quill reads {tmp_path}/work/.quill/hooks.json only in {tmp_path}/work"
    data = json.loads((tmp_path / "work" / ".quill" / "hooks.json").read_text())
    (home / ".quill").mkdir()
    (home / ".quill" / "hooks.json").write_text(json.dumps({"quiet": True}))
    code, lines = install("quill", res=RES)
    assert code == 0 and lines[0].endswith('; but "quiet": true in this file turns every hook off'), lines
    code, lines = install("quill", res="/opt/r#es/bin/res")
    assert code == 1 and "quill cannot run" in lines[0], lines
    assert "PreToolUse" in data["hooks"]


def test_doctor_lists_its_gate(quill, home):
    from reconciler.commands.doctor import gather_gates

    assert [g for g in gather_gates(os.environ) if g[0] == "quill"] == []  # not on this machine
    (home / ".quill").mkdir()
    assert [g for g in gather_gates(os.environ) if g[0] == "quill"] == [("quill", False, f"{home}/.quill/hooks.json")]


def test_a_note_made_under_it_is_owned_by_its_process(quill, tmp_path):
    """A `quill` session (here a Python script of that name) running a shell command: the note's owner
    is the session, found by its name in /proc, and its session id is read from its variable."""
    from reconciler.core.agents import agent_name
    from reconciler.observed import asker
    from reconciler.observed.procs import note_owner

    assert agent_name("node", ["node", "/usr/lib/node_modules/quill-cli/quill.js"]) == "quill"  # under a runtime
    script = tmp_path / "quill"
    script.write_text(f"#!{sys.executable}\nimport subprocess\np = subprocess.Popen(['sleep', '60'])\n"
                      "print(p.pid, flush=True)\np.wait()\n")
    script.chmod(0o755)
    session = subprocess.Popen([str(script)], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(session.stdout.readline())
        assert note_owner(child) == (session.pid, "quill")
        said = asker.agent_of(child, {"QUILL_SESSION_ID": "0f3c2a1b-9d8e-4f00-8000-000000000000"})
        assert said == f"quill pid {session.pid} session 0f3c2a1b"
    finally:
        for pid in (child, session.pid):
            if pid is not None:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        session.wait(10)
        session.stdout.close()


def test_the_rules_reader_finds_its_command_line(quill):
    from reconciler.config.agentsettings import cli_argvs

    argvs = [["bash", "-c", "ls"], ["node", "/usr/lib/node_modules/quill-cli/bin/quill.js", "--yolo"], ["bash"]]
    assert cli_argvs(argvs, "quill") == argvs[1:2]
    assert cli_argvs([["bash", "-c", "ls"], ["claude", "--yolo"]], "quill") == []  # another CLI's line


def test_without_its_record_nothing_knows_it(home):
    """The checks above are not vacuous: unregistered, the CLI is a stranger to each of them."""
    from reconciler.cli import build_parser
    from reconciler.commands.base import Fail
    from reconciler.commands.doctor import gather_gates
    from reconciler.core.agents import agent_kinds, agent_name
    from reconciler.core.digestbase import DigestError
    from reconciler.core.digest import make_digest
    from reconciler.core.hooks import read_call
    from reconciler.entry import _hook_agent

    assert "quill" not in CLIS
    assert _hook_agent(["hook", "--agent", "quill"]) == (False, None)
    with pytest.raises(Fail):
        build_parser("hook").parse_args(["hook", "--agent", "quill"])
    assert "quill" not in agent_kinds() and agent_name("quill") is None
    with pytest.raises(DigestError, match="unknown agent 'quill'"):
        make_digest("quill", None)
    from reconciler.core.hookrules import decide
    from reconciler.core.hooks import cli_of
    from reconciler.core.shellrules import Rules

    assert read_call(_event(), "quill") is None and cli_of(_event()) is None
    assert decide("quill", None, "pytest", [["pytest"]], Rules(False, (), frozenset())) is None
    (home / ".quill").mkdir()
    assert [g for g in gather_gates(os.environ) if g[0] == "quill"] == []
