"""`res run --agent copilot` with the real GitHub Copilot CLI (@github/copilot 1.0.102, pinned in
tests/agentcli/install.sh) as a res job, offline against a Chat Completions model on loopback
(openai_api.py, which answers with the usage chosen here): its `--output-format json` names no token
count, only its session; res reads the session's own file ($COPILOT_HOME/session-state/<id>/events.jsonl)
once the job's output has ended, and the spend it records must be the table price of what the server
billed. The same session resumed by a second job: that job counts its own call only, never the first
job's again. Skipped where the CLI is not installed, unless CI is set (then it fails). Nothing asserts
on time."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from clihelp import res  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, gate_environ, gate_project, loop  # noqa: E402,F401  (loop: the fixture)
from reconciler.core.pricing import load_pricing  # noqa: E402

pytestmark = pytest.mark.systemd

CP = AGENTS["copilot"]
TABLE = load_pricing((HERE.parents[1] / "policies" / "pricing.toml").read_text())


def _run(loop, s, env: dict, argv: list[str]):
    return loop("run", "--agent", "copilot", "--wait", "--mem", "1G", "--for", "5m", "--", *argv, env=env, cwd=s.cwd,
                timeout=240)


def test_the_spend_is_what_the_server_billed_and_a_resumed_session_counts_only_its_own(loop):
    CP.installed()
    base = Path(tempfile.mkdtemp(prefix="res-copilot-cli-"))
    proj = gate_project(base)
    s = CP.session(base / "s", ["echo hello-from-copilot"], proj)
    with s:
        env = {**CP.environment(s), **gate_environ()}
        r = _run(loop, s, env, CP.argv(s))
        assert r.code == 0, str(r)
        calls = [p for p in s.api.paths if p.startswith("POST /v1/chat/completions")]
    first = loop.status("r-1")
    assert len(calls) == 2 and CP.events(r.out)[0]["success"] is True, (calls, r.out[-2000:])
    u = CP.U  # each call: 1000 prompt tokens (none cached), 10 out
    assert (first["input_tokens"], first["output_tokens"], first["iterations"]) == (2 * u.input_tokens, 2 * u.output_tokens, 2), first
    want = 2 * TABLE.cost_tokens(CP.MODEL, u.input_tokens, u.output_tokens)
    assert first["spend_usd"] == pytest.approx(want, abs=1e-6) and not first["spend_estimated"], first
    sid = json.loads(r.out.strip().splitlines()[-1])["sessionId"]
    assert (Path(env["COPILOT_HOME"]) / "session-state" / sid / "events.jsonl").is_file()

    # the same session again, in a second job: its file now holds both runs' records
    again = CP.session(base / "s", [], proj)  # the same home; the model only answers "Done."
    with again:
        env = {**CP.environment(again), **gate_environ()}
        argv = [a for a in CP.argv(again) if a != "--allow-all-tools"]
        r = _run(loop, again, env, [argv[0], f"--resume={sid}", *argv[1:]])
        assert r.code == 0, str(r)
        calls = [p for p in again.api.paths if p.startswith("POST /v1/chat/completions")]
    second = loop.status("r-2")
    assert len(calls) == 1, calls
    assert (second["input_tokens"], second["output_tokens"]) == (u.input_tokens, u.output_tokens), second
    assert second["spend_usd"] == pytest.approx(TABLE.cost_tokens(CP.MODEL, u.input_tokens, u.output_tokens), abs=1e-6)
    assert loop.status("r-1")["spend_usd"] == first["spend_usd"]  # counted once
