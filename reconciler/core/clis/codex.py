"""Codex: its hook input (PreToolUse, tool Bash; `turn_id` tells it from Claude Code's), its answers (a
rewrite is applied only with "allow"), its part of the gate's rule decision, its output's hint and its
install's notes and hook trust (the interface: core/clis/__init__.py; sources: docs/agent-hooks.md,
docs/agent-output.md)."""
from __future__ import annotations

from reconciler.core.clis import (AgentCli, GATE_HOOK_TIMEOUT_S, HookEntry, POST_HOOK_TIMEOUT_S, SESSION_HOOK_TIMEOUT_S, as_is,
                                  no_disabled_note, nothing, plain_handler, pre_tool_deny, pre_tool_rewrite,
                                  updated_input)

UNSHOWN_CALLS = False
PREFIX_SHOWN = False  # it takes a rewrite only with its allow
TRUST_CONFIG = "config.toml"  # in its user directory: the trust of each hook `res hook install` writes


def claims(event: dict) -> bool:
    return event.get("hook_event_name") in ("PreToolUse", "PostToolUse") and "turn_id" in event




def call_id(event: dict) -> object:
    return event.get("tool_use_id")



def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    """updatedInput is applied only with permissionDecision "allow": always sent with it."""
    return pre_tool_rewrite(updated_input(call, command), context, True)


def note_answer(call, context: str) -> None:
    return None  # it takes no context without a rewrite


def deny_answer(call, reason: str) -> dict:
    return pre_tool_deny(reason)


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    """Its own rules then judge `res run`: GRANT only where every command runs unasked and unsandboxed."""
    from reconciler.core.shellrules import ADMIT, GRANT, guarded

    if guarded(commands, rules) or rules.narrowed:
        return None
    if rules.sandboxed:
        return ADMIT
    return GRANT if rules.unasked else ADMIT


def unread_output(cmd: list[str]) -> str | None:
    if "--json" not in cmd and "--experimental-json" not in cmd:
        return "codex exec prints its usage only with --json"
    return None




def project_note(path: str, root: str, config: str | None, trusted: bool | None) -> str | None:
    if trusted:
        return None
    return (f"codex: note: Codex reads {path} only in a trusted project (say yes when codex asks, or set "
            f'[projects."{root}"] trust_level = "trusted" in {config})')


# Where it has nothing of its own: the interface's defaults (core/clis/__init__.py)
hook_event = as_is
run_dir = timeout_s = settings_refusal = nothing
disabled_note = no_disabled_note

# Its record: the facts every part of res reads (the fields: core/clis/__init__.py's AgentCli)
RECORD = AgentCli(
    "codex", ("codex", "codex.js", "codex.exe"), "/@openai/codex", "CODEX_HOME", ".codex", "", True, ".codex",
    "hooks.json", ("Bash",), "PreToolUse", ("PostToolUse",),
    (HookEntry("PreToolUse", "Bash", plain_handler(GATE_HOOK_TIMEOUT_S), False, "pre_tool_use"),
     HookEntry("SessionStart", None, plain_handler(SESSION_HOOK_TIMEOUT_S), False, "session_start"),
     HookEntry("PostToolUse", "Bash", plain_handler(POST_HOOK_TIMEOUT_S), False, "post_tool_use")),
    "CODEX_THREAD_ID",  # codex-rs/protocol/src/shell_environment.rs
    "CodexDigest", "codex_session", "codex_session_rules", None)
