"""The hook protocols of the agent CLIs `res hook` serves (DESIGN §5.8): how each one says "a shell
command is about to run" and how a hook rewrites or refuses it. Pure: a hook input (parsed JSON) in,
a `Call` out; a decision in, the JSON to print out. Which CLI sent an input: `--agent` (any CLI of
core/agentclis.py), else its shape. Each CLI's events and shell tool are its record there. Sources,
versions and what each field does: docs/agent-hooks.md.

    Claude Code  PreToolUse, tool Bash        updatedInput, with permissionDecision "allow" where the
                                              session would have run the line unasked (core/hookrules.py)
    Codex        PreToolUse, tool Bash        updatedInput only with permissionDecision "allow" (so only
                                              where the session runs every command unasked)
    Gemini CLI   BeforeTool, run_shell_command  hookSpecificOutput.tool_input (a hook cannot grant)
    OpenCode     tool.execute.before, bash    res's plugin (commands/hookinstall.py) sends the call in
                                              this shape and reads `{"command"}` (it sets the bash
                                              tool's args.command) or `{"deny"}` (it throws that line)
    Copilot CLI  preToolUse, tool bash        modifiedArgs (the whole args object; its rules judge the
                                              rewritten command), permissionDecision "deny" + reason;
                                              its input is {sessionId, cwd, toolName, toolArgs} with no
                                              event name: a postToolUse one carries toolResult

A refusal is a deny with its reason, which each CLI hands the model as the tool's result. What differs
between them is each CLI's module (core/clis/): this module reads and answers through the one the
input came from.

Import-light: nothing but built-ins, the registry and that one CLI's module (the hook runs before
every agent shell command).
"""
from __future__ import annotations

from collections import namedtuple

from reconciler.core.agentclis import CLIS, behaviour


# (collections.namedtuple, not typing.NamedTuple: `res hook` imports this module, and typing costs it ~3 ms)
# One shell command a CLI's hook asked about: cli (str), command (str), cwd (str | None), tool_input
# (dict), permission_mode (str | None), timeout_s (int | None: how long the CLI lets the command run,
# if the input says), session (str | None: the CLI's session id, where the input has one), call_id
# (str | None: the CLI's id of this tool call, the same in its pre and post events: Claude Code's and
# Codex's tool_use_id; Gemini CLI has none).
Call = namedtuple("Call", "cli command cwd tool_input permission_mode timeout_s session call_id", defaults=(None, None))


def cli_of(event: dict, told: str | None = None) -> str | None:
    """Which CLI sent this input: `told` (--agent), else its shape: the first CLI in the registry's
    order whose module claims it (Gemini's event is BeforeTool; Codex's PreToolUse carries `turn_id`
    and `model`, Claude Code's does not)."""
    if told in CLIS:
        return told
    for name in CLIS:
        if behaviour(name).claims(event):
            return name
    return None


def read_call(event: object, told: str | None = None, post: bool = False) -> Call | None:
    """The shell command a hook input is about, or None (another tool or event, or not read).
    `post`: the event after it ran (its CLI's post_events), not the one before."""
    if not isinstance(event, dict):
        return None
    cli = cli_of(event, told)
    if cli is None:
        return None
    spec = CLIS[cli]
    mine = behaviour(cli)
    event = mine.hook_event(event)
    if event is None:
        return None
    if post and event.get("hook_event_name") not in spec.post_events:
        return None
    if not post and event.get("hook_event_name", spec.pre_event) != spec.pre_event:
        return None
    if event.get("tool_name") not in spec.shell_tools:
        return None
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        return None
    command = tool_input.get("command")
    if not isinstance(command, str) or not command.strip():
        return None
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else None
    sub = mine.run_dir(tool_input)  # the directory the command runs in, given relative to the CLI's
    if isinstance(sub, str) and sub and cwd:
        import posixpath

        cwd = posixpath.normpath(posixpath.join(cwd, sub))
    mode = event.get("permission_mode") if isinstance(event.get("permission_mode"), str) else None
    session = event.get("session_id")
    session = session if isinstance(session, str) and 0 < len(session) <= 200 else None
    call_id = mine.call_id(event)
    call_id = call_id if isinstance(call_id, str) and 0 < len(call_id) <= 200 else None
    return Call(cli, command, cwd, tool_input, mode, mine.timeout_s(tool_input), session, call_id)


def hold_id(call: Call) -> str | None:
    """The request id a command admitted in place is booked under (`h-` and 24 hex digits), the same
    for its pre and its post event: the CLI, the session and the tool call's id; for Gemini CLI,
    which gives none, the command itself (two identical commands at once in one Gemini session share
    one booking). None without a session: nothing to pair the events by."""
    if call.session is None:
        return None
    import hashlib

    what = call.call_id if call.call_id is not None else "cmd:" + call.command
    return "h-" + hashlib.sha256(f"{call.cli}\0{call.session}\0{what}".encode("utf-8", "surrogateescape")).hexdigest()[:24]


def rewrite_output(call: Call, command: str, context: str | None, grant: bool = False) -> dict:
    """The hook output that runs `command` instead (every other field of the tool input kept);
    `grant`: answered with the CLI's "allow" (core/hookrules.decide said GRANT). Codex takes a rewrite
    only with it; Gemini has none."""
    return behaviour(call.cli).rewrite_answer(call, command, context, grant)


def note_output(call: Call, context: str) -> dict | None:
    """The hook output that lets the command run as it is and tells the agent `context` (no decision,
    no rewrite: the CLI judges it exactly as without the hook). Codex takes no context without a
    rewrite, Gemini CLI, OpenCode and Copilot CLI none at all before a tool: None (nothing is said)."""
    return behaviour(call.cli).note_answer(call, context)


def deny_output(call: Call, reason: str) -> dict:
    """The hook output that refuses the command, `reason` going to the model."""
    return behaviour(call.cli).deny_answer(call, reason)
