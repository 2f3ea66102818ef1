"""GitHub Copilot CLI's parts, pure: its hook input (the real 1.0.102 samples of tests/fixtures/hooks)
and answers (core/hooks.py), its `shell(…)` rules and the gate's decision over them (core/hookrules.py),
the rules read from its command line (config/agentsettings.copilot_rules) and the hooks file res writes
(commands/hookinstall.py). The real CLI: tests/agentcli/test_gate_copilot.py."""
from __future__ import annotations

import json
from pathlib import Path

from reconciler.config.ownhookfiles import copilot_hooks, copilot_res
from reconciler.config.agentsettings import copilot_rules
from reconciler.core.agents import unread_output
from reconciler.core.digest import make_digest
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


def test_res_run_says_copilots_output_carries_no_usage():
    assert make_digest("copilot", None).agent == "none"
    assert "no token counts" in unread_output("copilot", ["copilot", "-p", "hi", "--output-format", "json"])
