"""The Codex and Gemini digests on real output (tests/fixtures/codex, tests/fixtures/gemini: copied
byte for byte from public repositories, SOURCES.md beside them). Costs worked by hand from
policies/pricing.toml (USD per 1M tokens). The few lines built by hand are for cases no real file
shows, and say so."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.core.agents import model_from_command
from reconciler.core.digest import make_digest
from reconciler.core.spend import running_spend_usd
from reconciler.core.pricing import load_pricing

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
CODEX = ROOT / "tests" / "fixtures" / "codex"
GEMINI = ROOT / "tests" / "fixtures" / "gemini"


def lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


def run(agent: str, lines: list[str], rc: int | None = 0, model: str | None = None, finish: bool = True):
    d = make_digest(agent, TABLE, model=model)
    before = None
    for line in lines:
        if '"turn.completed"' in line or line.startswith('{"type":"result"'):
            before = running_spend_usd(d.state)
        d.push(line)
    if finish:
        d.finish(rc)
    return d, before


# ---------------------------------------------------------------- codex exec --json


def test_codex_a_finished_turn_is_priced_from_its_usage():
    d, before = run("codex", lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl"), model="gpt-5-codex")
    s = d.state
    # usage 6040 input of which 4992 cached, 129 output; gpt-5-codex 1.25 / 0.125 / 10:
    # 1048 × 1.25 + 4992 × 0.125 + 129 × 10 = 1310 + 624 + 1290 = 3224 per 1M
    assert s.spend_usd == pytest.approx(0.003224, abs=1e-12)
    assert (s.input_tokens, s.cache_read_tokens, s.output_tokens) == (1048, 4992, 129)
    assert (s.outcome, s.iterations, s.session_id) == ("success", 2, "019a2d7a-6455-7170-a661-c6d8b94c630a")
    assert before >= 0.8 * s.spend_usd  # the estimate before the usage came never under-reads


@pytest.mark.parametrize("name", ["agentcmd_0.46.0_command-exec_success.jsonl", "vincent_0.142.5_command-exec_success.jsonl",
                                  "vincent_0.147.0_reasoning_success.jsonl",
                                  "vincent_0.150.1_mcp-tool-failed_turn-completed.jsonl"])
def test_codex_the_running_estimate_never_under_reads(name):
    d, before = run("codex", lines_of(CODEX / name), model="gpt-5-codex")
    assert d.state.outcome == "success"
    assert before >= 0.8 * d.state.spend_usd, (before, d.state.spend_usd)


def test_codex_a_failed_tool_is_no_failed_run_and_each_tool_is_a_call():
    d, _ = run("codex", lines_of(CODEX / "vincent_0.150.1_mcp-tool-failed_turn-completed.jsonl"), model="gpt-5.6-sol")
    assert (d.state.outcome, d.state.iterations) == ("success", 3)  # the first call, one after each of 2 tools


def test_codex_turn_failed_fails_the_run_whatever_the_exit_code():
    d, _ = run("codex", lines_of(CODEX / "vincent_0.142.5_turn-failed.jsonl"), rc=0)
    assert d.state.outcome == "failure"
    assert d.state.failure_reason.startswith('turn.failed: {"type":"error","status":400')
    assert d.state.spend_usd == 0  # refused before any output (HTTP 400): it billed nothing (test_digest_codex.py)


def test_codex_a_stream_without_a_marker_is_a_failure_even_with_exit_0():
    lines = lines_of(CODEX / "vincent_0.142.5_command-exec_success.jsonl")[:-1]  # interrupted before turn.completed
    d, _ = run("codex", lines, rc=0)
    assert d.state.outcome == "failure" and "without turn.completed" in d.state.failure_reason


def test_codex_the_model_comes_from_the_command_line():
    assert model_from_command(["codex", "exec", "--json", "-m", "gpt-5-mini", "fix it"]) == "gpt-5-mini"
    assert model_from_command(["codex", "exec", "--model=o4-mini"]) == "o4-mini"
    assert model_from_command(["codex", "exec", "--json", "fix it"]) is None
    cheap, _ = run("codex", lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl"), model="gpt-5-mini")
    unknown, _ = run("codex", lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl"))
    assert cheap.state.spend_usd < unknown.state.spend_usd  # unnamed: the dearest rates, never cheap


# ---------------------------------------------------------------- gemini --output-format stream-json


def test_gemini_the_result_prices_thinking_as_output():
    d, before = run("gemini", lines_of(GEMINI / "gemicord_stream-json_tool-use_success.jsonl"))
    s = d.state
    # stats: total 13374, input 12821 (9598 cached, 3223 not), output 186; billed output = total − input = 553;
    # init says the alias auto-gemini-2.5, priced as gemini-2.5-pro (1.25 / 0.125 / 10):
    # 3223 × 1.25 + 9598 × 0.125 + 553 × 10 = 4028.75 + 1199.75 + 5530 = 10758.5 per 1M
    assert s.spend_usd == pytest.approx(0.0107585, abs=1e-12)
    assert (s.input_tokens, s.cache_read_tokens, s.output_tokens) == (3223, 9598, 553)
    assert (s.outcome, s.iterations, s.model) == ("success", 2, "auto-gemini-2.5")
    assert before >= 0.8 * s.spend_usd


def test_gemini_a_simple_run_from_an_older_cli():
    d, before = run("gemini", lines_of(GEMINI / "agentcmd_0.11.0_stream-json_simple_success.jsonl"))
    # 7352 input, 7386 total: 34 output; gemini-2.5-pro: 7352 × 1.25 + 34 × 10 = 9530 per 1M
    assert d.state.spend_usd == pytest.approx(0.00953, abs=1e-12)
    assert (d.state.outcome, d.state.iterations) == ("success", 1)
    assert before >= 0.8 * d.state.spend_usd


def test_gemini_an_error_event_fails_a_run_its_result_calls_a_success():
    """Hand-built from the CLI's own test snapshot (docs/codex-gemini-formats.md §2.5): no real file
    shows "Maximum session turns exceeded"."""
    lines = lines_of(GEMINI / "agentcmd_0.11.0_stream-json_simple_success.jsonl")
    lines.insert(-1, json.dumps({"type": "error", "severity": "error", "message": "Maximum session turns exceeded"}))
    d, _ = run("gemini", lines)
    assert d.state.outcome == "failure" and "Maximum session turns" in d.state.failure_reason


def test_gemini_no_result_is_a_failure():
    lines = lines_of(GEMINI / "agentcmd_0.11.0_stream-json_simple_success.jsonl")[:-1]
    d, _ = run("gemini", lines, rc=0)
    assert d.state.outcome == "failure" and "without a result" in d.state.failure_reason


# ---------------------------------------------------------------- both: resumable exactly


@pytest.mark.parametrize("agent, path", [("codex", p) for p in sorted(CODEX.glob("*.jsonl"))]
                         + [("gemini", p) for p in sorted(GEMINI.glob("*.jsonl"))], ids=lambda v: getattr(v, "stem", v))
def test_a_resume_at_every_line_boundary_ends_in_the_same_state(agent, path):
    lines = lines_of(path)
    whole, _ = run(agent, lines, model="gpt-5" if agent == "codex" else None)
    want = whole.state.model_dump_json()
    for k in range(len(lines) + 1):
        first = make_digest(agent, TABLE, model="gpt-5" if agent == "codex" else None)
        for line in lines[:k]:
            first.push(line)
        again = make_digest(agent, TABLE, first.state.model_dump_json(), model="gpt-5" if agent == "codex" else None)
        for line in lines[k:]:
            again.push(line)
        again.finish(0)
        assert again.state.model_dump_json() == want, f"cut after line {k}"


# ---------------------------------------------------------------- output in no known format


def test_output_in_no_known_format_is_said_and_costs_a_cent_a_line():
    """Hand-built: `claude -p` without --output-format prints plain text (no real file needed to
    show text lines)."""
    from reconciler.core.spend import UNKNOWN_LINE_USD, unknown_format
    from reconciler.core.models import JobRecord, Phase, Request
    from reconciler.core.plan import agent_outcome

    text = [f"line {i} of a plain-text answer" for i in range(40)]
    for agent in ("claude", "codex", "gemini"):
        d, _ = run(agent, text, rc=0)
        assert unknown_format(d.state)
        assert running_spend_usd(d.state) == pytest.approx(40 * UNKNOWN_LINE_USD)
    few, _ = run("claude", text[:5], rc=0)
    assert not unknown_format(few.state)  # too few lines to judge
    known, _ = run("gemini", lines_of(GEMINI / "agentcmd_0.11.0_stream-json_simple_success.jsonl"))
    assert not unknown_format(known.state)
    req = Request(id="r-1", title="t", mem_gb=1.0, est_s=60, created=1.0, cmd=["claude"], agent="claude")
    rec = JobRecord(request=req, phase=Phase.running, digest=run("claude", text, rc=0)[0].state)
    verdict = agent_outcome(rec, {"code": "exited", "rc": 0})
    assert verdict == {"code": "exited", "rc": 0, "unknown_format": True, "lines": 40}
