"""Admission in place, first part (issue 37; docs/agent-hooks.md): the event after a shell command ran
is read for each CLI, and it pairs with the event before it under one request id (core.hooks.hold_id).

The inputs are hand-built (no captured sample of these events is in the repository yet), each with
exactly the fields the installed CLI's own schema or code names (read 2026-12-03: Codex 0.171.0's
`post-tool-use.command.input` schema in its binary, Gemini CLI 0.61.0's AfterTool in its bundle,
Claude Code 2.1.328's PostToolUse / PostToolUseFailure)."""
from __future__ import annotations

import re

from reconciler.core import hooks

CLAUDE_PRE = {"session_id": "5e1d-claude", "transcript_path": "/h/.claude/projects/p/5e1d.jsonl", "cwd": "/w/proj",
              "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
              "tool_input": {"command": "python3 -m pytest -q tests", "description": "Run the tests"},
              "tool_use_id": "toolu_01ABC"}
CLAUDE_POST = dict(CLAUDE_PRE, hook_event_name="PostToolUse", duration_ms=2310,
                   tool_response={"stdout": "2 passed", "stderr": "", "interrupted": False, "isImage": False})
CLAUDE_FAILED = dict(CLAUDE_PRE, hook_event_name="PostToolUseFailure", error="Exit code 1", is_interrupt=False)
CODEX_PRE = {"session_id": "019a-codex", "turn_id": "t-3", "transcript_path": None, "cwd": "/w/proj",
             "hook_event_name": "PreToolUse", "model": "gpt-5.5-codex", "permission_mode": "default",
             "tool_name": "Bash", "tool_input": {"command": "make test"}, "tool_use_id": "call_Zx9"}
CODEX_POST = dict(CODEX_PRE, hook_event_name="PostToolUse", tool_response="ok\n")
GEMINI_PRE = {"session_id": "g-77", "transcript_path": "/h/.gemini/tmp/x/chats/s.json", "cwd": "/w/proj",
              "hook_event_name": "BeforeTool", "timestamp": "2026-12-03T19:40:00.000Z", "tool_name": "run_shell_command",
              "tool_input": {"command": "npm test", "description": "tests"}}
GEMINI_POST = dict(GEMINI_PRE, hook_event_name="AfterTool", timestamp="2026-12-03T19:40:09.000Z",
                   tool_response={"llmContent": "Command: npm test\nExit Code: 1", "returnDisplay": "…", "error": None})


def test_each_clis_post_event_is_read_as_the_command_that_ran():
    for post, cli, command in ((CLAUDE_POST, "claude", "python3 -m pytest -q tests"), (CLAUDE_FAILED, "claude", None),
                               (CODEX_POST, "codex", "make test"), (GEMINI_POST, "gemini", "npm test")):
        call = hooks.read_call(post, post=True)
        assert call is not None and call.cli == cli, post
        assert call.command == (command or "python3 -m pytest -q tests")
    # a post event is not a pre event, nor the other way round
    assert hooks.read_call(CLAUDE_POST) is None and hooks.read_call(GEMINI_POST) is None
    assert hooks.read_call(CODEX_PRE, post=True) is None and hooks.read_call(GEMINI_PRE, post=True) is None
    # another tool's post event: nothing to release
    assert hooks.read_call(dict(CLAUDE_POST, tool_name="Edit"), post=True) is None


def test_a_post_event_pairs_with_its_pre_event_and_with_no_other():
    for pre, post in ((CLAUDE_PRE, CLAUDE_POST), (CLAUDE_PRE, CLAUDE_FAILED), (CODEX_PRE, CODEX_POST),
                      (GEMINI_PRE, GEMINI_POST)):
        held = hooks.hold_id(hooks.read_call(pre))
        assert held is not None and re.fullmatch(r"h-[0-9a-f]{24}", held)
        assert hooks.hold_id(hooks.read_call(post, post=True)) == held
    ids = {hooks.hold_id(hooks.read_call(e)) for e in (
        CLAUDE_PRE, dict(CLAUDE_PRE, tool_use_id="toolu_02"), dict(CLAUDE_PRE, session_id="other"),
        CODEX_PRE, dict(CODEX_PRE, tool_use_id="call_2"), GEMINI_PRE, dict(GEMINI_PRE, tool_input={"command": "npm run build"}))}
    assert len(ids) == 7  # another call, session, CLI or (for Gemini) command: another booking
    # the same command twice in one Claude Code session: two calls, two bookings
    assert hooks.hold_id(hooks.read_call(dict(CLAUDE_PRE, tool_use_id="toolu_9"))) != hooks.hold_id(hooks.read_call(CLAUDE_PRE))


def test_no_session_no_booking_to_pair():
    assert hooks.hold_id(hooks.read_call({k: v for k, v in CODEX_PRE.items() if k != "session_id"})) is None
    assert hooks.read_call(dict(CLAUDE_PRE, tool_use_id=7)).call_id is None  # not text: not an id


def test_the_hook_releases_on_a_post_event_and_says_nothing(monkeypatch, tmp_path):
    import json

    from reconciler.commands import hook, hookloop

    environ = {"RES_STATE_DIR": str(tmp_path)}
    asked = []
    monkeypatch.setattr(hookloop, "ask_loop", lambda environ, request, timeout: asked.append(request))
    for pre, post in ((CODEX_PRE, CODEX_POST), (GEMINI_PRE, GEMINI_POST), (CLAUDE_PRE, CLAUDE_FAILED)):
        asked.clear()
        hookloop.mark_held(environ, hooks.hold_id(hooks.read_call(pre)))  # as its pre-tool event's booking does
        assert hook.main(json.dumps(post), environ) == ("", 0)
        assert asked == [{"op": "release_request", "request_id": hooks.hold_id(hooks.read_call(pre))}], post
        assert hook.main(json.dumps(post), environ) == ("", 0) and len(asked) == 1  # again: nothing to release
    asked.clear()
    assert hook.main(json.dumps(CLAUDE_POST), environ) == ("", 0) and asked == []  # never booked: the loop not asked
    assert hook.main(json.dumps(dict(CLAUDE_POST, tool_name="Read")), environ) == ("", 0) and asked == []
    assert hook.main(json.dumps({k: v for k, v in CODEX_POST.items() if k != "session_id"}), environ) == ("", 0)
    assert asked == []  # nothing to pair it by: nothing asked
