"""OpenCode's parts, pure: its hook input and answers (core/hooks.py), its permission patterns and
the gate's decision over them (core/hookrules.py), the digest of `opencode run --format json`
(core/opencode.py, on the real samples of tests/fixtures/opencode) and the plugin file res writes
(commands/hookinstall.py). The real CLI: tests/agentcli/test_gate_opencode.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.config.ownhookfiles import OPENCODE_PLUGIN, opencode_plugin, plugin_res
from reconciler.core.digest import make_digest
from reconciler.core.hookrules import decide
from reconciler.core.shellrules import (ADMIT, REWRITE, Rules, opencode_allows, opencode_allows_program, opencode_ordered,
                                        opencode_pattern_covers)
from reconciler.core.hooks import cli_of, deny_output, note_output, read_call, rewrite_output
from reconciler.core.pricing import load_pricing

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
LINE = "python3 -m pytest -q tests"


def _input() -> dict:
    return json.loads((FIX / "hooks" / "opencode-1.18.33-tool.execute.before-bash.json").read_text())


def test_the_plugins_input_is_read_as_opencodes_call():
    ev = _input()
    assert cli_of(ev) == "opencode"
    call = read_call(ev, "opencode")
    assert call.cli == "opencode" and call.command == "echo ORIGINAL-COMMAND" and call.cwd == "/tmp/ocprobe/run/proj"
    assert call.session.startswith("ses_") and call.call_id == "call_0002"
    assert call.timeout_s == 120  # the bash tool's default, as Claude Code's
    assert read_call(ev, "opencode", post=True) is None
    assert read_call({**ev, "hook_event_name": "tool.execute.after"}, "opencode", post=True).call_id == "call_0002"
    assert read_call({**ev, "tool_name": "read"}, "opencode") is None


def test_workdir_and_timeout_of_the_bash_tool():
    ev = _input()
    ev["tool_input"] = {"command": LINE, "workdir": "sub/dir", "timeout": 300000}
    call = read_call(ev, "opencode")
    assert call.cwd == "/tmp/ocprobe/run/proj/sub/dir" and call.timeout_s == 300


def test_the_answers_are_what_the_plugin_reads():
    call = read_call(_input(), "opencode")
    assert rewrite_output(call, "res run -- x", "ctx", grant=True) == {"command": "res run -- x"}
    assert deny_output(call, "res: not run: busy") == {"deny": "res: not run: busy"}
    assert note_output(call, "anything") is None


@pytest.mark.parametrize("pattern,text,covers", [
    ("*", "anything at all", True),
    ("git push *", "git push", True),
    ("git push *", "git push origin main", True),
    ("git push *", "git pushx", False),
    ("python3 -m pytest *", "python3 -m pytest -q tests", True),
    ("python3 -m pytest", "python3 -m pytest -q tests", False),
    ("ls ?", "ls a", True),
    ("ls ?", "ls ab", False),
    ("a.b", "axb", False),
    ("npm*", "npm run build/x", True),
])
def test_opencode_patterns_as_its_wildcard_matcher(pattern, text, covers):
    assert opencode_pattern_covers(pattern, text) is covers


def test_the_rules_in_force_come_after_the_builtin_allow_in_order():
    assert opencode_ordered([]) == (("*", "allow"),)
    assert opencode_ordered(["ask"]) == (("*", "allow"), ("*", "ask"))
    assert opencode_ordered([{"bash": "deny"}]) == (("*", "allow"), ("*", "deny"))
    assert opencode_ordered([{"edit": "deny", "bash": {"*": "ask", "make *": "allow"}}, {"bash": {"rm *": "deny"}}]) == (
        ("*", "allow"), ("*", "ask"), ("make *", "allow"), ("rm *", "deny"))
    assert opencode_ordered([{"bash": {"*": "ask"}}], auto=True) == (("*", "allow"), ("*", "allow"))
    assert opencode_ordered([{"bash": {"*": "sometimes"}}]) is None
    assert opencode_ordered([42]) is None


def test_a_line_runs_unasked_only_where_the_last_rule_that_could_match_allows_it_exactly():
    ask_but = opencode_ordered([{"bash": {"*": "ask", "python3 -m pytest *": "allow"}}])
    assert opencode_allows(LINE, ask_but)
    assert not opencode_allows(LINE + " && make", ask_but)  # make: asked
    assert not opencode_allows("python3 -m pytest -q 'tests'", ask_but)  # quotes: not read for sure
    assert opencode_allows("cd sub && " + LINE, ask_but)  # cd gives no pattern
    later_ask = opencode_ordered([{"bash": {"python3 -m pytest *": "allow", "python3 *": "ask"}}])
    assert not opencode_allows(LINE, later_ask)
    assert opencode_allows(LINE, opencode_ordered([]))
    assert not opencode_allows(LINE, ())


def test_a_res_line_runs_unasked_only_under_a_catch_all_allow_nothing_after_could_be_about():
    assert opencode_allows_program("res", opencode_ordered([]))
    assert not opencode_allows_program("res", opencode_ordered([{"bash": {"*": "ask", "res *": "allow"}}]))
    assert not opencode_allows_program("res", opencode_ordered([{"bash": {"r* *": "deny"}}]))
    assert opencode_allows_program("res", opencode_ordered([{"bash": {"rm *": "deny"}}]))


def _rules(*perms, auto=False) -> Rules:
    return Rules(False, (), frozenset(), ordered=opencode_ordered(list(perms), auto))


@pytest.mark.parametrize("perm,auto,want", [
    ({"bash": {"python3 -m pytest *": "allow"}}, False, REWRITE),  # defaults and an allow rule: a job
    ({"bash": {"*": "ask", "python3 -m pytest *": "allow"}}, False, ADMIT),  # `res …` would be asked: in place
    ({"bash": {"*": "ask"}}, True, REWRITE),  # --auto
    ({"bash": {"python3 -m pytest *": "ask"}}, False, None),
    ({"bash": {"python3 -m pytest *": "deny"}}, False, None),
    ({"bash": {"*": "ask"}}, False, None),
    ({"bash": {"bash *": "deny"}}, False, ADMIT),  # a rule about the rewrite's own programs
])
def test_the_gate_never_grants_and_never_takes_away(perm, auto, want):
    assert decide("opencode", None, LINE, [LINE.split()], _rules(perm, auto=auto)) == want


def test_unreadable_rules_leave_every_line_to_opencode():
    assert decide("opencode", None, LINE, [LINE.split()], Rules(False, (), frozenset())) is None


@pytest.mark.parametrize("name", ["opencode-1.18.33-tool-bash.jsonl", "opencode-1.18.33-plugin-refused.jsonl"])
def test_the_digest_counts_each_steps_own_usage_on_the_real_samples(name):
    d = make_digest("opencode", TABLE, model="loop/gpt-5")
    for line in (FIX / "opencode" / name).read_text().splitlines():
        d.push(line)
    d.finish(0)
    s = d.state
    assert s.recognized == s.lines == 6 and s.iterations == 2
    assert s.session_id.startswith("ses_") and s.model == "gpt-5"
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens) == (800 + 1200, 30 + 5, 200)
    assert s.outcome == "success" and s.result_seen
    assert s.spend_usd == pytest.approx(TABLE.cost_tokens("gpt-5", 800, 30, 0, 200) + TABLE.cost_tokens("gpt-5", 1200, 5))


def test_the_digest_takes_opencodes_cost_where_it_priced_the_call_and_fails_on_an_error():
    d = make_digest("opencode", TABLE, model="anthropic/claude-sonnet-4-5")
    d.push('{"type":"step_start","sessionID":"ses_1","part":{}}')
    assert d.spend_usd > 0 and d.iterations == 1  # estimated until the step's report
    d.push('{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop","tokens":{"input":10,"output":2,'
           '"reasoning":1,"cache":{"read":0,"write":0}},"cost":0.25}}')
    assert d.spend_usd == 0.25 and d.output_tokens == 3
    d.push('{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"boom"}}}')
    d.finish(0)
    assert d.outcome == "failure" and d.failure_reason == "APIError: boom"
    bad = make_digest("opencode", TABLE)
    bad.push('{"type":"step_finish","part":{"tokens":{"input":-5}}}')
    assert bad.set_aside == 1 and bad.input_tokens == 0


def test_the_plugin_names_res_once_and_is_recognised_only_as_written():
    text = opencode_plugin("/opt/res bin/res")
    assert '"/opt/res bin/res"' in text and "@@" not in text and "30000" in text
    assert plugin_res(text) == "/opt/res bin/res"
    assert plugin_res(text.replace("bash", "shell")) is None
    assert plugin_res(text + "\n") is None
    assert plugin_res(opencode_plugin("relative/res")) is None
    assert OPENCODE_PLUGIN.count("@@RES@@") == 1
