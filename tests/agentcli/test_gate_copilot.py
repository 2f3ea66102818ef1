"""The gate in the real GitHub Copilot CLI (@github/copilot 1.0.102, pinned in tests/agentcli/install.sh):
its hooks file written by `res hook install --agent copilot --user` ($COPILOT_HOME/hooks/res.json),
`copilot -p … --output-format json` offline against a Chat Completions model on loopback (openai_api.py;
COPILOT_PROVIDER_BASE_URL, COPILOT_OFFLINE=true: no GitHub sign-in) whose script asks for `<python> -m
pytest -q tests` in a git repository with a two-test suite. As test_gate_opencode.py does, each
setting runs one session without the hook and one with it and `res serve`: the model gets the same
thing both times, and the ledger says how res took part.

| setting (Copilot's command line) | without the gate | with it |
|---|---|---|
| `--allow-all` (tools, paths and URLs) | runs | the same, as a res job |
| `--allow-all-tools --allow-all-paths` | runs | the same, as a res job |
| `--allow-all-tools` | runs | the same, in place (the rewrite's paths would be asked about) |
| `--allow-tool shell` (every shell command allowed) | runs | the same, in place |
| `--allow-tool 'shell(<python>:*)'` | runs | the same, in place (`res …` would be asked) |
| `--allow-all-tools --deny-tool 'shell(<python>)'` | refused by the rule | the same, untouched |

Then: with every CPU held by a note, the hook's deny reaches the model (`Denied by preToolUse hook:`
and the busy line), and no job is made; and `--uninstall` leaves COPILOT_HOME's hooks/ byte for byte
as it was before the install. Skipped where the CLI is not installed, unless CI is set (then it
fails). Nothing asserts on time.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from clihelp import res  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, entries_of, file_tree, gate_environ, gate_project, hold_every_cpu, loop, run_group, Seen, took_part_only_as_it_may  # noqa: E402,F401  (loop: the fixture)

pytestmark = pytest.mark.systemd

LINE = "python3 -m pytest -q -p no:cacheprovider tests"  # by name: a path outside the project asks (paths)
CP = AGENTS["copilot"]


@dataclass(frozen=True)
class Scenario:
    name: str
    args: tuple[str, ...]
    expect: str  # job, in place, untouched


SCENARIOS = [
    Scenario("--allow-all", ("--allow-all",), "job"),
    Scenario("--allow-all-tools --allow-all-paths", ("--allow-all-tools", "--allow-all-paths"), "job"),
    Scenario("--allow-all-tools", ("--allow-all-tools",), "in place"),
    Scenario("an allow rule for the shell", ("--allow-tool=shell",), "in place"),
    Scenario("an allow rule for the line", (f"--allow-tool=shell(python3:*)",), "in place"),
    Scenario("a deny rule", ("--allow-all-tools", f"--deny-tool=shell(python3)"), "untouched"),
]


def _install(env: dict, proj: Path, uninstall: bool = False) -> str:
    r = subprocess.run(["res", "hook", "install", "--agent", "copilot", "--user", *(["--uninstall"] if uninstall else [])],
                       env=env, cwd=str(proj), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


def _seen(s, run) -> Seen:
    results = s.tool_results()
    events = CP.events(run.stdout)
    assert len(results) == 1 and len(events) == 1, (results, events, run.context())
    with s.api._lock:
        assert [p for p in s.api.paths if not p.startswith("POST /v1/chat/completions")] == [], s.api.paths
    ev, got = events[0], results[0]
    if not ev.get("success"):
        return Seen("refused", got.text, None)
    return Seen("ran", got.text, (ev.get("shellExecution") or {}).get("exitCode"))


def _session(base: Path, proj: Path, sc: Scenario, gated: bool) -> Seen:
    s = CP.session(base / ("gated" if gated else "plain"), [LINE], proj)
    with s:
        env = CP.environment(s)
        env.update(gate_environ())
        if gated:
            assert "copilot: installed in" in _install(env, proj)
        run = run_group(CP.argv(s, sc.args), env, proj, 240)
        assert not run.timed_out and run.rc == 0, run.context()
        return _seen(s, run)


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_model_gets_what_it_would_have_got_and_res_takes_part_only_as_it_may(sc, loop):
    CP.installed()
    res = loop
    base = Path(tempfile.mkdtemp(prefix="res-cp-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        plain = _session(base, proj, sc, False)
        assert entries_of(res) == [], "res took part in a session without its hook"
        gated = _session(base, proj, sc, True)
        print(f"\ncopilot: {sc.name}: without the gate {plain.kind} rc={plain.rc}: {plain.text[:200]!r}; "
              f"with it {gated.kind} rc={gated.rc}: {gated.text[:400]!r}")
        if sc.expect == "untouched":  # here only a deny rule leaves a line alone
            assert plain.kind == "refused", (sc.name, plain)
        took_part_only_as_it_may(res, sc.name, sc.expect, plain, gated, job_rc=0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_refusal_when_busy_reaches_the_model_and_uninstall_restores_the_files(loop):
    CP.installed()
    res = loop
    note_id = hold_every_cpu(res)
    base = Path(tempfile.mkdtemp(prefix="res-cp-busy-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        s = CP.session(base / "s", [LINE], proj)
        with s:
            env = CP.environment(s)
            env.update(gate_environ())
            hooks = s.home / ".copilot" / "hooks"
            hooks.mkdir(parents=True)
            (hooks / "other.json").write_text('{"version": 1, "hooks": {}}\n')  # someone else's: left as it is
            before = file_tree(hooks)
            _install(env, proj)
            run = run_group(CP.argv(s), env, proj, 240)
            assert not run.timed_out and run.rc == 0, run.context()
            seen = _seen(s, run)
            event = CP.events(run.stdout)[0]
            print(f"\ncopilot: busy: the model got {seen.text!r}; the event: {json.dumps(event)[:600]}")
            assert seen.kind == "refused" and event["error"]["message"] == seen.text, event
            assert seen.text.startswith("Denied by preToolUse hook: res: not run:"), seen.text
            assert f'"held by the test" ({note_id}' in seen.text and re.search(r"retry after ~\d\d:\d\d", seen.text)
            assert [e for e in entries_of(res) if e["kind"] != "note"] == [], "the refusal made a job"
            assert "copilot: removed" in _install(env, proj, uninstall=True)
            assert file_tree(hooks) == before
    finally:
        res.ok("release", note_id)
        shutil.rmtree(base, ignore_errors=True)

