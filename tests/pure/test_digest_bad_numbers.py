"""Pure tier: hostile numbers in an agent's output (issue 22). A usage count of 10**400 used to raise
OverflowError out of push() (every later pass failed at the same offset), and 1e308 made the spend
infinite, stored as null, so every resume failed. Such a line is set aside with one line, nothing of it
counted, and the digest goes on. The lines are HAND-BUILT (no real transcript carries such numbers),
on the shapes of the real transcripts in tests/fixtures/claude/real."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.core.digest import DigestState, make_digest
from reconciler.core.spend import running_spend_usd
from reconciler.core.pricing import BadNumber, load_pricing, tokens

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
SONNET = "claude-sonnet-4-5-20250929"


def asst(mid: str, out, inp=3) -> str:
    return json.dumps({"type": "assistant", "parent_tool_use_id": None, "session_id": "s",
                       "message": {"id": mid, "model": SONNET, "role": "assistant", "content": [],
                                   "usage": {"input_tokens": inp, "output_tokens": out,
                                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})


HUGE_INT = '{"type":"assistant","parent_tool_use_id":null,"session_id":"s","message":{"id":"m2","model":"' + SONNET + \
    '","role":"assistant","content":[],"usage":{"input_tokens":' + "1" + "0" * 400 + \
    ',"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}'


@pytest.mark.parametrize("value", [10**400, 10**13, 1e308, float("inf"), float("nan")])
def test_tokens_refuses_counts_no_model_call_has(value):
    with pytest.raises(BadNumber):
        tokens(value)


@pytest.mark.parametrize("value,count", [(-4, 0), ("12", 0), (None, 0), (12, 12), (7.0, 7), (10**12, 10**12)])
def test_tokens_keeps_what_could_be_real(value, count):
    assert tokens(value) == count


@pytest.mark.parametrize("bad", [
    HUGE_INT,
    asst("m2", 1e308),
    json.dumps({"type": "stream_event", "parent_tool_use_id": None, "session_id": "s",
                "event": {"type": "message_delta", "usage": {"output_tokens": 10**30}}}),
    '{"type":"stream_event","event":{"type":"message_delta","delta":{},"usage":{"output_tokens":' + "9" * 5000 + '}},'
    '"parent_tool_use_id":null,"session_id":"s"}',
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "total_cost_usd": 1e308}),
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 10**30, "total_cost_usd": 0.1}),
    json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                "modelUsage": {SONNET: {"inputTokens": 10**400, "outputTokens": 1}}}),
])
def test_claude_line_with_a_hostile_number_is_set_aside_and_the_rest_counts(bad):
    start = json.dumps({"type": "stream_event", "parent_tool_use_id": None, "session_id": "s",
                        "event": {"type": "message_start", "message": {"id": "m1", "usage": {}}}})
    lines = [start, asst("m1", 100), bad, asst("m3", 50)]
    d = make_digest("claude", TABLE)
    before = None
    for i, line in enumerate(lines):
        d.push(line)
        if i == 1:
            before = d.state
    assert d.set_aside == 1
    assert d.set_aside_note.startswith("line 3: ") and "set aside" in d.set_aside_note
    # nothing of the bad line counted: the spend is the two good messages' own
    assert d.spend_usd == pytest.approx(TABLE.cost_tokens(SONNET, 6, 150))
    assert d.result_seen is False and d.iterations == before.iterations
    # the state round-trips (was: an infinite spend stored as null, and every resume failed)
    again = make_digest("claude", TABLE, state=d.state.model_dump_json())
    assert again.state == d.state


def test_codex_usage_of_1e308_is_set_aside_not_infinite():
    lines = ['{"type":"thread.started","thread_id":"t"}', '{"type":"turn.started"}',
             '{"type":"turn.completed","usage":{"input_tokens":1e308,"cached_input_tokens":0,"output_tokens":3}}']
    d = make_digest("codex", TABLE, model="gpt-5")
    for line in lines:
        d.push(line)
    assert d.set_aside == 1 and "1e+308" in d.set_aside_note
    state = DigestState.model_validate_json(d.state.model_dump_json())
    assert running_spend_usd(state) < 1 and state.spend_usd == d.spend_usd
