"""Pure tier: the output digests and the pricing table, with hand-written literals and transcripts.

tests/fixtures/claude/*.jsonl are `claude -p … --output-format stream-json --verbose` logs (stdout and
stderr in one file, as a job's log is) built event for event on the documented and captured shapes
cited in docs/agent-output.md; no live Claude Code run was possible where they were written, so the
ids and texts are made up and the token counts chosen for hand arithmetic. Costs below are worked by
hand from policies/pricing.toml (USD per 1M tokens).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.core.digest import (SEEN_IDS_KEPT, ClaudeDigest, DigestError, DigestState, NullDigest, make_digest)
from reconciler.core.pricing import PricingError, PricingTable, load_pricing

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude"
SHIPPED = (ROOT / "policies" / "pricing.toml").read_text()
TABLE = load_pricing(SHIPPED)

SONNET = "claude-sonnet-4-5-20250929"  # 3 / 15 / 3.75 (1h: 6) / 0.30


def fixture(name: str) -> list[str]:
    """The lines a reader would push: split on newlines; a last line without one (a truncated write
    at a crash) is pushed too, as the reader does when the process has exited."""
    text = (FIXTURES / name).read_text()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def run(lines, rc=None, finish=True, agent="claude", table=TABLE):
    d = make_digest(agent, table)
    for line in lines:
        d.push(line)
    if finish:
        d.finish(rc)
    return d


def asst(mid, out=10, inp=1, cw=0, cr=0, model=SONNET, parent=None, cw1h=None, content=(), **extra):
    """An assistant line; `content` empty unless a test is about the estimate from it (an empty one
    estimates nothing, so the line's own output count is what counts)."""
    usage = {"input_tokens": inp, "cache_creation_input_tokens": cw, "cache_read_input_tokens": cr, "output_tokens": out}
    if cw1h is not None:
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": cw - cw1h, "ephemeral_1h_input_tokens": cw1h}
    ev = {"type": "assistant", "message": {"model": model, "id": mid, "type": "message", "role": "assistant",
                                           "content": list(content), "usage": usage},
          "parent_tool_use_id": parent, "session_id": "s-1"}
    ev.update(extra)
    return json.dumps(ev, separators=(",", ":"))


def result(subtype="success", is_error=False, cost=None, turns=None, **extra):
    ev = {"type": "result", "subtype": subtype, "is_error": is_error, "duration_ms": 1000, "session_id": "s-1"}
    if cost is not None:
        ev["total_cost_usd"] = cost
    if turns is not None:
        ev["num_turns"] = turns
    ev.update(extra)
    return json.dumps(ev, separators=(",", ":"))


INIT = json.dumps({"type": "system", "subtype": "init", "session_id": "s-1", "model": SONNET, "tools": ["Bash"]})
TOOL_RESULT = json.dumps({"type": "user", "message": {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"usage":{"output_tokens":999999}}'}]},
    "parent_tool_use_id": None})


# ---------------------------------------------------------------- usage per message id


def test_usage_counted_once_per_message_id():
    d = run([INIT, asst("msg_A", out=187, inp=3, cw=5120, cr=13368), asst("msg_A", out=187, inp=3, cw=5120, cr=13368),
             asst("msg_A", out=187, inp=3, cw=5120, cr=13368)], finish=False)
    s = d.state
    assert (s.input_tokens, s.output_tokens, s.cache_write_tokens, s.cache_read_tokens) == (3, 187, 5120, 13368)
    assert s.iterations == 1
    # 3×3 + 187×15 + 5120×3.75 + 13368×0.30 = 26024.4 per 1M
    assert s.spend_usd == pytest.approx(0.0260244, abs=1e-12)


def test_placeholder_output_of_early_lines_is_replaced_by_the_real_count():
    d = run([asst("msg_A", out=1, inp=2, cr=1000), asst("msg_A", out=1, inp=2, cr=1000),
             asst("msg_A", out=260, inp=2, cr=1000), asst("msg_A", out=1, inp=2, cr=1000)], finish=False)
    assert (d.state.input_tokens, d.state.output_tokens, d.state.cache_read_tokens) == (2, 260, 1000)
    assert d.state.iterations == 1
    assert d.state.spend_usd == pytest.approx((2 * 3 + 260 * 15 + 1000 * 0.30) / 1e6, abs=1e-12)


def test_mid_stream_model_fallback_takes_the_later_line_whole():
    d = run([asst("msg_A", out=5, cw=100, model="claude-opus-4-6"), asst("msg_A", out=300, cw=200, model=SONNET)],
            finish=False)
    assert (d.state.output_tokens, d.state.cache_write_tokens) == (300, 200)
    assert d.state.spend_usd == pytest.approx((1 * 3 + 300 * 15 + 200 * 3.75) / 1e6, abs=1e-12)
    assert d.state.seen_message_ids["msg_A"][0] == SONNET


def test_distinct_messages_add_up_and_tool_results_are_not_read():
    d = run([INIT, asst("msg_A", out=10), TOOL_RESULT, asst("msg_B", out=20), asst("msg_C", out=30, parent="toolu_9")],
            finish=False)
    assert d.state.output_tokens == 60
    assert d.state.iterations == 2  # the first call, and one after the tool's result; msg_C is a sub-agent's
    assert d.state.lines == 5


def test_seen_message_ids_are_bounded_to_the_last_ones():
    d = run([asst(f"msg_{i}", out=1) for i in range(SEEN_IDS_KEPT + 36)], finish=False)
    seen = list(d.state.seen_message_ids)
    assert len(seen) == SEEN_IDS_KEPT
    assert seen[0] == "msg_36" and seen[-1] == f"msg_{SEEN_IDS_KEPT + 35}"
    assert d.state.output_tokens == SEEN_IDS_KEPT + 36


def test_a_message_without_an_id_counts_on_its_own():
    d = run([asst("", out=7), asst("", out=7)], finish=False)
    assert d.state.output_tokens == 14 and d.state.iterations == 1  # calls are counted by tool results


def test_the_model_of_the_init_event_prices_a_message_that_names_none():
    line = json.dumps({"type": "assistant", "message": {"id": "msg_A", "usage": {"input_tokens": 1000, "output_tokens": 0}}})
    d = run([INIT, line], finish=False)
    assert d.state.model == SONNET and d.state.session_id == "s-1"
    assert d.state.spend_usd == pytest.approx(1000 * 3 / 1e6)


def test_non_json_and_garbled_lines_are_counted_and_ignored():
    lines = [INIT, "", "(node:48211) MaxListenersExceededWarning: Possible EventEmitter leak", "  {not json",
             '{"type":"assistant","message":{"id":"msg_X","usage":{"output_tokens":', "[1, 2]", "   " + asst("msg_A", out=5),
             json.dumps({"type": "assistant", "message": {"id": "msg_B", "usage": {"input_tokens": "many", "output_tokens": -4}}}),
             "null", "{}"]
    d = run(lines, finish=False)
    assert d.state.lines == len(lines)
    assert d.state.output_tokens == 5 and d.state.input_tokens == 1
    assert d.state.outcome is None


# ---------------------------------------------------------------- cost


def test_cost_of_a_known_model_by_hand():
    # sonnet 4.5: 1200 in × 3 + 800 out × 15 + 2000 cache write × 3.75 + 10000 cache read × 0.30
    #   = 3600 + 12000 + 7500 + 3000 = 26100 per 1M
    usage = {"input_tokens": 1200, "output_tokens": 800, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 10000}
    assert TABLE.cost(SONNET, usage) == pytest.approx(0.0261, abs=1e-12)
    # opus 4.6: 100 × 5 + 100 × 25 = 3000 per 1M
    assert TABLE.cost("claude-opus-4-6", {"input_tokens": 100, "output_tokens": 100}) == pytest.approx(0.003)


def test_one_hour_cache_writes_pay_their_own_rate():
    # 1000 cache writes, 400 of them for 1h: 600 × 3.75 + 400 × 6 = 4650 per 1M
    usage = {"cache_creation_input_tokens": 1000, "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 400}}
    assert TABLE.cost(SONNET, usage) == pytest.approx(0.00465)
    d = run([asst("msg_A", out=0, inp=0, cw=1000, cw1h=400)], finish=False)
    assert d.state.spend_usd == pytest.approx(0.00465)


def test_long_prompt_tier():
    # haiku 5.5: ≤100K prompt 0.10 / 0.50; over 100K every token pays 0.50 / 2.50
    assert TABLE.cost("claude-haiku-5-5", {"input_tokens": 100_000, "output_tokens": 1000}) == pytest.approx((10_000 + 500) / 1e6)
    assert TABLE.cost("claude-haiku-5-5", {"input_tokens": 60_000, "cache_read_input_tokens": 40_001, "output_tokens": 1000}) == \
        pytest.approx((60_000 * 0.50 + 40_001 * 0.05 + 1000 * 2.50) / 1e6)
    # sonnet 4.5 over 200K: 6 / 22.50
    assert TABLE.cost(SONNET, {"input_tokens": 250_000, "output_tokens": 100}) == pytest.approx((250_000 * 6 + 100 * 22.5) / 1e6)


def test_unknown_model_pays_the_conservative_rate_never_zero():
    for model in ("claude-opus-9-9", "claude-opus-4-9", "gpt-9", "", None):
        key, rates = TABLE.resolve(model)
        assert key is None and rates == TABLE.default
        assert TABLE.cost(model, {"input_tokens": 1000, "output_tokens": 1000}) == pytest.approx((1000 * 20 + 1000 * 75) / 1e6)
    d = run([asst("msg_A", out=1000, inp=1000, model="claude-nova-7")], finish=False)
    assert d.state.spend_usd == pytest.approx(0.095) and d.state.spend_usd > 0
    # the default is at least the dearest rate of each kind in the shipped table
    for key, r in TABLE.models.items():
        for tier in (r, r.long):
            if tier is not None:
                assert all(d >= v for d, v in zip(TABLE.default.values(), tier.values())), key


@pytest.mark.parametrize("model, key", [
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-sonnet-4-5", "claude-sonnet-4-5"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ("claude-sonnet-4-0", "claude-sonnet-4-0"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-opus-4-20250514", "claude-opus-4"),
    ("claude-opus-4@20250514", "claude-opus-4"),
    ("us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1"),
    ("claude-opus-4-6", "claude-opus-4-6"),
    ("claude-opus-4-6[1m]", "claude-opus-4-6"),
    ("claude-opus-4-5-20251101", "claude-opus-4-5"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet"),
    ("Claude-Sonnet-5-5", "claude-sonnet-5-5"),
    ("claude-fable-5-1", "claude-fable-5-1"),
    ("claude-fable-5", "claude-fable-5"),
    ("claude-opus-4-9", None),  # another version, not Opus 4
    ("claude-sonnet-4-5x", None),
    ("claude-opus-4-1-20250805-v1", "claude-opus-4-1"),
    ("claude-sonnet-4-latest", "claude-sonnet-4"),
    ("<synthetic>", None),
])
def test_model_ids_resolve_by_prefix(model, key):
    assert TABLE.resolve(model)[0] == key


# ---------------------------------------------------------------- the result event


def test_result_event_is_authoritative_for_cost_and_iterations():
    d = run([INIT, asst("msg_A", out=100), asst("msg_B", out=100), asst("msg_C", out=100),
             result(cost=0.4321, turns=7, usage={"input_tokens": 9, "output_tokens": 333})], finish=False)
    s = d.state
    assert s.spend_usd == 0.4321 and s.iterations == 7
    assert (s.input_tokens, s.output_tokens) == (9, 333)
    assert s.result_seen and s.outcome == "success" and s.failure_reason is None


def test_result_model_usage_totals_replace_the_streamed_counts():
    mu = {SONNET: {"inputTokens": 5, "outputTokens": 695, "cacheReadInputTokens": 51880, "cacheCreationInputTokens": 7296},
          "claude-haiku-4-5-20251001": {"inputTokens": 312, "outputTokens": 18, "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0}}
    d = run([asst("msg_A", out=1), result(cost=0.05, modelUsage=mu, usage={"input_tokens": 5, "output_tokens": 695})], finish=False)
    assert (d.state.input_tokens, d.state.output_tokens, d.state.cache_write_tokens, d.state.cache_read_tokens) == (317, 713, 7296, 51880)


def test_result_reporting_zero_cost_does_not_make_a_run_free():
    d = run([asst("msg_A", out=1000, inp=0), result(cost=0, turns=1, usage={})], finish=False)
    assert d.state.spend_usd == pytest.approx(0.015)
    assert d.state.output_tokens == 1000  # an empty usage object replaces nothing


def test_success_fixture():
    lines = fixture("success.jsonl")
    before = run(lines[:-1], finish=False).state
    # by hand, sonnet 4.5 per message (the highest-output line of each id):
    #   3×3 + 187×15 + 5120×3.75 + 13368×0.30 = 26024.4;  1×3 + 412×15 + 1536×3.75 + 18488×0.30 = 17489.4
    #   1×3 + 96×15 + 640×3.75 + 20024×0.30 = 9850.2      → 53364.0 per 1M
    assert before.spend_usd == pytest.approx(0.053364, abs=1e-12)
    assert (before.input_tokens, before.output_tokens, before.cache_write_tokens, before.cache_read_tokens) == (5, 695, 7296, 51880)
    # Claude Code counts one turn per tool result line, and message B's two parallel tool calls have
    # a result line each (as in the real nightgauge-2.1.223-nopartial-two-bash-calls.jsonl: two
    # results, three turns): 1 + 3 lines = 4. This hand-built file's result says 3; it wins once seen.
    assert before.iterations == 4 and before.outcome is None
    d = run(lines, rc=0)
    s = d.state
    assert s.lines == 12  # the stderr warning line included
    assert s.spend_usd == 0.053766  # total_cost_usd: the three turns + a background haiku call (402 per 1M)
    assert s.iterations == 3
    assert (s.input_tokens, s.output_tokens) == (317, 713)  # modelUsage: sonnet + haiku
    assert s.outcome == "success" and s.failure_reason is None
    assert s.model == SONNET and s.session_id == "4f1c2b7e-8d3a-4c55-9b1e-2a7f0c9d6e13"


def test_a_seen_result_decides_whatever_the_exit_code():
    assert run([asst("msg_A"), result(cost=0.01)], rc=1).state.outcome == "success"
    s = run([asst("msg_A"), result("error_max_turns", cost=0.01)], rc=0).state
    assert (s.outcome, s.failure_reason) == ("failure", "error_max_turns")


def test_success_subtype_with_is_error_is_a_failure():
    s = run([asst("msg_A"), result("success", is_error=True, cost=0.02, result="API Error: 401 invalid x-api-key")], rc=0).state
    assert s.outcome == "failure"
    assert s.failure_reason == "is_error: API Error: 401 invalid x-api-key"


# ---------------------------------------------------------------- crashes and errors


def test_crash_with_no_result_leaves_the_outcome_to_the_exit_code():
    lines = fixture("crash_no_result.jsonl")
    assert not lines[-1].endswith("}")  # the last line was cut mid-write
    d = run(lines, finish=False)
    s = d.state
    assert s.lines == 12 and not s.result_seen and s.outcome is None
    # opus 4.6 (5 / 25 / 6.25 / 0.50): 6×5 + 220×25 + 9800×6.25 = 66780. Message 2 was cut off with a
    # placeholder of 1 output token; its 72 characters of text say at least 72 / 2 + 12 = 48:
    # 2×5 + 48×25 + 310×6.25 + 9800×0.50 = 8047.5 → 74827.5 per 1M
    assert s.spend_usd == pytest.approx(0.0748275, abs=1e-12)
    assert (s.input_tokens, s.output_tokens, s.cache_write_tokens, s.cache_read_tokens) == (8, 268, 10110, 9800)
    assert s.iterations == 2
    for rc, outcome, why in ((1, "failure", "exit code 1"), (0, "success", None), (None, "failure", "no exit code (killed or lost)"),
                             (-9, "failure", "exit code -9")):
        d = run(lines, rc=rc)
        assert (d.state.outcome, d.state.failure_reason) == (outcome, why)
        assert d.state.spend_usd == pytest.approx(0.0748275, abs=1e-12)  # spend kept, not lost with the crash


def test_error_result_with_a_cost_fails_the_run_and_keeps_its_cost():
    s = run(fixture("error_during_execution.jsonl"), rc=1).state
    assert s.outcome == "failure"
    assert s.failure_reason.startswith("error_during_execution: API Error: 529 ")
    assert s.spend_usd == 0.078945  # 4×5 + 85×25 + 12288×6.25 = 78945 per 1M (opus 4.5), as reported
    assert s.iterations == 2 and s.output_tokens == 85
    # exited 0 all the same: the result still decides
    assert run(fixture("error_during_execution.jsonl"), rc=0).state.outcome == "failure"


def test_error_max_turns_fails_even_with_is_error_false():
    s = run(fixture("error_max_turns.jsonl"), rc=0).state
    assert (s.outcome, s.failure_reason) == ("failure", "error_max_turns")
    assert s.spend_usd == 0.0067696 and s.iterations == 2


def test_a_failure_signal_fails_a_run_that_has_no_result():
    err = asst("2c6f0a8e", out=0, inp=0, model="<synthetic>", error="rate_limit")
    s = run([INIT, asst("msg_A"), err], rc=0).state
    assert (s.outcome, s.failure_reason) == ("failure", "assistant error: rate_limit")
    assert s.iterations == 1  # a synthetic message is no turn
    # a result after it (Claude Code retried and finished) decides
    assert run([INIT, asst("msg_A"), err, asst("msg_B"), result(cost=0.1)], rc=0).state.outcome == "success"


def test_finish_is_idempotent():
    d = run([asst("msg_A")], rc=3)
    d.finish(0)
    assert (d.state.outcome, d.state.rc, d.state.failure_reason) == ("failure", 3, "exit code 3")


def test_failure_reason_is_one_short_line():
    s = run([result("error_during_execution", is_error=True, errors=["line one\nline two " + "x" * 500])], rc=1).state
    assert "\n" not in s.failure_reason and len(s.failure_reason) <= 200
    assert s.failure_reason.startswith("error_during_execution: line one line two x")


# ---------------------------------------------------------------- the null digest


def test_null_digest_counts_lines_and_reads_nothing():
    d = make_digest("none", None)
    assert isinstance(d, NullDigest)
    for line in fixture("error_during_execution.jsonl"):
        d.push(line)
    s = d.state
    assert s.lines == 5 and s.spend_usd == 0 and s.output_tokens == 0 and s.iterations == 0 and not s.result_seen
    d.finish(0)
    assert d.state.outcome == "success"
    assert run(["anything"], rc=2, agent="none", table=None).state.failure_reason == "exit code 2"


def test_make_digest_kinds_and_bad_states():
    assert isinstance(make_digest("claude", TABLE), ClaudeDigest)
    assert isinstance(make_digest("Claude", TABLE), ClaudeDigest)
    with pytest.raises(DigestError, match="unknown agent 'cursor'"):
        make_digest("cursor", TABLE)
    with pytest.raises(DigestError, match="pricing table"):
        make_digest("claude", None)
    with pytest.raises(DigestError, match="'none' digest state cannot resume a 'claude' digest"):
        make_digest("claude", TABLE, state=make_digest("none", None).state)
    with pytest.raises(DigestError, match="digest state: lines"):
        make_digest("claude", TABLE, state='{"agent":"claude","lines":-1}')
    with pytest.raises(DigestError, match="digest state"):
        make_digest("claude", TABLE, state="{not json")


# ---------------------------------------------------------------- resumability


def _resume_lines():
    """Every fixture, and a stream that interleaves what resuming could get wrong: repeated ids across
    the cut, a placeholder line before the real count, a result, more turns after it."""
    yield "success.jsonl", fixture("success.jsonl")
    yield "crash_no_result.jsonl", fixture("crash_no_result.jsonl")
    yield "error_during_execution.jsonl", fixture("error_during_execution.jsonl")
    yield "error_max_turns.jsonl", fixture("error_max_turns.jsonl")
    mixed = [INIT, asst("msg_A", out=1, cr=500), "stderr: warning", asst("msg_A", out=1, cr=500), asst("msg_A", out=90, cr=500),
             TOOL_RESULT, asst("msg_B", out=3, model="claude-opus-4-6", cw=700, cw1h=300), asst("msg_B", out=3, model="claude-opus-4-6", cw=700, cw1h=300),
             asst("msg_C", out=11, parent="toolu_7", model="claude-haiku-4-5"), result(cost=0.25, turns=2, usage={"input_tokens": 4, "output_tokens": 120}),
             asst("msg_D", out=40), asst("msg_D", out=40), asst("msg_D", out=41, model="claude-mystery-1")]
    mixed += [asst(f"msg_{i}", out=i) for i in range(SEEN_IDS_KEPT + 5)]
    yield "mixed", mixed


@pytest.mark.parametrize("name, lines", list(_resume_lines()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("rc", [0, 1])
def test_resume_from_committed_state_at_every_line(name, lines, rc):
    whole = run(lines, rc=rc).state.model_dump_json()
    for k in range(len(lines) + 1):
        first = make_digest("claude", TABLE)
        for line in lines[:k]:
            first.push(line)
        committed = first.state.model_dump_json()  # what the holder commits with the offset
        del first  # the reconciler dies here
        again = make_digest("claude", TABLE, state=json.loads(committed))
        assert again.state.model_dump_json() == committed
        for line in lines[k:]:
            again.push(line)
        again.finish(rc)
        assert again.state.model_dump_json() == whole, f"cut after line {k}"


def test_state_round_trips_through_json_exactly():
    d = run(fixture("success.jsonl")[:6], finish=False)
    s = d.state
    back = DigestState.model_validate_json(s.model_dump_json())
    assert back == DigestState.model_validate(s.model_dump())
    assert back.spend_usd == s.spend_usd
    assert json.loads(s.model_dump_json())["seen_message_ids"]["msg_01Q7xKc2VbN8mRt4Hs9LpWzA"] == [SONNET, 3, 187, 5120, 13368, 0]


# ---------------------------------------------------------------- pricing tables


def test_override_merges_key_by_key():
    t = load_pricing(SHIPPED, '[models.claude-opus-4-6]\ninput = 6\n\n[models.acme-coder-2]\ninput = 1\noutput = 2\n'
                              'cache_write = 1.25\ncache_read = 0.1\n')
    r = t.models["claude-opus-4-6"]
    assert (r.input, r.output, r.cache_write, r.cache_read) == (6.0, 25.0, 6.25, 0.50)
    assert t.resolve("acme-coder-2-20261101")[0] == "acme-coder-2"
    assert t.models["acme-coder-2"].cache_write_1h == pytest.approx(2.0)  # 1.6 × cache_write when not given
    assert TABLE.models["claude-opus-4-6"].input == 5.0  # the shipped table is untouched
    assert load_pricing(SHIPPED, None).models.keys() == load_pricing(SHIPPED, "  \n# nothing\n").models.keys()


def test_a_table_is_a_value():
    assert isinstance(TABLE, PricingTable)
    t = load_pricing("[default]\ninput = 1\noutput = 2\ncache_write = 1\ncache_read = 0.5\n")
    assert t.models == {} and t.cost("anything", {"output_tokens": 1_000_000}) == 2.0


MINIMAL = "[default]\ninput = 15\noutput = 75\ncache_write = 18.75\ncache_read = 1.5\n"


@pytest.mark.parametrize("shipped, override, message", [
    ("[default\ninput = 1", None, r"^policies/pricing.toml: .*line 1"),
    (MINIMAL, "[models.x]\ninput = = 2", r"^pricing override: "),
    (MINIMAL, "[models.claude-x]\ninput = -1\noutput = 1\ncache_write = 1\ncache_read = 1",
     r"^pricing override: models.claude-x.input: must be a finite number >= 0, got -1$"),
    (MINIMAL, "[models.claude-x]\ninput = 1\noutput = 1\ncache_write = 1",
     r"^pricing override: models.claude-x: missing rate 'cache_read' \(USD per 1M tokens\)$"),
    (MINIMAL, '[models.claude-x]\ninput = "3"\noutput = 1\ncache_write = 1\ncache_read = 1',
     r"^pricing override: models.claude-x.input: must be a number \(USD per 1M tokens\), got '3'$"),
    (MINIMAL, "[models.claude-x]\ninput = true\noutput = 1\ncache_write = 1\ncache_read = 1", r"models.claude-x.input: must be a number"),
    (MINIMAL, "[models.claude-x]\ninput = nan\noutput = 1\ncache_write = 1\ncache_read = 1", r"models.claude-x.input: must be a finite number"),
    (MINIMAL, "[models.claude-x]\ninptu = 1\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1", r"models.claude-x: unknown key 'inptu'"),
    (MINIMAL, "[modles.claude-x]\ninput = 1", r"^pricing override: unknown key 'modles'"),
    (MINIMAL, "models = 3", r"^pricing override: models: must be a table$"),
    (MINIMAL, "[models]\nclaude-x = 3", r"models.claude-x: must be a table of rates"),
    (MINIMAL, '[models."Claude X"]\ninput = 1', r"a model id is lower-case"),
    ("[models.claude-x]\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1", None, r"^policies/pricing.toml: no \[default\] table"),
    (MINIMAL, "[default]\ninput = 0", r"^pricing override: default.input: must be > 0 \(unknown models never cost \$0\)$"),
    (MINIMAL, "[default]\noutput = 5", r"^pricing override: default.output 5 is below models.claude-opus-4-1.output 75; the rate for unknown models must be at least the dearest one$"),
    (MINIMAL + "[models.claude-big]\ninput = 20\noutput = 1\ncache_write = 1\ncache_read = 1\n", None,
     r"^policies/pricing.toml: default.input 15 is below models.claude-big.input 20"),
    (MINIMAL, "[models.claude-x]\ninput = 1\noutput = 1\ncache_write = 1\ncache_read = 1\n[models.claude-x.long]\ninput = 2\noutput = 2\ncache_write = 2\ncache_read = 1",
     r"models.claude-x.long.above: must be a whole number of prompt tokens > 0, got None"),
    (MINIMAL, "[default.long]\nabove = 5\ninput = 2\noutput = 2\ncache_write = 2\ncache_read = 1",
     r"default.long: the default rate has no prompt-length tier"),
])
def test_broken_pricing_is_an_error_naming_what_is_wrong(shipped, override, message):
    if shipped == MINIMAL and override is not None and "claude-opus-4" in message:
        shipped = SHIPPED
    with pytest.raises(PricingError, match=message) as e:
        load_pricing(shipped, override)
    assert "\n" not in str(e.value)


def test_every_agent_the_command_line_accepts_has_a_digest():
    from reconciler.core.agents import agent_kinds
    from reconciler.core.digest import _kinds

    assert set(agent_kinds()) == set(_kinds())
    with pytest.raises(DigestError, match=r"unknown agent 'aider' \(known: none, claude, codex, gemini, opencode, copilot\)"):
        make_digest("aider", TABLE)
