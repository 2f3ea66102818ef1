"""One module per agent CLI res gates and reads: what differs between them beyond the facts of their
records (core/agentclis.py, the one registry, names each one's module and imports it when first asked;
`res hook` imports only the module of the CLI it is called for). Each module holds, for its CLI:

    claims(event)            is a hook input without `--agent` this CLI's (its shape)
    hook_event(event)        its input in the shape core/hooks.read_call reads (None: not read)
    run_dir(tool_input)      the directory the command runs in, relative to the input's cwd (None: that cwd)
    call_id(event)           its id of the tool call (the same in its pre and post events), if it gives one
    timeout_s(tool_input)    how long its shell tool lets the command run, if the input says
    rewrite_answer, note_answer, deny_answer
                             the hook output that runs another command, tells the agent something, refuses
    decide(mode, line, commands, rules)
                             its part of the gate's rule decision (core/hookrules.py)
    unread_output(cmd)       why `res run --agent` cannot read its spend from this command line, if it cannot
    UNSHOWN_CALLS            its session makes model calls its output never shows (a margin in core/spend.py)
    PREFIX_SHOWN             game mode's prefix may go on a line its rules leave to a prompt (the prompt shows it)
    settings_refusal(command, name), disabled_note(data), project_note(path, root, config, trusted),
    TRUST_CONFIG             what `res hook install` says or refuses for it (commands/hookinstall.py does the I/O)

This package's own module: the shapes more than one CLI speaks. Pure, import-light: a CLI's module
imports this package and, only inside its rule decision, core/shellrules.py; never the registry or
core/hooks.py (they import it).
"""
from __future__ import annotations

CLAUDE_BASH_TIMEOUT_S = 120  # the Bash tool's default timeout (tools reference); its input may say other


def updated_input(call, command: str) -> dict:
    """The tool input with `command` in place of the call's (every other field kept)."""
    updated = dict(call.tool_input)
    updated["command"] = command
    return updated


def ms_timeout_s(tool_input: dict) -> int | None:
    """A shell tool that takes `timeout` in ms, 120 s unless the call says other (Claude Code's Bash,
    OpenCode's bash): None for a command run in the background."""
    if tool_input.get("run_in_background") is True:
        return None
    ms = tool_input.get("timeout")
    if type(ms) in (int, float) and 0 < ms <= 86_400_000:
        return max(int(ms // 1000), 1)
    return CLAUDE_BASH_TIMEOUT_S


def pre_tool_rewrite(updated: dict, context: str | None, allow: bool) -> dict:
    """Claude Code's and Codex's rewrite: hookSpecificOutput.updatedInput, with "allow" if `allow`."""
    spec: dict = {"hookEventName": "PreToolUse", "updatedInput": updated}
    if allow:
        spec = {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                "permissionDecisionReason": "res: heavy work runs as a res job; the session's own rules allow it",
                "updatedInput": updated}
    if context:
        spec["additionalContext"] = context
    return {"hookSpecificOutput": spec}


def pre_tool_deny(reason: str) -> dict:
    """Claude Code's and Codex's refusal: permissionDecision "deny", the reason to the model."""
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def flag_value(cmd: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of `names` on a command line (`--x v`, `--x=v`, `-x v`)."""
    found = None
    for i, arg in enumerate(cmd):
        for name in names:
            if arg == name and i + 1 < len(cmd):
                found = cmd[i + 1]
            elif arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
    return found


# What a CLI without such a thing answers (a module names them: `run_dir = timeout_s = nothing`).
def as_is(event: dict) -> dict:
    """Its input is already in the shape core/hooks.read_call reads."""
    return event


def nothing(*_args) -> None:
    """It has none of this (a directory, a timeout, a note, a refusal of its settings, a project's note)."""
    return None


def no_disabled_note(data: dict) -> str:
    """No setting of its file turns its hooks off."""
    return ""
