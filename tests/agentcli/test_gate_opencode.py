"""The gate in the real OpenCode (opencode-ai 1.18.33, pinned in tests/agentcli/install.sh): its
plugin written by `res hook install --agent opencode --user`, `opencode run --format json` against a
Chat Completions model on loopback (openai_api.py) whose script asks for `<python> -m pytest -q tests`
in a git repository with a two-test suite. As test_gate_modes_others.py does for Codex and Gemini CLI,
each setting runs one session without the plugin and one with it and `res serve`: the model gets the
same thing both times, and the ledger says how res took part.

| setting (`permission` in opencode.json) | without the gate | with it |
|---|---|---|
| OpenCode's defaults and `"bash": {"<python> -m pytest *": "allow"}` | runs | the same, as a res job |
| `"bash": {"*": "ask", "<python> -m pytest *": "allow"}` | runs | the same, in place (`res …` would be asked) |
| `"bash": {"*": "ask"}`, `opencode run --auto` | runs | the same, as a res job |
| `"bash": {"<python> -m pytest *": "ask"}` | refused (`opencode run` rejects every ask) | the same, untouched |
| `"bash": {"<python> -m pytest *": "deny"}` | refused by the rule | the same, untouched |

Then: with every CPU held by a note, the plugin's refusal reaches the model as the bash tool's error
(the busy line), and no job is made; and `--uninstall` leaves the config directory byte for byte as it
was before the install. Skipped where the CLI is not installed, unless CI is set (then it fails).
Nothing asserts on time.
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
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from clihelp import res  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, entries_of, file_tree, gate_environ, gate_project, hold_every_cpu, loop, run_group, Seen, took_part_only_as_it_may  # noqa: E402,F401  (loop: the fixture)

pytestmark = pytest.mark.systemd

LINE = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"
RULE = f"{sys.executable} -m pytest *"
OC = AGENTS["opencode"]


@dataclass(frozen=True)
class Scenario:
    name: str
    permission: Any
    expect: str  # job, in place, untouched
    args: tuple[str, ...] = ()


SCENARIOS = [
    Scenario("defaults, an allow rule", {"bash": {RULE: "allow"}}, "job"),
    Scenario("ask, an allow rule", {"bash": {"*": "ask", RULE: "allow"}}, "in place"),
    Scenario("ask, --auto", {"bash": {"*": "ask"}}, "job", ("--auto",)),
    Scenario("an ask rule", {"bash": {RULE: "ask"}}, "untouched"),
    Scenario("a deny rule", {"bash": {RULE: "deny"}}, "untouched"),
]


def _session(base: Path, proj: Path, sc: Scenario, gated: bool) -> tuple[Seen, Any]:
    s = OC.session(base / ("gated" if gated else "plain"), [LINE], proj)
    with s:
        env = OC.environment(s)
        env.update(gate_environ())
        OC.point_at(s.home, s.api, sc.permission)
        if gated:
            r = subprocess.run(["res", "hook", "install", "--agent", "opencode", "--user"], env=env, cwd=str(proj),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0 and "opencode: installed in" in r.stdout, (r.stdout, r.stderr)
        run = run_group(OC.argv(s, sc.args), env, proj, 240)
        assert not run.timed_out and run.rc == 0, run.context()
        results = s.tool_results()
        states = OC.events(run.stdout)
        # a rejected ask ends the run there: the model is not called again (the event says what it was)
        rejected = len(states) == 1 and states[0]["status"] == "error" and not results
        assert (len(results) == 1 or rejected) and len(states) == 1, (results, states, run.context())
        with s.api._lock:
            assert [p for p in s.api.paths if p.startswith("CONNECT")] in ([], ["CONNECT registry.npmjs.org:443"]), \
                s.api.paths
        st = states[0]
        if st["status"] == "error":
            return Seen("refused", results[0].text if results else st["error"], None), run
        return Seen("ran", results[0].text, st.get("metadata", {}).get("exit")), run


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_model_gets_what_it_would_have_got_and_res_takes_part_only_as_it_may(sc, loop):
    OC.installed()
    res = loop
    base = Path(tempfile.mkdtemp(prefix="res-oc-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        plain, _ = _session(base, proj, sc, False)
        assert entries_of(res) == [], "res took part in a session without its plugin"
        gated, _ = _session(base, proj, sc, True)
        print(f"\nopencode: {sc.name}: without the gate {plain.kind} rc={plain.rc}: {plain.text[:200]!r}; "
              f"with it {gated.kind} rc={gated.rc}: {gated.text[:400]!r}")
        took_part_only_as_it_may(res, sc.name, sc.expect, plain, gated, job_rc=0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_refusal_when_busy_reaches_the_model_as_the_tools_error_and_uninstall_restores_the_files(loop):
    OC.installed()
    res = loop
    note_id = hold_every_cpu(res)
    base = Path(tempfile.mkdtemp(prefix="res-oc-busy-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        s = OC.session(base / "s", [LINE], proj)
        with s:
            env = OC.environment(s)
            env.update(gate_environ())
            OC.point_at(s.home, s.api, {"bash": {RULE: "allow"}})
            config = s.home / ".config" / "opencode"
            before = file_tree(config)
            r = subprocess.run(["res", "hook", "install", "--agent", "opencode", "--user"], env=env, cwd=str(proj),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, (r.stdout, r.stderr)
            run = run_group(OC.argv(s), env, proj, 240)
            assert not run.timed_out and run.rc == 0, run.context()
            results, states = s.tool_results(), OC.events(run.stdout)
            assert len(results) == 1 and len(states) == 1, (results, states, run.context())
            text = results[0].text
            print(f"\nopencode: busy: the model got {text!r}; the event: {json.dumps(states[0])[:600]}")
            assert states[0]["status"] == "error" and states[0]["error"] == text, states
            assert text.startswith("res: not run:") and f'"held by the test" ({note_id}' in text, text
            assert re.search(r"retry after ~\d\d:\d\d", text), text
            assert [e for e in entries_of(res) if e["kind"] != "note"] == [], "the refusal made a job"
            # uninstall: the files as they were before the install, byte for byte (OpenCode's own
            # start-up litter, .gitignore and the like, is set aside: it is OpenCode's, not res's)
            r = subprocess.run(["res", "hook", "install", "--agent", "opencode", "--user", "--uninstall"], env=env,
                               cwd=str(proj), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0 and "opencode: removed" in r.stdout, (r.stdout, r.stderr)
            after = file_tree(config)
            litter = {p for p in set(after) - set(before) if not p.startswith("plugins/")}
            assert {p: v for p, v in after.items() if p not in litter} == before, (before, after)
    finally:
        res.ok("release", note_id)
        shutil.rmtree(base, ignore_errors=True)

