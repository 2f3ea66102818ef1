"""Claude Code: its hook input (PreToolUse, tool Bash), its answers, its part of the gate's rule
decision, its output's hint and its install's notes (the interface: core/clis/__init__.py; sources:
docs/agent-hooks.md, docs/agent-output.md)."""
from __future__ import annotations

from reconciler.core.clis import (AgentCli, GATE_HOOK_TIMEOUT_S, HookEntry, POST_HOOK_TIMEOUT_S, SESSION_HOOK_TIMEOUT_S, as_is, flag_value,
                                  ms_timeout_s, nothing, plain_handler, pre_tool_deny, pre_tool_rewrite,
                                  updated_input)

UNSHOWN_CALLS = True  # it makes model calls its output never shows (core/spend.py's margin)
PREFIX_SHOWN = True  # it asks about the line either way: the prompt simply shows game mode's prefix
TRUST_CONFIG = None


def claims(event: dict) -> bool:
    """Its PreToolUse and PostToolUse carry no `turn_id` (Codex's do); PostToolUseFailure is its own."""
    name = event.get("hook_event_name")
    return (name in ("PreToolUse", "PostToolUse") and "turn_id" not in event) or name == "PostToolUseFailure"




def call_id(event: dict) -> object:
    return event.get("tool_use_id")


def timeout_s(tool_input: dict) -> int | None:
    return ms_timeout_s(tool_input)


def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    """updatedInput, with permissionDecision "allow" where the session would have run the line unasked."""
    return pre_tool_rewrite(updated_input(call, command), context, grant)


def note_answer(call, context: str) -> dict:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": context}}


def deny_answer(call, reason: str) -> dict:
    return pre_tool_deny(reason)


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    """A rewrite may carry "allow", which skips the allow rules (deny and ask rules still apply): GRANT
    where its own rules let the line run unasked, else in place (core/hookrules.py's table)."""
    from reconciler.core.shellrules import ADMIT, CLAUDE_RULE_MODES, GRANT, claude_covered, guarded

    if guarded(commands, rules) or rules.narrowed:
        return None
    if rules.sandboxed:  # it runs in the CLI's sandbox, on this machine's memory all the same
        return ADMIT
    if mode in ("plan", "auto"):
        return ADMIT
    if rules.unasked:  # bypassPermissions: every command runs unasked; the allow changes nothing
        return GRANT
    if (mode is None or mode in CLAUDE_RULE_MODES) and claude_covered(line, rules.allow):
        return GRANT
    return ADMIT


def unread_output(cmd: list[str]) -> str | None:
    if flag_value(cmd, ("--output-format",)) != "stream-json":
        return "claude -p prints its usage only as stream-json (--output-format stream-json --verbose)"
    return None



def disabled_note(data: dict) -> str:
    """A setting in the same file that keeps every hook from running."""
    if data.get("disableAllHooks") is True:
        return 'but "disableAllHooks": true in this file turns every hook off'
    return ""


# Where it has nothing of its own: the interface's defaults (core/clis/__init__.py)
hook_event = as_is
run_dir = settings_refusal = project_note = nothing

# Its record: the facts every part of res reads (the fields: core/clis/__init__.py's AgentCli)
RECORD = AgentCli(
    "claude", ("claude",), "/claude-code/", "CLAUDE_CONFIG_DIR", ".claude", "", False, ".claude", "settings.json",
    ("Bash",), "PreToolUse", ("PostToolUse", "PostToolUseFailure"),
    (HookEntry("PreToolUse", "Bash", plain_handler(GATE_HOOK_TIMEOUT_S), False),
     HookEntry("SessionStart", None, plain_handler(SESSION_HOOK_TIMEOUT_S), False),
     HookEntry("PostToolUse", "Bash", plain_handler(POST_HOOK_TIMEOUT_S), False),
     HookEntry("PostToolUseFailure", "Bash", plain_handler(POST_HOOK_TIMEOUT_S), False)),
    "CLAUDE_CODE_SESSION_ID",  # from 2.1.132 (CHANGELOG)
    "ClaudeDigest", None, "claude_session_rules", None)
