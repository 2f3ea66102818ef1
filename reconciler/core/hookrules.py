"""Would the agent's session have run this command without asking, and can the gate hand it back
rewritten without changing that? The gate rewrites a command only then (DESIGN §5.8: it never grants
a permission the session would not have had, and never takes one away). Each CLI judges its rules
against the command the hook hands back, so `res run … -- bash -c 'X'` is judged as `res run`, not as
X: a rule that denies or asks about X would no longer see it, and an allow rule for X would no longer
cover it. What each CLI lets a hook do about that (docs/agent-hooks.md has the sources):

    Claude Code  the rewrite may carry `permissionDecision: "allow"`, which skips the allow rules (deny
                 and ask rules still apply): where the session's own rules let X run unasked, the
                 rewrite is answered with that allow (GRANT: it grants nothing the session lacked)
    Codex        a rewrite is applied only with "allow", and its own rules then judge `res run`: only
                 where every command runs unasked and unsandboxed (GRANT)
    Gemini CLI   a hook cannot grant; the rewritten `res run` is judged by the policy engine: only in
                 YOLO mode, with no rule that outranks it (REWRITE)
    OpenCode     a plugin cannot grant (1.18's permission.ask hook is never called); the bash tool judges
                 the rewritten command by its `permission.bash` patterns, last match winning: only where
                 its rules let both the line and a `res …` line run unasked (REWRITE); where they let
                 the line run and would ask about `res …`, in place (ADMIT)
    Copilot CLI  a hook's "allow" would grant (res never sends it); its --allow-tool/--deny-tool rules
                 judge the rewritten command (measured on 1.0.102), a deny rule winning over every
                 allow; it asks about a path outside its working directories (the rewrite's `res` and
                 log are): only under allow-all for the shell (--allow-all-tools, --yolo, `shell`) and
                 for paths (--allow-all-paths, --allow-all, --yolo), with no deny rule that could be
                 about the line, `res` or `bash` (REWRITE); where the shell rules cover the line
                 strictly and it names no path (or paths are all allowed), in place (ADMIT)

Elsewhere the command passes unchanged and the CLI judges it as it always does. A command the
session runs in a sandbox is never rewritten (the job would run outside it).

Each CLI's part of the decision is its module's `decide` (core/clis/); this module asks the one the
call came from. The rules' vocabulary and matchers: core/shellrules.py.

Import-light: the registry and shellrules (the CLI's module is imported when it is asked).
"""
from __future__ import annotations

from reconciler.core.agentclis import CLIS, behaviour
from reconciler.core.shellrules import ADMIT, GRANT, REWRITE, Rules, guarded

__all__ = ["ADMIT", "GRANT", "REWRITE", "decide"]


def decide(cli: str, mode: str | None, line: str, commands: list[list[str]], rules: Rules) -> str | None:
    """GRANT, REWRITE, ADMIT (pass it unchanged, booked in place) or None (pass the line unchanged) for
    a heavy line the loop would start: see the module's table. `commands`: the line's simple commands
    (core.shellline.simple_commands)."""
    if cli == "shell":  # a PATH shim: the program was going to run; through res it asks nobody anything
        return REWRITE
    if cli in CLIS:
        return behaviour(cli).decide(mode, line, commands, rules)
    if guarded(commands, rules) or rules.narrowed:  # a CLI res does not know: nothing but its sandbox
        return None
    return ADMIT if rules.sandboxed else None
