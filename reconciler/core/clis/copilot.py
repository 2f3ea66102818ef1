"""GitHub Copilot CLI: its camelCase hook input ({sessionId, cwd, toolName, toolArgs}, no event name: a
postToolUse one carries toolResult), its answers (modifiedArgs, the whole args object; never "allow"),
its part of the gate's rule decision and its output's hint (the interface: core/clis/__init__.py;
sources: docs/agent-hooks.md, docs/agent-output.md)."""
from __future__ import annotations

from reconciler.core.clis import AgentCli, no_disabled_note, nothing, updated_input

UNSHOWN_CALLS = False
PREFIX_SHOWN = False
TRUST_CONFIG = None


def claims(event: dict) -> bool:
    return event.get("hook_event_name") is None and "toolName" in event and "toolArgs" in event


def hook_event(event: dict) -> dict | None:
    """Its input in the shape core/hooks.read_call reads: the event from its fields (a postToolUse input
    carries toolResult), toolArgs an object or a JSON string of one (both seen)."""
    args = event.get("toolArgs")
    if isinstance(args, str):
        import json

        try:
            args = json.loads(args)
        except ValueError:
            return None
    return {"hook_event_name": "postToolUse" if "toolResult" in event else "preToolUse",
            "tool_name": event.get("toolName"), "tool_input": args, "cwd": event.get("cwd"),
            "session_id": event.get("sessionId")}



def call_id(event: dict) -> object:
    return event.get("tool_use_id")



def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    return {"modifiedArgs": updated_input(call, command)}  # the args the tool runs with, whole; never "allow"



def deny_answer(call, reason: str) -> dict:
    return {"permissionDecision": "deny", "permissionDecisionReason": reason}  # `Denied by preToolUse hook: <reason>`


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    """Its own rules judge `res run …`: REWRITE only where every shell command runs unasked and any path
    may be named; in place where its shell rules cover the line and it names no path it may ask about."""
    from reconciler.core.shellrules import ADMIT, REWRITE, copilot_covered, guarded

    if guarded(commands, rules):
        return None
    if rules.unasked and rules.any_path:
        return REWRITE
    if not rules.any_path and "/" in line:  # a path it may ask about: the line may never run
        return None
    return ADMIT if copilot_covered(line, ("*",) if rules.unasked else rules.allow) else None


def unread_output(cmd: list[str]) -> str | None:
    """Its spend is read from its session's file, which only --output-format json's last line names."""
    from reconciler.core.clis import flag_value

    if flag_value(cmd, ("--output-format",)) == "json":
        return None
    return "copilot names its session, where res reads its usage, only with --output-format json"


# Where it has nothing of its own: the interface's defaults (core/clis/__init__.py)
run_dir = timeout_s = note_answer = settings_refusal = project_note = nothing
disabled_note = no_disabled_note

# Its record: the facts every part of res reads (the fields: core/clis/__init__.py's AgentCli)
RECORD = AgentCli(
    "copilot", ("copilot",), "/@github/copilot", "COPILOT_HOME", ".copilot", "", False, ".github",
    # a hooks file of res's own, written whole (Copilot loads every hooks/*.json of its user directory and
    # a repository's .github/hooks/*.json, and runs every entry of each); its inputs name no event: a
    # post-tool one is told apart by its toolResult (core/hooks.py)
    "hooks/res.json", ("bash",), "preToolUse", ("postToolUse",),
    (),  # no entries in a settings file: the hooks file is the whole install
    "COPILOT_AGENT_SESSION_ID",  # in its bash tool's environment (measured on 1.0.102)
    # --output-format json names no tokens, only its session (last line): they are in the session's
    # events.jsonl under $COPILOT_HOME/session-state/, read at the job's end
    "CopilotDigest", None, "copilot_session_rules", None, "copilot_session_usage")
