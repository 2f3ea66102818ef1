"""The gate in the permission modes and rule settings people run Codex and Gemini CLI in (issue 37,
item 1; Claude Code's are test_gate_modes.py): for each, the real CLI (pinned,
tests/agentcli/install.sh) runs one headless session whose scripted model (on loopback) asks for
`<python> -m pytest -q tests` in a git repository with a two-test suite, twice: without any hook, and
with `res hook install --agent X --user` and `res serve` running. What the model gets back must be the
same both times (the same output lines and exit code, or the same refusal), and the ledger says how
res took part:

- **job**: the line ran as a res job (the model's output carries `r-N started` / `r-N done rc=0`), where
  the session runs every command unasked and outside any sandbox (Codex bypass, Gemini YOLO);
- **in place**: the line ran unchanged, as the CLI's own child, booked while it ran (a note "… (in
  place)" the session owned, released by the post-tool event, none left running);
- **untouched**: res made no entry at all (a rule of the session's that could be about the line, or a
  CLI that never offered the model its shell).

| CLI | setting | without the gate | with it |
|---|---|---|---|
| Codex | `--dangerously-bypass-approvals-and-sandbox` | runs | the same, as a res job |
| Codex | `-s workspace-write` (approval `never`, as `codex exec` always is) | runs in the sandbox | the same, in place |
| Codex | `codex exec`'s default (read-only sandbox) | pytest fails (cannot write) | the same failure, in place |
| Codex | `-s danger-full-access` with `approval_policy = "on-request"` | runs | the same, as a res job |
| Codex | a `prefix_rule(… decision = "allow")` for the line, read-only sandbox | runs, outside the sandbox | the same, in place |
| Codex | a `prompt` rule for it | refused: approval required, and `exec` never asks | the same, untouched |
| Codex | a `forbidden` rule for it | refused by the policy | the same, untouched |
| Gemini CLI | `--approval-mode yolo` | runs | the same, as a res job |
| Gemini CLI | default, `tools.allowed` covers the line | runs | the same, in place |
| Gemini CLI | `auto_edit`, the same rule | runs | the same, in place |
| Gemini CLI | `plan`, the same rule (it outranks plan's deny) | runs | the same, in place |
| Gemini CLI | YOLO with that rule (it narrows the shell to itself) | runs | the same, in place |
| Gemini CLI | default, the rule covers only part of the line | refused by the policy | the same, untouched |
| Gemini CLI | default, no rule (headless: no shell tool at all) | `Tool "run_shell_command" not found` | the same, untouched |

Skipped where the CLI is not installed, unless CI is set (then it fails). Nothing asserts on time.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from clihelp import res  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, entries_of, gate_environ, gate_project, loop, run_group, Seen, took_part_only_as_it_may  # noqa: E402,F401  (loop: the fixture)

pytestmark = pytest.mark.systemd

# An absolute interpreter: Codex runs every command in a login shell (`bash -lc`), whose profile sets
# PATH anew, and this interpreter is the one with pytest.
LINE = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
PART = f"{LINE} && python3 -c 'print(1)'"
PROMPT = "Please check that this project's tests pass."  # nothing about res
ALLOWED = {"tools": {"allowed": [f"run_shell_command({sys.executable} -m pytest)"]}}


def _codex_rule(decision: str) -> str:
    return f'prefix_rule(pattern = ["{sys.executable}", "-m", "pytest"], decision = "{decision}")\n'


@dataclass(frozen=True)
class Scenario:
    cli: str
    name: str
    args: tuple[str, ...] = ()
    expect: str = "in place"  # job, in place, untouched
    line: str = LINE
    codex_rules: str = ""  # $CODEX_HOME/rules/default.rules
    gemini_settings: dict = field(default_factory=dict)  # merged into ~/.gemini/settings.json

    @property
    def id(self) -> str:
        return f"{self.cli}: {self.name}"


SCENARIOS = [
    Scenario("codex", "bypass", ("--dangerously-bypass-approvals-and-sandbox",), "job"),
    Scenario("codex", "workspace-write", ("-s", "workspace-write")),
    Scenario("codex", "read-only (exec's default)"),
    Scenario("codex", "on-request, no sandbox", ("-c", 'approval_policy="on-request"', "-s", "danger-full-access"), "job"),
    Scenario("codex", "allow rule", codex_rules=_codex_rule("allow")),
    Scenario("codex", "prompt rule", ("-s", "workspace-write"), "untouched", codex_rules=_codex_rule("prompt")),
    Scenario("codex", "forbidden rule", ("-s", "workspace-write"), "untouched", codex_rules=_codex_rule("forbidden")),
    Scenario("gemini", "yolo", ("--approval-mode", "yolo"), "job"),
    Scenario("gemini", "default, allowed", gemini_settings=ALLOWED),
    Scenario("gemini", "auto_edit, allowed", ("--approval-mode", "auto_edit"), gemini_settings=ALLOWED),
    Scenario("gemini", "plan, allowed", ("--approval-mode", "plan"), gemini_settings=ALLOWED),
    Scenario("gemini", "yolo, narrowed", ("--approval-mode", "yolo"), gemini_settings=ALLOWED),
    Scenario("gemini", "part of a line", expect="untouched", line=PART, gemini_settings=ALLOWED),
    Scenario("gemini", "no rule", expect="untouched"),
]


def _argv(sc: Scenario, path: Path) -> list[str]:
    if sc.cli == "codex":
        return [str(path), "exec", "--json", "--skip-git-repo-check", *sc.args, PROMPT]
    return [str(path), "-p", PROMPT, "-m", AGENTS["gemini"].MODEL, "--output-format", "stream-json", *sc.args]


def _settings(sc: Scenario, env: dict) -> None:
    """The session's rules, as its user writes them (before `res hook install` adds its entries)."""
    if sc.codex_rules:
        rules = Path(env["CODEX_HOME"]) / "rules"
        rules.mkdir(parents=True, exist_ok=True)
        (rules / "default.rules").write_text(sc.codex_rules)
    if sc.gemini_settings:
        path = Path(env["HOME"]) / ".gemini" / "settings.json"
        data = json.loads(path.read_text())
        for key, value in sc.gemini_settings.items():
            data.setdefault(key, {}).update(value)
        path.write_text(json.dumps(data, indent=2) + "\n")


def _codex_result(raw: dict) -> tuple[str, str, int | None]:
    """A Codex tool result that the harness does not read: the CLI's own refusal (`Script error:`)."""
    parts = [p.get("text", "") for p in raw.get("output") or [] if isinstance(p, dict)]
    whole = "".join(parts)
    assert "Script error:" in whole, raw
    return "refused", whole[whole.index("Script error:"):], None


def _session(base: Path, proj: Path, sc: Scenario, gated: bool, environ: dict) -> Seen:
    agent = AGENTS[sc.cli]
    s = agent.session(base / ("gated" if gated else "plain"), [sc.line], proj)
    with s:
        env = agent.environment(s)
        env.update(environ)
        _settings(sc, env)
        if gated:  # as a user puts it there: the gate and its post-tool event, Codex's trust entries
            r = subprocess.run(["res", "hook", "install", "--agent", sc.cli, "--user"], env=env, cwd=str(proj),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, (r.stdout, r.stderr)
        run = run_group(_argv(sc, agent.installed()), env, proj, 180)
        assert not run.timed_out, run.context()
        if sc.cli == "codex":
            with s.api._lock:
                bodies = [b for b in s.api.requests if isinstance(b, dict)]
            outputs = [i for i in (bodies[-1].get("input") or []) if isinstance(i, dict)
                       and i.get("type") in ("custom_tool_call_output", "function_call_output")] if bodies else []
            assert len(outputs) == 1, (outputs, run.context())
            try:
                r = agent._result(outputs[0])
                return Seen("refused" if r.denied else "ran", r.text, r.rc)
            except AssertionError:
                kind, text, rc = _codex_result(outputs[0])
                return Seen(kind, text, rc)
        results = s.tool_results()
        assert len(results) == 1, (results, run.context())
        r = results[0]
        return Seen("refused" if r.rc is None else "ran", r.text, r.rc)


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_the_model_gets_what_it_would_have_got_and_res_takes_part_only_as_it_may(sc, loop):
    res = loop
    base = Path(tempfile.mkdtemp(prefix="res-modes-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        plain = _session(base, proj, sc, False, gate_environ())
        assert entries_of(res) == [], "res took part in a session without its hook"
        gated = _session(base, proj, sc, True, gate_environ())
        print(f"\n{sc.id}: without the gate {plain.kind} rc={plain.rc}; with it {gated.kind} rc={gated.rc}")
        took_part_only_as_it_may(res, sc.id, sc.expect, plain, gated)
    finally:
        shutil.rmtree(base, ignore_errors=True)
