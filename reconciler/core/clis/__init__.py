"""One module per agent CLI res gates and reads: its record (RECORD, an AgentCli below: the facts every
part of res reads) and what differs between them beyond facts (core/agentclis.py, the one registry,
imports a CLI's module when its record is first asked for; `res hook` imports only the module of the CLI
it is called for). Each module holds, for its CLI:

    RECORD                   its facts (AgentCli's fields, below)

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

from collections import namedtuple

# What `res hook install` gives each entry it writes (a shell command waits for the gate's; past it the
# CLI runs the command unbooked): a wait in the hook ends well before it.
GATE_HOOK_TIMEOUT_S = 30
SESSION_HOOK_TIMEOUT_S = 10  # SessionStart's: one note to the loop (a 1 s wait at most, commands/hook.py)
POST_HOOK_TIMEOUT_S = 10  # a post-tool event's: one release to the loop (a 1 s wait at most, commands/hook.py)

# One entry `res hook install` writes under "hooks" in a CLI's settings file: event (the key under
# "hooks"), matcher (None: the group has none: every tool, every source), handler (the handler's fields
# in order, ("command", None) standing for the command), comments (the CLI reads the file with // and
# /* */ comments), label (Codex: the event's label in a trust key and its hash).
HookEntry = namedtuple("HookEntry", "event matcher handler comments label", defaults=("",))

# One agent CLI:
#   name           its `--agent` name, and the name its process goes by (comm, or the script a runtime runs)
#   programs       the names its program has on a command line (is a `res run --agent` command the CLI itself?)
#   package        a path inside its npm package, as its process's command line may show it
#   home_var       the variable that moves its user directory
#   home_default   its user directory under $HOME where home_var is unset or empty (one under .config/
#                  moves with $XDG_CONFIG_HOME, as OpenCode's does)
#   home_sub       its user directory under $home_var ("": home_var names that directory itself)
#   home_realpath  True: the CLI resolves $home_var's links (Codex canonicalizes CODEX_HOME), and `res hook
#                  install` names files under it so (Codex's trust keys must be the paths Codex computes);
#                  False: the path is only made absolute
#   project_dir    its folder in a project (a checkout's root)
#   hooks_file     the file its hooks are in, in its user directory and in its project folder (OpenCode: the
#                  plugin file res writes)
#   shell_tools    hook input: the names of its shell tool
#   pre_event      hook input: the event before a tool runs
#   post_events    hook input: the events after a tool ran: each releases what its pre-tool event booked
#                  (admission in place, docs/agent-hooks.md; Claude Code says a failed command apart)
#   entries        what `res hook install` writes, in the order it adds them (uninstall: the reverse);
#                  the first is the gate's (none: a CLI whose gate is a plugin file, OpenCode)
#   session_var    the variable its shell commands find its session's id in (None: it gives them none)
#   digest         its output digest for `res run --agent`: the class's name in core/digest.py's kinds
#   model_source   None: its output names the model; else the function of config/agentmodel.py that reads
#                  it from the CLI's own files at submit time
#   rules_reader   the function of config/agentsettings.py that reads its session's rules for the gate
#   behaviour      None: its module is the one its record is in (core/clis/<name>.py); a CLI planted
#                  elsewhere (a test's) names a function returning its module: how its hook input is read
#                  and answered, its rules' decision, its output's hint, its install's notes
#   usage_source   None: its output says what the session used; else the function of config/agentusage.py
#                  that reads it from the CLI's own files once the job's output has been read to its end
AgentCli = namedtuple("AgentCli", "name programs package home_var home_default home_sub home_realpath project_dir "
                                  "hooks_file shell_tools pre_event post_events entries session_var digest model_source "
                                  "rules_reader behaviour usage_source", defaults=(None,))


def plain_handler(timeout_s: int) -> tuple:
    """A hook entry's handler: its type, the command (None: the one res writes), its timeout in s."""
    return ("type", "command"), ("command", None), ("timeout", timeout_s)


def named_handler(timeout_ms: int) -> tuple:
    """Gemini CLI's: with a name, the timeout in ms."""
    return ("type", "command"), ("name", "res gate"), ("command", None), ("timeout", timeout_ms)


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
