"""OpenCode: res's plugin (config/ownhookfiles.py) hands its bash tool's calls to `res hook` in the
shape read here (tool.execute.before, bash) and reads `{"command"}` (it sets args.command) or
`{"deny"}` (it throws that line); its part of the gate's rule decision and its output's hint (the
interface: core/clis/__init__.py; sources: docs/agent-hooks.md, docs/agent-output.md)."""
from __future__ import annotations

from reconciler.core.clis import AgentCli, as_is, flag_value, ms_timeout_s, no_disabled_note, nothing

UNSHOWN_CALLS = False
PREFIX_SHOWN = False
TRUST_CONFIG = None


def claims(event: dict) -> bool:
    return event.get("hook_event_name") in ("tool.execute.before", "tool.execute.after")



def run_dir(tool_input: dict) -> object:
    return tool_input.get("workdir")


def call_id(event: dict) -> object:
    return event.get("tool_use_id")


def timeout_s(tool_input: dict) -> int | None:
    return ms_timeout_s(tool_input)


def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    return {"command": command}  # res's plugin sets args.command; no context, no decision (none exists)



def deny_answer(call, reason: str) -> dict:
    return {"deny": reason}  # res's plugin throws it: the model gets `Error: <reason>` as the tool's result


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    """Its own matcher, read exactly (deny and ask loosely): no guarded set. REWRITE where its rules let
    both the line and a `res …` line run unasked; in place where they would ask about `res …`."""
    from reconciler.core.shellrules import ADMIT, REWRITE, REWRITE_PROGRAMS, opencode_allows, opencode_allows_program

    if not opencode_allows(line, rules.ordered):
        return None  # it would ask or refuse (or we cannot tell): a booking could outlive it
    return REWRITE if all(opencode_allows_program(p, rules.ordered) for p in REWRITE_PROGRAMS) else ADMIT


def unread_output(cmd: list[str]) -> str | None:
    if flag_value(cmd, ("--format",)) != "json":
        return "opencode run prints its usage only with --format json"
    return None


# Where it has nothing of its own: the interface's defaults (core/clis/__init__.py)
hook_event = as_is
note_answer = settings_refusal = project_note = nothing
disabled_note = no_disabled_note

# Its record: the facts every part of res reads (the fields: core/clis/__init__.py's AgentCli)
RECORD = AgentCli(
    "opencode", ("opencode",), "/opencode-ai/", "OPENCODE_CONFIG_DIR", ".config/opencode", "", False, ".opencode",
    # not a settings file: a plugin of its own that hands the bash tool's calls to `res hook` (the same
    # path under its user directory and a project's .opencode/; commands/hookinstall.py writes it whole)
    "plugins/res-gate.js", ("bash",), "tool.execute.before", ("tool.execute.after",),
    (),  # no settings entries: the plugin is the whole install
    None,  # OpenCode 1.18 gives its shell commands no session id
    "OpenCodeDigest", None, "opencode_session_rules", None)
