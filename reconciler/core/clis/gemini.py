"""Gemini CLI: its hook input (BeforeTool, run_shell_command), its answers (a hook cannot grant), its
part of the gate's rule decision, its output's hint and its install's notes (the interface:
core/clis/__init__.py; sources: docs/agent-hooks.md, docs/agent-output.md)."""
from __future__ import annotations

from reconciler.core.clis import (AgentCli, GATE_HOOK_TIMEOUT_S, HookEntry, POST_HOOK_TIMEOUT_S, SESSION_HOOK_TIMEOUT_S, as_is, flag_value,
                                  named_handler, nothing, updated_input)

UNSHOWN_CALLS = False
PREFIX_SHOWN = False  # outside YOLO its policy engine would ask about a prefixed line it would have run
TRUST_CONFIG = None


def claims(event: dict) -> bool:
    return event.get("hook_event_name") in ("BeforeTool", "AfterTool")



def run_dir(tool_input: dict) -> object:
    return tool_input.get("dir_path")


def call_id(event: dict) -> None:
    return None  # it gives none: core/hooks.hold_id pairs its events by the command



def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    """hookSpecificOutput.tool_input (never a decision: a hook cannot grant)."""
    out: dict = {"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": updated_input(call, command)}}
    if context:
        out["hookSpecificOutput"]["additionalContext"] = context
    return out



def deny_answer(call, reason: str) -> dict:
    return {"decision": "deny", "reason": reason}


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    """The rewritten `res run` is judged by its policy engine: REWRITE only in YOLO mode with the shell
    not narrowed (a narrowed shell would deny it), else in place where it lets the line run."""
    from reconciler.core.shellrules import ADMIT, REWRITE, gemini_covered, guarded

    if guarded(commands, rules):
        return None
    if rules.narrowed and not gemini_covered(line, rules.allow):
        return None  # it may deny it: a booking for it could outlive it
    if rules.sandboxed:
        return ADMIT
    return REWRITE if rules.unasked and not rules.narrowed else ADMIT


def unread_output(cmd: list[str]) -> str | None:
    fmt = flag_value(cmd, ("--output-format", "-o"))
    if fmt == "json":
        return "gemini --output-format json reports its usage only at its end (--output-format stream-json streams it)"
    if fmt in (None, "text"):
        return "gemini prints text unless given --output-format stream-json, and res cannot read its usage"
    return None


def settings_refusal(command: str, name: str) -> str | None:
    if "$" in command:  # Gemini CLI expands $VAR in every settings string
        return (f"{name}: the res path in {command!r} has a '$', which Gemini CLI would expand; "
                "nothing written")
    return None


def disabled_note(data: dict) -> str:
    """A setting in the same file that keeps every hook, or this one, from running."""
    conf = data.get("hooksConfig")
    if isinstance(conf, dict):
        if conf.get("enabled") is False:
            return 'but "hooksConfig.enabled": false in this file turns every hook off'
        if isinstance(conf.get("disabled"), list) and "res gate" in conf["disabled"]:
            return 'but "hooksConfig.disabled" in this file lists "res gate"'
    return ""


def project_note(path: str, root: str, config: str | None, trusted: bool | None) -> str:
    return f"gemini: note: Gemini CLI reads {path} only when started in {root}, in a trusted folder"


# Where it has nothing of its own: the interface's defaults (core/clis/__init__.py)
hook_event = as_is
timeout_s = note_answer = nothing

# Its record: the facts every part of res reads (the fields: core/clis/__init__.py's AgentCli)
RECORD = AgentCli(
    "gemini", ("gemini",), "/gemini-cli/", "GEMINI_CLI_HOME", ".gemini", ".gemini", False, ".gemini",
    "settings.json", ("run_shell_command",), "BeforeTool", ("AfterTool",),
    (HookEntry("BeforeTool", "^run_shell_command$", named_handler(GATE_HOOK_TIMEOUT_S * 1000), True),  # milliseconds
     HookEntry("SessionStart", None, named_handler(SESSION_HOOK_TIMEOUT_S * 1000), True),
     HookEntry("AfterTool", "^run_shell_command$", named_handler(POST_HOOK_TIMEOUT_S * 1000), True)),
    None,  # Gemini CLI gives its shell commands no session id
    "GeminiDigest", None, "gemini_session_rules", None)
