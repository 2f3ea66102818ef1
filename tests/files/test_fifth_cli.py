"""A made-up agent CLI registered in one place (core/agentclis.CLIS, for the length of a test) is seen
by everything that names the CLIs: `res hook --agent` (entry.py's dispatch and the parser), `res run
--agent` and its digest, the gate's hook input (core/hooks.py), `res hook install` (where its file is,
what is written in it, uninstall), `res doctor`'s gates, the process a note is owned by (a real
process tree, /proc), the session id a caller's environment names and the rules reader's look at
the CLI's own command line. Each check would fail on a literal list of claude, codex and gemini, and
the last test shows the CLI is unknown to all of them without its record (file tier: a temporary
HOME, one short-lived process tree of the test's own)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from reconciler.core.agentclis import CLIS, AgentCli, HookEntry

RES = "/opt/res/bin/res"

QUILL = AgentCli(
    name="quill", programs=("quill",), package="/quill-cli/", home_var="QUILL_HOME", home_default=".quill",
    home_sub="", home_realpath=False, project_dir=".quill", hooks_file="hooks.json", shell_tools=("Shell",),
    pre_event="PreToolUse", post_events=("PostToolUse",),
    entries=(HookEntry("PreToolUse", "Shell", (("type", "command"), ("command", None), ("timeout", 30)), False),
             HookEntry("SessionStart", None, (("type", "command"), ("command", None), ("timeout", 10)), False)),
    session_var="QUILL_SESSION_ID", digest="ClaudeDigest", model_source=None)


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


def _event(name: str = "PreToolUse", tool: str = "Shell") -> dict:
    return {"session_id": "s-1", "hook_event_name": name, "tool_name": tool, "cwd": "/tmp",
            "tool_input": {"command": "ls -la"}}


def test_the_registry_lists_the_four_in_order_and_takes_a_fifth(quill):
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
    from reconciler.core.hooks import cli_of, read_call

    assert cli_of(_event(), "quill") == "quill"
    call = read_call(_event(), "quill")
    assert (call.cli, call.command, call.session) == ("quill", "ls -la", "s-1")
    assert read_call(_event(tool="Bash"), "quill") is None  # its shell tool, not Claude Code's
    assert read_call(_event("PostToolUse"), "quill", post=True).cli == "quill"


def test_the_gate_answers_it(quill, tmp_path):
    """`res hook --agent quill` on a heavy line that would wait too long: refused, the reason to the model."""
    from reconciler.commands.hook import main
    from reconciler.config import gatefile

    state = tmp_path / "state"
    state.mkdir()
    gatefile.write(state / "gate.json", {"v": 1, "wait_s": 30, "learned": {},
                                         "table": {"pytest": {"mem_gb": 1, "cpus": 1, "minutes": 5}}})
    now = time.time()
    event = dict(_event(), tool_input={"command": "pytest -q tests"})
    out, code = main(json.dumps(event), {"RES_STATE_DIR": str(state), "HOME": str(tmp_path)}, now=now, told="quill",
                     ask=lambda environ, size: {"fits": "later", "start": now + 3600, "line": "busy: x"})
    spec = json.loads(out)["hookSpecificOutput"]
    assert code == 0 and spec["permissionDecision"] == "deny" and spec["permissionDecisionReason"].endswith("busy: x")


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
    assert read_call(_event(), "quill") is None
    (home / ".quill").mkdir()
    assert [g for g in gather_gates(os.environ) if g[0] == "quill"] == []
