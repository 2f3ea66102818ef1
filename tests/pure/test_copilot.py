"""GitHub Copilot CLI's parts, pure: its hook input (the real 1.0.102 samples of tests/fixtures/hooks)
and answers (core/hooks.py), its `shell(…)` rules and the gate's decision over them (core/hookrules.py),
the rules read from its command line (config/agentsettings.copilot_rules) and the hooks file res writes
(commands/hookinstall.py). The real CLI: tests/agentcli/test_gate_copilot.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.config.ownhookfiles import copilot_hooks, copilot_res
from reconciler.config.agentsettings import copilot_rules
from reconciler.core.agents import unread_output
from reconciler.core.copilot import BASE_INPUT_TOKENS, CopilotDigest
from reconciler.core.digest import make_digest
from reconciler.core.pricing import load_pricing
from reconciler.core.spend import spend_is_estimated
from reconciler.core.hookrules import decide
from reconciler.core.shellrules import ADMIT, REWRITE, Rules, copilot_covered
from reconciler.core.hooks import cli_of, deny_output, hold_id, note_output, read_call, rewrite_output

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hooks"
LINE = "python3 -m pytest -q tests"
COMMANDS = [["python3", "-m", "pytest", "-q", "tests"]]


def _pre() -> dict:
    return json.loads((FIX / "copilot-1.0.102-pretooluse-bash.json").read_text())


def _post() -> dict:
    return json.loads((FIX / "copilot-1.0.102-posttooluse-bash.json").read_text())


def test_the_real_inputs_are_read_as_copilots_call_before_and_after():
    pre, post = _pre(), _post()
    assert cli_of(pre) == "copilot" and cli_of(post) == "copilot"
    call = read_call(pre, "copilot")
    assert call.cli == "copilot" and call.command == "echo original-cmd" and call.cwd == "/var/tmp/cp-lf5h0gxt/proj"
    assert call.session == "0e145a9d-a173-4be2-bd2f-74452972cbc4" and call.call_id is None and call.timeout_s is None
    assert call.tool_input == {"command": "echo original-cmd", "description": "Run the tests"}
    assert read_call(pre, "copilot", post=True) is None
    ran = read_call(post, "copilot", post=True)
    assert ran is not None and ran.command == "echo original-cmd" and read_call(post, "copilot") is None
    assert hold_id(ran) == hold_id(call)  # the pre and post events pair by session and command
    assert read_call(pre) == call  # its shape alone says Copilot


def test_tool_args_as_a_json_string_and_other_tools():
    pre = _pre()
    as_string = {**pre, "toolArgs": json.dumps(pre["toolArgs"])}  # github/copilot-cli#3349's form
    assert read_call(as_string, "copilot").command == "echo original-cmd"
    assert read_call({**pre, "toolArgs": "{not json"}, "copilot") is None
    assert read_call({**pre, "toolName": "view"}, "copilot") is None
    assert read_call({**pre, "toolArgs": {"command": "  "}}, "copilot") is None


def test_the_answers_copilot_understands():
    call = read_call(_pre(), "copilot")
    # the whole args object: Copilot 1.0.102 runs with exactly what modifiedArgs holds (a field left out is gone)
    assert rewrite_output(call, "res run --wait -- x", "ctx", grant=True) == {
        "modifiedArgs": {"command": "res run --wait -- x", "description": "Run the tests"}}
    assert deny_output(call, "res: not run: busy") == {"permissionDecision": "deny",
                                                       "permissionDecisionReason": "res: not run: busy"}
    assert note_output(call, "ctx") is None


def test_the_rules_read_from_its_command_line():
    def rules(*args, env=None):
        return copilot_rules(env or {}, [["copilot", *args, "-p", "hi"]])

    assert rules() == Rules(False, (), frozenset(), any_path=False)
    assert rules("--allow-all-tools") == Rules(True, (), frozenset(), any_path=False)
    assert rules("--allow-all") == Rules(True, (), frozenset(), any_path=True) == rules("--yolo")
    assert rules(env={"COPILOT_ALLOW_ALL": "true"}).any_path is True
    assert rules("--allow-all-tools", "--allow-all-paths") == Rules(True, (), frozenset(), any_path=True)
    assert rules("--allow-tool=shell").unasked is True
    r = rules("--allow-tool", "shell(python3:*)", "--allow-tool=write", "--deny-tool=shell(git push)")
    assert r.allow == ("python3:*",) and r.guarded == frozenset({"git"}) and not r.unasked
    assert rules("--deny-tool", "shell").guarded == frozenset({"*"})
    assert copilot_rules({}, []) == Rules(False, (), frozenset(), any_path=False)  # not found: nothing allowed


def test_copilot_covered_is_never_looser_than_its_rules():
    assert copilot_covered(LINE, ["python3:*"]) and copilot_covered(LINE, ["python3"])
    assert copilot_covered("python3", ["python3:*"]) and not copilot_covered("python3x -V", ["python3:*"])
    assert copilot_covered("make test && python3 -V", ["make", "python3"])
    assert not copilot_covered("make test && rm -rf x", ["make"])
    assert copilot_covered("git push", ["git push"]) and not copilot_covered("git push origin", ["git push"])
    assert not copilot_covered("git push", ["git"])  # git and gh: by their subcommand, only the whole text here
    assert copilot_covered("npm test", ["npm test"]) and not copilot_covered("npm test -x", ["npm test"])
    for odd in ("python3 -c 'x'", "A=1 python3 x", "python3 $X", "python3 x > out"):
        assert not copilot_covered(odd, ["*"]), odd
    assert not copilot_covered(LINE, [])


def test_the_gate_rewrites_only_where_copilot_would_run_the_rewrite_unasked():
    every = Rules(True, (), frozenset(), any_path=True)
    tools_only = Rules(True, (), frozenset(), any_path=False)
    assert decide("copilot", None, LINE, COMMANDS, every) == REWRITE
    # measured: --allow-all-tools alone asks about the rewrite's paths (its res, its log): in place
    assert decide("copilot", None, LINE, COMMANDS, tools_only) == ADMIT
    assert decide("copilot", None, "/usr/bin/python3 -m pytest", [["/usr/bin/python3", "-m", "pytest"]], tools_only) is None
    ruled = Rules(False, ("python3:*",), frozenset(), any_path=False)
    assert decide("copilot", None, LINE, COMMANDS, ruled) == ADMIT
    assert decide("copilot", None, LINE, COMMANDS, Rules(False, ("make",), frozenset(), any_path=True)) is None
    for deny in ({"python3"}, {"res"}, {"bash"}, {"*"}):  # a deny outranks every allow, --allow-all's too
        assert decide("copilot", None, LINE, COMMANDS, Rules(True, (), frozenset(deny), any_path=True)) is None


def test_the_hooks_file_res_writes_and_knows_again():
    text = copilot_hooks("/opt/res bin/res")
    doc = json.loads(text)
    assert doc == {"version": 1, "hooks": {
        "preToolUse": [{"type": "command", "bash": "'/opt/res bin/res' hook --agent copilot", "timeoutSec": 30}],
        "postToolUse": [{"type": "command", "bash": "'/opt/res bin/res' hook --agent copilot", "timeoutSec": 10}]}}
    assert copilot_res(text) == "/opt/res bin/res"
    assert copilot_res(text.replace("30", "31")) is None
    assert copilot_res(text + "\n") is None
    assert copilot_res(copilot_hooks("relative/res")) is None
    assert copilot_res("{}") is None and copilot_res("not json") is None


# ---------------------------------------------------------------- `res run --agent copilot`

STREAMS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "copilot"
TABLE = load_pricing((Path(__file__).resolve().parents[2] / "policies" / "pricing.toml").read_text())
SID = "b119262f-b7f4-47f8-91e4-fcc27293636a"


def _digest(name: str) -> CopilotDigest:
    d = make_digest("copilot", TABLE)
    d.push_lines((STREAMS / name).read_bytes())
    return d


def _events(name: str) -> list[dict]:
    return [json.loads(line) for line in (STREAMS / name).read_text().splitlines()]


def test_res_run_reads_copilot_only_with_json_output():
    assert unread_output("copilot", ["copilot", "-p", "hi", "--output-format", "json"]) is None
    assert "--output-format json" in unread_output("copilot", ["copilot", "-p", "hi"])
    assert unread_output("copilot", ["copilot", "-p", "hi", "--output-format=text"]) is not None


def test_the_stream_estimates_each_model_call_and_names_the_session():
    """The real 1.0.102 stream: two model calls (one tool call, one answer), no token count; until the
    session's file is read, each call is estimated (its base prompt and what it was shown), so a cost
    budget sees a running session's spend grow; the last line names the session."""
    d = _digest("copilot-1.0.102-stream-tool-bash.jsonl")
    assert d.iterations == 2 and d.session_id == SID and d.model == "loop-model"
    assert d.input_tokens >= 2 * BASE_INPUT_TOKENS and d.output_tokens > 0 and d.spend_usd > 0
    assert d.model_note == "no price for model 'loop-model'"  # the dearest rates, said
    assert spend_is_estimated(d.state)  # the last line came, but what it used is still an estimate
    d.finish(0)
    assert d.outcome == "success"


def test_this_runs_usage_records_replace_the_estimates_exactly():
    """At the end, the session file's usage records of this run are the spend: the first run's two
    calls (1000 prompt with 200 cached + 30 out; 1200 + 5), priced by res's table at the model each
    names; the resumed run's one call (1500 with 1000 cached + 7) only, never the first run's again."""
    events = _events("copilot-1.0.102-resumed.events.jsonl")
    resumed_at = next(i for i, e in enumerate(events) if e["type"] == "session.resume")
    first = [e["data"]["usage"] for e in events[:resumed_at] if e["type"] == "session.usage_record"]
    second = [e["data"]["usage"] for e in events[resumed_at:] if e["type"] == "session.usage_record"]
    shutdowns = [e["data"] for e in events if e["type"] == "session.shutdown"]
    assert (len(first), len(second), len(shutdowns)) == (2, 1, 2)

    d = _digest("copilot-1.0.102-stream-tool-bash.jsonl")
    d.session_file(first, shutdowns[:1])
    assert (d.input_tokens, d.cache_read_tokens, d.output_tokens, d.cache_write_tokens) == (800 + 1200, 200, 35, 0)
    want = TABLE.cost_tokens("loop-model", 800, 30, 0, 200) + TABLE.cost_tokens("loop-model", 1200, 5)
    assert d.spend_usd == pytest.approx(want) and d.estimate_usd == pytest.approx(want)
    assert not spend_is_estimated(d.state) and d.iterations == 2

    d = _digest("copilot-1.0.102-stream-resumed.jsonl")
    assert d.session_id == SID and d.iterations == 1
    d.session_file(second, shutdowns[1:])  # its shutdown holds the whole session's running totals: not used
    assert (d.input_tokens, d.cache_read_tokens, d.output_tokens) == (500, 1000, 7)
    assert d.spend_usd == pytest.approx(TABLE.cost_tokens("loop-model", 500, 7, 0, 1000))


def test_a_session_file_without_usage_records_counts_its_shutdowns_per_model():
    """1.0.55-1 (a public session file) writes no usage record: the shutdown's modelMetrics, per model,
    inputTokens less the cached and cache-written tokens (81666 = 8 + 54064 + 27594), each priced at
    its own model."""
    events = _events("copilot-1.0.55-1-prompt-subagent.events.jsonl")
    assert not [e for e in events if e["type"] == "session.usage_record"]
    d = make_digest("copilot", TABLE)
    d.session_file([], [e["data"] for e in events if e["type"] == "session.shutdown"])
    assert (d.input_tokens, d.cache_read_tokens, d.cache_write_tokens, d.output_tokens) == \
        (8 + 17, 54064 + 13964, 27594 + 3069, 521 + 226)
    want = (TABLE.cost_tokens("claude-opus-4.7-1m-internal", 8, 521, 27594, 54064)
            + TABLE.cost_tokens("claude-haiku-4.5", 17, 226, 3069, 13964))
    assert d.spend_usd == pytest.approx(want)


def test_a_hostile_record_is_set_aside_and_the_rest_counts():
    ok = {"model": "m", "inputTokens": 100, "outputTokens": 10, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    d = make_digest("copilot", TABLE)
    d.session_file([ok, dict(ok, inputTokens=10 ** 400), dict(ok, outputTokens=-5), "not a record"], [])
    assert d.set_aside == 2 and "copilot's session file" in d.set_aside_note
    assert (d.input_tokens, d.output_tokens) == (100, 10)
    d = make_digest("copilot", TABLE)
    d.push_lines((STREAMS / "copilot-1.0.102-stream-tool-bash.jsonl").read_bytes())
    before = d.spend_usd
    d.session_file([], [])  # nothing of this run in the file: the estimates stand
    assert d.spend_usd == before > 0


def test_a_failed_run_says_so():
    d = make_digest("copilot", TABLE)
    d.push('{"type":"result","timestamp":"2026-12-08T00:05:39.833Z","sessionId":"x","exitCode":1,"usage":{}}')
    d.finish(1)
    assert d.outcome == "failure" and d.failure_reason == "copilot exit code 1"
