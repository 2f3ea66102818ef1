"""The gate in the permission modes and rule settings people run Claude Code in (issue 37): for each,
the real CLI (pinned, tests/agentcli/install.sh) runs one session whose scripted model (on loopback)
asks for `python3 -m pytest -q tests` in a git repository with a two-test suite, twice: with `res
hook` installed (`res hook install --agent claude --user`) and without any hook. What the model gets
back, and whether the person would have been asked (in `-p` there is nobody to ask: the call is
refused with `This command requires approval` and listed in the result's `permission_denials`), must
be the same both times; where the command ran, it ran as a res job with the gate (its `r-N started`
and `r-N done rc=0` lines), with the same test output and exit code.

| scenario | the session | expected, with and without the gate |
|---|---|---|
| allow rule | default mode, `Bash(python3 -m pytest:*)` in the user's allow rules | runs unasked; with the gate as a res job (the rewrite carries Claude Code's own allow) |
| acceptEdits / dontAsk | the same rule in those modes | the same |
| part of a line | `python3 -m pytest -q tests && python3 -c 'print(1)'`, the rule covers only the first | asked |
| no rule | default mode | asked |
| deny rule | the rule under `deny` | refused |
| ask rule | the rule under `ask` | asked |
| plan mode | the allow rule, `--permission-mode plan` | whatever the CLI does there, the same with the gate (no res job) |
| --allowedTools Bash | every command allowed (as root the CLI refuses bypassPermissions) | runs unasked; with the gate as a res job |

Skipped where the CLI is not installed, unless CI is set (then it fails).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
from anthropic_api import AnthropicAPI, Turn, Usage  # noqa: E402
from clihelp import res  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, gate_project, job_of, loop, meaningful, run_group  # noqa: E402,F401  (loop: the fixture)
from test_claude_cli import cli_env  # noqa: E402

pytestmark = pytest.mark.systemd

LINE = "python3 -m pytest -q -p no:cacheprovider tests"
RULE = "Bash(python3 -m pytest:*)"
U = Usage(input_tokens=100, output_tokens=10)


@dataclass(frozen=True)
class Scenario:
    name: str
    permissions: dict
    args: tuple[str, ...] = ()
    line: str = LINE


SCENARIOS = [
    Scenario("allow rule", {"allow": [RULE]}),
    Scenario("acceptEdits", {"allow": [RULE]}, ("--permission-mode", "acceptEdits")),
    Scenario("dontAsk", {"allow": [RULE]}, ("--permission-mode", "dontAsk")),
    Scenario("part of a line", {"allow": [RULE]}, line=f"{LINE} && python3 -c 'print(1)'"),
    Scenario("no rule", {}),
    Scenario("deny rule", {"deny": [RULE]}),
    Scenario("ask rule", {"allow": [RULE], "ask": [RULE]}),
    Scenario("plan mode", {"allow": [RULE]}, ("--permission-mode", "plan")),
    Scenario("allowedTools Bash", {}, ("--allowedTools", "Bash")),
]


@dataclass
class Seen:
    """What one session's model got back for its command, and whether the CLI would have asked."""

    kind: str  # ran, asked, refused
    text: str
    denials: list
    raw: object

    @property
    def job(self) -> tuple[str | None, int | None]:
        return job_of(self.text)


def _session(base: Path, proj: Path, sc: Scenario, gated: bool, environ: dict) -> Seen:
    home = base / ("gated" if gated else "plain")
    home.mkdir()
    with AnthropicAPI() as api:
        api.script(Turn(usage=U, text="Running the tests.", tool="Bash",
                        tool_input={"command": sc.line, "description": "Run the tests"}), Turn(usage=U, text="Done."))
        env = cli_env(home, api)
        env.update(environ)
        settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"
        settings.write_text(json.dumps({"permissions": sc.permissions}, indent=2) + "\n")
        if gated:  # as a user puts it there
            r = subprocess.run(["res", "hook", "install", "--agent", "claude", "--user"], env=env, cwd=str(proj),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, (r.stdout, r.stderr)
        cli = AGENTS["claude"].installed()
        run = run_group([str(cli), "-p", "Please check that this project's tests pass.", "--output-format",
                         "stream-json", "--verbose", *sc.args], env, proj, 180)
        assert not run.timed_out, run.context()
        results = AGENTS["claude"].tool_results(api)
    denials = []
    for ln in run.stdout.splitlines():
        try:
            ev = json.loads(ln)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("type") == "result":
            denials = ev.get("permission_denials") or []
    assert len(results) <= 1, results
    if not results:
        return Seen("none", "", denials, run.context())
    r = results[0]
    text = r.text
    if denials or "requires approval" in text:
        kind = "asked"
    elif re.search(r"(denied|not allowed|blocked)", text, re.I) and r.rc is None:
        kind = "refused"
    else:
        kind = "ran"
    return Seen(kind, text, denials, r.raw)


@pytest.fixture(scope="module")
def claude():
    return AGENTS["claude"].installed()


def _environ() -> dict:
    keep = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")
    of_a_job = ("RES_ID", "RES_BY", "RES_TASK", "RES_CPUS", "RES_MEM_MB")
    return {k: v for k, v in os.environ.items() if (k.startswith("RES_") and k not in of_a_job) or k in keep}


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_model_gets_what_it_would_have_got_and_heavy_work_runs_as_a_job(sc, claude, loop):
    base = Path(tempfile.mkdtemp(prefix="res-modes-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        plain = _session(base, proj, sc, False, _environ())
        gated = _session(base, proj, sc, True, _environ())
        print(f"\n{sc.name}: without the gate {plain.kind} {plain.denials}; with it {gated.kind} {gated.denials}")
        assert gated.kind == plain.kind, (sc.name, plain, gated)
        assert bool(gated.denials) == bool(plain.denials), (plain.denials, gated.denials)
        job, rc = gated.job
        if plain.kind == "ran":
            assert meaningful(gated.text) == meaningful(plain.text), (gated.text, plain.text)
            if sc.name != "plan mode":
                assert job is not None and rc == 0, f"{sc.name}: not run as a res job: {gated.text}"
        else:
            assert job is None, f"{sc.name}: a res job where the session would not have run it: {gated.text}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
