"""The hook files of res's own: whole files `res hook install` writes for the CLIs whose hooks are not
entries in a settings file (OpenCode's plugin, Copilot CLI's hooks file), the res path each runs read
back from one (None: not as res wrote it), and the command every CLI's hook runs. Pure: text in, text
out; commands/hookinstall.py writes and removes the files. Formats and sources: docs/agent-hooks.md.
"""
from __future__ import annotations

import json
import os


def hook_command(res: str, cli: str) -> str:
    """The command a CLI runs: `<res> hook --agent <cli>`, the path quoted for the shell if it must be."""
    import shlex

    return f"{shlex.quote(res)} hook --agent {cli}"


# ---------------------------------------------------------------- OpenCode: a plugin file

# OpenCode 1.18 loads every {plugin,plugins}/*.{js,ts} of its config directories at start (Bun runs
# it); a plugin's tool.execute.before gets the tool's args object, which the tool then runs with (so
# setting args.command rewrites it), and a throw fails the call with the error's text as its result.
# The legacy shape (every export a function) loads on every 1.18 release. @@RES@@: the res path, a JSON
# string. The event sent is core/hooks.py's OpenCode input; no output, or any failure: the call goes on
# as it is (a hook that never ends is killed after GATE_HOOK_TIMEOUT_S).
OPENCODE_PLUGIN = """\
// res's gate for OpenCode, written by `res hook install --agent opencode` (docs/agent-hooks.md);
// `res hook install --agent opencode --uninstall` removes it while it is as written.
import { spawn } from "node:child_process"

const RES = @@RES@@

function ask(event) {
  return new Promise((resolve) => {
    let out = ""
    const p = spawn(RES, ["hook", "--agent", "opencode"], { stdio: ["pipe", "pipe", "ignore"] })
    const timer = setTimeout(() => p.kill("SIGKILL"), @@TIMEOUT_MS@@)
    p.stdout.on("data", (d) => { out += d })
    p.stdin.on("error", () => {})
    p.on("error", () => { clearTimeout(timer); resolve(null) })
    p.on("close", () => {
      clearTimeout(timer)
      try { resolve(out.trim() ? JSON.parse(out) : null) } catch { resolve(null) }
    })
    p.stdin.end(JSON.stringify(event))
  })
}

function event(name, input, args, directory) {
  return { hook_event_name: name, tool_name: input.tool, tool_input: args, session_id: input.sessionID,
           tool_use_id: input.callID, cwd: directory }
}

export const ResGate = async ({ directory }) => ({
  "tool.execute.before": async (input, output) => {
    if (input.tool !== "bash" || !output.args || typeof output.args.command !== "string") return
    const answer = await ask(event("tool.execute.before", input, output.args, directory))
    if (answer && typeof answer.deny === "string") throw new Error(answer.deny)
    if (answer && typeof answer.command === "string") output.args.command = answer.command
  },
  "tool.execute.after": async (input) => {
    if (input.tool === "bash") await ask(event("tool.execute.after", input, input.args || {}, directory))
  },
})
"""


def opencode_plugin(res: str) -> str:
    """The plugin file `res hook install --agent opencode` writes, running `res` (an absolute path)."""
    from reconciler.core.agentclis import GATE_HOOK_TIMEOUT_S

    return (OPENCODE_PLUGIN.replace("@@RES@@", json.dumps(res))
            .replace("@@TIMEOUT_MS@@", str(GATE_HOOK_TIMEOUT_S * 1000)))


def plugin_res(text: str) -> str | None:
    """The res path of a plugin file res wrote (any res path), else None: the file is someone else's,
    or was changed since."""
    head, mark, tail = OPENCODE_PLUGIN.partition("@@RES@@")
    if not (text.startswith(head) and mark):
        return None
    try:
        res, end = json.JSONDecoder().raw_decode(text, len(head))
    except ValueError:
        return None
    if not isinstance(res, str) or not os.path.isabs(res) or text != opencode_plugin(res):
        return None
    return res


# ---------------------------------------------------------------- Copilot CLI: a hooks file of res's own


def copilot_hooks(res: str) -> str:
    """The hooks file `res hook install --agent copilot` writes, running `res` (an absolute path).
    Copilot reads every hooks/*.json of its user directory (and a repository's .github/hooks/) and runs
    every entry in each, so res's entries live in a file of their own that no one else edits."""
    from reconciler.core.agentclis import GATE_HOOK_TIMEOUT_S, POST_HOOK_TIMEOUT_S

    command = hook_command(res, "copilot")
    doc = {"version": 1, "hooks": {
        "preToolUse": [{"type": "command", "bash": command, "timeoutSec": GATE_HOOK_TIMEOUT_S}],
        "postToolUse": [{"type": "command", "bash": command, "timeoutSec": POST_HOOK_TIMEOUT_S}]}}
    return json.dumps(doc, indent=2) + "\n"


def copilot_res(text: str) -> str | None:
    """The res path of a hooks file res wrote (any res path), else None (someone else's, or changed)."""
    import shlex

    try:
        command = json.loads(text)["hooks"]["preToolUse"][0]["bash"]
        head, sep, tail = command.rpartition(" hook --agent copilot")
        words = shlex.split(head) if sep and not tail else []
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    if len(words) != 1 or not os.path.isabs(words[0]) or text != copilot_hooks(words[0]):
        return None
    return words[0]


# What each whole file of res's is: (its text for a res path, the res path of a text of it, what it does,
# what it is called).
OWN_FILES = {
    "opencode": (opencode_plugin, plugin_res,
                 "tool.execute.before bash, tool.execute.after bash", "plugin"),
    "copilot": (copilot_hooks, copilot_res, "preToolUse, postToolUse", "hooks file"),
}
