"""The agent CLIs res gates and reads (Claude Code, Codex, Gemini CLI, OpenCode, GitHub Copilot CLI), one
record each, and the one list of them (CLIS, in the order lists show them). Everything that names the
CLIs reads it: the command line's `--agent` choices (`res hook`, `res run`, entry.py's dispatch of `res
hook`), the gate (core/hooks.py: which CLI an input is from, its call, its answers; core/hookrules.py:
its rules' decision; config/agentsettings.py: the reader of its rules), `res hook install` and `res
doctor`'s gates (where each one's files are, what is written in them), the processes a note may be
owned by (core/agents.agent_name), the session id in a caller's environment (observed/asker.py), the
digest of `res run --agent` and its output's hint (core/digest.py, core/agents.unread_output), the
spend margin (core/spend.py), where a session's model is read (commands/run.py, apply/attach.py) and
where its usage is, if its output does not say (config/agentusage.py, read by apply/attach.py).
Where a CLI's files are on this machine is resolved in config/agenthome.py, from the fields here.

What differs between the CLIs beyond these facts is each one's module, core/clis/<name>.py (how its
hook input becomes the gate's call, its rewrite, note and refusal, its part of the rule decision, the
output format `res run --agent` reads, what `res hook install` says or refuses for it), which its
record names and `behaviour(name)` imports when first asked: `res hook` imports only the one CLI's
module it is called for. What must stay on the config floor (reading its rules, its model) is named
here by the function's name (rules_reader, model_source). No caller compares a CLI's name. Sources:
docs/agent-hooks.md, docs/agent-output.md.

Pure and import-light: collections only, and each CLI's module when asked (`res hook` imports this
before every agent shell command; namedtuple, not dataclasses or typing: those cost the hook ~3-7 ms).
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
#   behaviour      a function returning its module (core/clis/), imported only when first asked: how its
#                  hook input is read and answered, its rules' decision, its output's hint, its install's notes
#   usage_source   None: its output says what the session used; else the function of config/agentusage.py
#                  that reads it from the CLI's own files once the job's output has been read to its end
AgentCli = namedtuple("AgentCli", "name programs package home_var home_default home_sub home_realpath project_dir "
                                  "hooks_file shell_tools pre_event post_events entries session_var digest model_source "
                                  "rules_reader behaviour usage_source", defaults=(None,))


# Each CLI's module, imported when first asked (`res hook` imports only the one CLI it is called for).
def _claude():
    from reconciler.core.clis import claude
    return claude


def _codex():
    from reconciler.core.clis import codex
    return codex


def _gemini():
    from reconciler.core.clis import gemini
    return gemini


def _opencode():
    from reconciler.core.clis import opencode
    return opencode


def _copilot():
    from reconciler.core.clis import copilot
    return copilot


def _plain(timeout_s: int) -> tuple:
    return ("type", "command"), ("command", None), ("timeout", timeout_s)


def _named(timeout_ms: int) -> tuple:
    return ("type", "command"), ("name", "res gate"), ("command", None), ("timeout", timeout_ms)


CLAUDE = AgentCli(
    "claude", ("claude",), "/claude-code/", "CLAUDE_CONFIG_DIR", ".claude", "", False, ".claude", "settings.json",
    ("Bash",), "PreToolUse", ("PostToolUse", "PostToolUseFailure"),
    (HookEntry("PreToolUse", "Bash", _plain(GATE_HOOK_TIMEOUT_S), False),
     HookEntry("SessionStart", None, _plain(SESSION_HOOK_TIMEOUT_S), False),
     HookEntry("PostToolUse", "Bash", _plain(POST_HOOK_TIMEOUT_S), False),
     HookEntry("PostToolUseFailure", "Bash", _plain(POST_HOOK_TIMEOUT_S), False)),
    "CLAUDE_CODE_SESSION_ID",  # from 2.1.132 (CHANGELOG)
    "ClaudeDigest", None, "claude_session_rules", _claude)

CODEX = AgentCli(
    "codex", ("codex", "codex.js", "codex.exe"), "/@openai/codex", "CODEX_HOME", ".codex", "", True, ".codex",
    "hooks.json", ("Bash",), "PreToolUse", ("PostToolUse",),
    (HookEntry("PreToolUse", "Bash", _plain(GATE_HOOK_TIMEOUT_S), False, "pre_tool_use"),
     HookEntry("SessionStart", None, _plain(SESSION_HOOK_TIMEOUT_S), False, "session_start"),
     HookEntry("PostToolUse", "Bash", _plain(POST_HOOK_TIMEOUT_S), False, "post_tool_use")),
    "CODEX_THREAD_ID",  # codex-rs/protocol/src/shell_environment.rs
    "CodexDigest", "codex_session", "codex_session_rules", _codex)

GEMINI = AgentCli(
    "gemini", ("gemini",), "/gemini-cli/", "GEMINI_CLI_HOME", ".gemini", ".gemini", False, ".gemini",
    "settings.json", ("run_shell_command",), "BeforeTool", ("AfterTool",),
    (HookEntry("BeforeTool", "^run_shell_command$", _named(GATE_HOOK_TIMEOUT_S * 1000), True),  # milliseconds
     HookEntry("SessionStart", None, _named(SESSION_HOOK_TIMEOUT_S * 1000), True),
     HookEntry("AfterTool", "^run_shell_command$", _named(POST_HOOK_TIMEOUT_S * 1000), True)),
    None,  # Gemini CLI gives its shell commands no session id
    "GeminiDigest", None, "gemini_session_rules", _gemini)

OPENCODE = AgentCli(
    "opencode", ("opencode",), "/opencode-ai/", "OPENCODE_CONFIG_DIR", ".config/opencode", "", False, ".opencode",
    # not a settings file: a plugin of its own that hands the bash tool's calls to `res hook` (the same
    # path under its user directory and a project's .opencode/; commands/hookinstall.py writes it whole)
    "plugins/res-gate.js", ("bash",), "tool.execute.before", ("tool.execute.after",),
    (),  # no settings entries: the plugin is the whole install
    None,  # OpenCode 1.18 gives its shell commands no session id
    "OpenCodeDigest", None, "opencode_session_rules", _opencode)

COPILOT = AgentCli(
    "copilot", ("copilot",), "/@github/copilot", "COPILOT_HOME", ".copilot", "", False, ".github",
    # a hooks file of res's own, written whole (Copilot loads every hooks/*.json of its user directory and
    # a repository's .github/hooks/*.json, and runs every entry of each); its inputs name no event: a
    # post-tool one is told apart by its toolResult (core/hooks.py)
    "hooks/res.json", ("bash",), "preToolUse", ("postToolUse",),
    (),  # no entries in a settings file: the hooks file is the whole install
    "COPILOT_AGENT_SESSION_ID",  # in its bash tool's environment (measured on 1.0.102)
    # --output-format json names no tokens, only its session (last line): they are in the session's
    # events.jsonl under $COPILOT_HOME/session-state/, read at the job's end
    "CopilotDigest", None, "copilot_session_rules", _copilot, "copilot_session_usage")

# The registry: name -> record. Read it when it is needed, never copied at import time (a test plants
# a CLI in it for the length of the test).
CLIS: dict[str, AgentCli] = {cli.name: cli for cli in (CLAUDE, CODEX, GEMINI, OPENCODE, COPILOT)}


def behaviour(name: str):
    """The module of a registered CLI's behaviour (core/clis/), imported now if it was not yet."""
    return CLIS[name].behaviour()
