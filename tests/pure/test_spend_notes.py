"""Pure tier: where the spend of an agent session is not simply its own usage at its model's rates, the
settle line and `res status` say so (issue 22: `priced at the dearest rates: no model named (give
-m)`), never silently. Lines HAND-BUILT on Codex's `exec --json` shapes (tests/fixtures/codex)."""
from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core.agents import unread_output

from reconciler.core.digest import make_digest
from reconciler.core.spend import running_spend_usd
from reconciler.core.pricing import load_pricing

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
TURN = ['{"type":"thread.started","thread_id":"t-1"}', '{"type":"turn.started"}']


def test_a_session_with_no_model_named_says_the_dearest_rates_priced_it():
    d = make_digest("codex", TABLE)
    for line in TURN:
        d.push(line)
    assert d.model_note == "no model named (give -m)"  # its why then says so (tests/pure/test_reasons.py)


def test_a_model_the_table_does_not_know_is_named():
    d = make_digest("codex", TABLE, model="gpt-99-imaginary")
    d.push(TURN[1])
    assert d.model_note == "no price for model 'gpt-99-imaginary'"


def test_a_known_model_needs_no_note():
    d = make_digest("codex", TABLE, model="gpt-5")
    for line in TURN:
        d.push(line)
    assert d.model_note is None


def test_a_reported_usage_is_the_running_spend_without_margin():
    d = make_digest("codex", TABLE, model="gpt-5")
    for line in TURN:
        d.push(line)
    assert running_spend_usd(d.state) > 0
    d._reported(0.0123, 1000, 10, 0)
    assert running_spend_usd(d.state) == 0.0123


# ------------------------------------------------------------ an agent's output res cannot read mid-run
# (issue 22: Gemini's --output-format json prints its usage only at its end; said at submit)



@pytest.mark.parametrize("agent,cmd,says", [
    ("gemini", ["gemini", "-p", "hi", "--output-format", "json"], "only at its end"),
    ("gemini", ["gemini", "-p", "hi", "-o", "json"], "only at its end"),
    ("gemini", ["gemini", "-p", "hi", "--output-format=json"], "only at its end"),
    ("gemini", ["/home/me/.npm/bin/gemini", "-p", "hi"], "prints text"),
    ("claude", ["claude", "-p", "hi"], "stream-json"),
    ("codex", ["codex", "exec", "hi"], "--json"),
])
def test_a_session_whose_usage_res_cannot_read_mid_run_is_named(agent, cmd, says):
    assert says in unread_output(agent, cmd)


@pytest.mark.parametrize("agent,cmd", [
    ("gemini", ["gemini", "-p", "hi", "--output-format", "stream-json"]),
    ("gemini", ["gemini", "-p", "hi", "-o", "json", "-o", "stream-json"]),
    ("claude", ["claude", "-p", "hi", "--output-format", "stream-json", "--verbose"]),
    ("codex", ["codex", "exec", "--json", "hi"]),
    ("none", ["make"]),
    ("claude", ["/usr/bin/python3", "fake_agent.py"]),  # a wrapper: its arguments say nothing
    ("gemini", ["./run-gemini.sh", "-o", "json"]),
])
def test_a_session_that_streams_its_usage_needs_no_note(agent, cmd):
    assert unread_output(agent, cmd) is None
