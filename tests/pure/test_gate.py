"""The gate's pure core (core/gate.py, core/shellline.py, core/hooks.py, core/whatif.py's mapping): which lines are
heavy, what they book, what the hook prints for each CLI (DESIGN §5.8)."""
from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from reconciler.core import clis, gate, hooks
from reconciler.core.gate import Heavy, TableError, judge, line_fingerprint, make_table, rewritten, verdict
from reconciler.core.shellline import fingerprint, program_of

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = tomllib.loads((ROOT / "policies" / "heavy.toml").read_text())["heavy"]
TABLE = make_table(SHIPPED)
FIXTURES = ROOT / "tests" / "fixtures" / "hooks"


def heavy_key(line: str, learned=None) -> str | None:
    h = judge(line, TABLE, learned)
    return None if h is None else h.source


# ---------------------------------------------------------------- heavy or not

@pytest.mark.parametrize("line, source", [
    ("pytest", "table: pytest"),
    ("python -m pytest -q tests/test_parse.py", "table: pytest"),  # the command in tests/fixtures/claude/success.jsonl
    ("python3 -u -m pytest -n auto", "table: pytest"),
    ("cd backend && make test 2>&1 | tail -20", "table: make"),
    ("timeout 600 pytest -x", "table: pytest"),
    ("timeout -k 5 --signal=INT 10m cargo test", "table: cargo test"),
    ("FOO=1 BAR=2 uv run --with pytest-xdist pytest -n 4", "table: pytest"),
    ("env -u DISPLAY CI=1 npm test", "table: npm test"),
    ("nice -n 10 ionice -c 3 make -j8", "table: make"),
    ("npx playwright test --project=chromium", "table: playwright test"),
    ("pnpm exec vitest run", "table: vitest"),
    ("poetry run pytest", "table: pytest"),
    ("bundle exec rspec spec/models", "table: rspec"),
    ("npm run test:unit -- --watch=false", "table: npm run test*"),
    ("npm --silent run build", "table: npm run build*"),
    ("cargo +nightly -q test --workspace", "table: cargo test"),
    ("./node_modules/.bin/jest --ci", "table: jest"),
    (".venv/bin/pytest tests", "table: pytest"),
    ("go test ./...", "table: go test"),
    ("cmake --build build -j 8", "table: cmake --build"),
    ("docker buildx build -t x .", "table: docker buildx build"),
    ("./gradlew test", "table: gradlew"),
    ("git pull && tox -e py311", "table: tox"),
    ("for f in a b; do pytest $f; done", "table: pytest"),
    ("xvfb-run -a npx cypress run", "table: cypress run"),
    ("ls -la", None),
    ("git status --short", None),
    ("cat Makefile", None),  # a file named like a tool is not the tool
    ("echo 'make test && pytest'", None),  # quoted: an argument, not a command
    ("grep -r pytest .", None),
    ("python3 -c 'import pytest'", None),
    ("pip install pytest", None),
    ("cargo fmt", None),
    ("npm install", None),
    ("go mod tidy", None),
    ("make test &", None),  # background: the job would end with its main process
    ("sudo make install", None),
    ("cat <<EOF | pytest\nx\nEOF", None),  # here-document: not read
    ("`which pytest`", None),
    ("$(which pytest) -x", None),
    ("res run --mem 2G --for 5m -- pytest", None),  # already through res
    ("timeout 60 res run --mem 2G --for 5m -- make", None),
    ("bash -c 'make test'", None),  # a line inside a line: its own, not read twice
    ("pytest 'unclosed", None),
    ("make --version", None), ("cargo help", None), ("pytest -h", None),
    ("", None),
])
def test_what_is_heavy(line, source):
    assert heavy_key(line) == source


def test_a_compound_line_books_its_largest_command_and_all_their_time():
    h = judge("make && cargo test && pytest", TABLE)
    assert (h.mem_gb, h.cpus, h.est_s) == (3.0, 4.0, 600 + 600 + 600) and h.fingerprint == "cargo test" and h.guessed


@pytest.mark.parametrize("words, command", [
    (["A=1", "timeout", "600", "uv", "run", "python", "-m", "pytest", "-x"], ["pytest", "-x"]),
    (["env", "-i", "PATH=/bin", "make"], ["make"]),
    (["stdbuf", "-oL", "nohup", "make", "e2e"], ["make", "e2e"]),
    (["python3.12", "-X", "dev", "-m", "unittest"], ["unittest"]),
    (["python3", "script.py"], ["python3", "script.py"]),
    (["X=1"], []),
])
def test_wrappers_are_seen_through(words, command):
    assert program_of(words) == command


@pytest.mark.parametrize("command, fp", [
    (["make", "-j8", "test"], "make test"),
    (["pytest", "tests/unit", "-x", "-k", "slow"], "pytest"),  # -k's expression is not a target
    (["pytest", "-n", "auto", "-p", "no:cacheprovider", "tests"], "pytest"),  # a directory: what it runs, not what it is
    (["go", "test", "-timeout", "9000s", "./..."], "go test"),
    (["make", "-C", "build", "-j", "8", "install"], "make install"),
    (["pytest", "tests/test_x.py::test_a"], "pytest"),
    (["npm", "run", "test:unit", "--", "--watch=false"], "npm run test:unit"),
    (["/usr/bin/cargo", "test", "--release", "deadbeef12"], "cargo test"),
    (["make", "build", "4096"], "make build"),
    # an interpreter's script is the program: its name (not its path) and its targets
    (["python3", "tools/gen_docs.py", "all", "--out", "x"], "python3 gen_docs.py all"),
    (["/usr/bin/node", "--max-old-space-size=4096", "scripts/build.js"], "node build.js"),
    (["bash", "ci/run-tests.sh", "unit"], "bash run-tests.sh unit"),
    (["python3", "-c", "print(1)"], "python3"),
])
def test_fingerprints_keep_the_program_and_target_words(command, fp):
    assert fingerprint(command) == fp


def test_history_files_a_gated_job_under_its_lines_fingerprint():
    assert line_fingerprint(["/bin/bash", "-c", "cd web && npm run e2e -- --headed"]) == "npm run e2e"
    assert line_fingerprint(["bash", "-c", "make build && make test"]) is None  # two: which one is unknown
    assert line_fingerprint(["/usr/bin/pytest", "-x", "tests/"]) == "pytest"
    assert line_fingerprint(["bash", "-c", "cat <<EOF\nEOF"]) is None


def test_what_history_learned_decides_over_the_table():
    learned = {"make e2e": [6.5, 1800, True, 4], "pytest": [0.5, 60, False, 9], "./run.sh": [3.0, 900, True, 2]}
    h = judge("make e2e", TABLE, learned)
    assert (h.mem_gb, h.est_s, h.guessed, h.source) == (6.5, 1800, False, "history: 4 runs of make e2e")
    h = judge("pytest -q", TABLE, learned)  # in the table, and light by its history: its learned size
    assert (h.mem_gb, h.est_s, h.guessed) == (0.5, 60, False)
    assert judge("./run.sh --all", TABLE, {"run.sh": [3.0, 900, True, 2]}).source == "history: 2 runs of run.sh"
    assert judge("./other.sh", TABLE, {"other.sh": [0.2, 30, False, 5]}) is None  # learned light, not in the table
    assert judge("make e2e", TABLE, {"make e2e": ["x", 1, True, 1]}).source == "table: make"  # a bad entry is ignored


# ---------------------------------------------------------------- the table


def test_the_policy_adds_and_trims_the_table():
    t = make_table(SHIPPED, {"npm run e2e": {"mem_gb": 6}, "tsc": {"cpus": 1}}, ["make", "pytest"])
    keys = {x.key for x in t}
    assert "make" not in keys and "pytest" not in keys
    e2e = next(x for x in t if x.key == "npm run e2e")
    assert (e2e.mem_gb, e2e.cpus, e2e.est_s) == (6.0, 2.0, 600)  # what it does not say: the defaults
    assert judge("npm run e2e", t).source == "table: npm run e2e"  # before the shipped `npm run e2e*`
    assert judge("make", t) is None


@pytest.mark.parametrize("add, error", [
    ({"x": {"mem": 1}}, "unknown key 'mem'"),
    ({"x": {"mem_gb": -1}}, "mem_gb must be a number above 0"),
    ({"x": {"mem_gb": float("inf")}}, "mem_gb must be a number above 0"),
    ({"x": 3}, "must be a table"),
    ({"  ": {}}, "a key is a program"),
])
def test_a_bad_table_entry_is_named(add, error):
    with pytest.raises(TableError, match=error):
        make_table(SHIPPED, add)


def test_the_published_table_reads_back_the_same():
    assert make_table(gate.table_data(TABLE)) == TABLE


# ---------------------------------------------------------------- rewrite or deny


def test_the_verdict_follows_the_loops_answer():
    now = 1000.0
    assert verdict(None, 30, now) == ("rewrite", None)  # no loop: res run decides, --start-within bounds it
    assert verdict({"fits": "now"}, 30, now) == ("rewrite", None)
    assert verdict({"fits": "later", "start": now + 29}, 30, now) == ("rewrite", None)
    assert verdict({"fits": "later", "start": now + 31, "line": "busy: x"}, 30, now) == ("deny", "busy: x")
    assert verdict({"fits": "later", "start": None}, 30, now) == ("rewrite", None)  # overdue holders
    assert verdict({"fits": "unknown", "line": "busy: y"}, 30, now) == ("deny", "busy: y")
    assert verdict({"fits": "never"}, 30, now) == ("pass", None)


HOSTILE = ["make test; rm -rf ~", "pytest -k 'a and not b' 2>&1 | tee out.txt", "make \"$TARGET\" 'x'\"'\"'y'",
           "pytest -q # a comment with 'quotes", "cd 'dir with spaces' && make", "make\ttest\n\npytest"]


@pytest.mark.parametrize("line", HOSTILE)
def test_the_rewritten_line_runs_the_very_same_line(line):
    h = judge(line, TABLE)
    assert h is not None
    words = shlex.split(rewritten(["/usr/bin/res"], h, line, 30, max_duration_s=120))
    assert words[:3] == ["/usr/bin/res", "run", "--wait"] and words[-3:] == ["bash", "-c", line]
    assert "--gated" in words and words[words.index("--start-within") + 1] == "30s"
    assert words[words.index("--max-duration") + 1] == "120s"


def test_the_rewritten_line_is_what_bash_hands_res(tmp_path):
    """Through a real bash: the argv `res` would get is [..., bash, -c, LINE] with LINE byte for byte."""
    fake = tmp_path / "res"
    fake.write_text("#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    for line in HOSTILE:
        out = subprocess.run(["bash", "-c", rewritten([str(fake)], judge(line, TABLE), line, 30)],
                             capture_output=True, text=True, check=True).stdout
        assert json.loads(out)[-3:] == ["bash", "-c", line]


# ---------------------------------------------------------------- the three protocols


def sample(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_each_clis_input_is_read():
    claude = hooks.read_call(sample("claude-2.1.328-pretooluse-bash.json"))
    codex = hooks.read_call(sample("codex-0.171.0-pretooluse-bash.json"))
    gemini = hooks.read_call(sample("gemini-0.61.0-beforetool-run_shell_command.json"))
    assert (claude.cli, codex.cli, gemini.cli) == ("claude", "codex", "gemini")
    assert codex.command == "echo ORIGINAL-COMMAND" and codex.permission_mode == "bypassPermissions"
    assert gemini.command == "echo ORIGINAL > original.txt" and gemini.cwd.endswith("/work")
    assert claude.timeout_s == clis.CLAUDE_BASH_TIMEOUT_S and codex.timeout_s is None
    assert hooks.read_call(sample("gemini-0.61.0-sessionstart.json")) is None


def test_only_shell_tools_and_their_events():
    base = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "make"}}
    assert hooks.read_call(base).cli == "claude"
    assert hooks.read_call({**base, "tool_name": "Edit"}) is None
    assert hooks.read_call({**base, "hook_event_name": "PostToolUse"}) is None
    assert hooks.read_call({**base, "tool_input": {"command": ["make"]}}) is None
    assert hooks.read_call({**base, "tool_input": {"command": "  "}}) is None
    assert hooks.read_call(base, told="gemini") is None  # told Gemini: a PreToolUse is not its event
    assert hooks.read_call([base]) is None


def test_a_rewrite_never_grants_where_the_cli_would_have_asked():
    call = hooks.read_call(sample("codex-0.171.0-pretooluse-bash.json"))
    # (the rule's home: core.hookrules.decide; Codex takes a rewrite only with its allow)
    unasked, asking = Rules(True, (), frozenset()), Rules(False, (), frozenset())
    assert decided(call.cli, call.permission_mode, call.command, unasked) == GRANT  # bypassPermissions
    assert decided(call.cli, "default", call.command, asking) != GRANT
    claude = hooks.read_call(sample("claude-2.1.328-pretooluse-bash.json"))
    out = hooks.rewrite_output(claude, "res run -- x", "why")["hookSpecificOutput"]
    assert "permissionDecision" not in out and out["updatedInput"]["command"] == "res run -- x"
    assert set(out["updatedInput"]) == set(claude.tool_input)  # every field the agent sent, kept


def test_deny_outputs():
    for name, where in (("claude-2.1.328-pretooluse-bash.json", "hookSpecificOutput"),
                        ("codex-0.171.0-pretooluse-bash.json", "hookSpecificOutput")):
        out = hooks.deny_output(hooks.read_call(sample(name)), "busy: x")
        assert out[where]["permissionDecision"] == "deny" and out[where]["permissionDecisionReason"] == "busy: x"
    out = hooks.deny_output(hooks.read_call(sample("gemini-0.61.0-beforetool-run_shell_command.json")), "busy: x")
    assert out == {"decision": "deny", "reason": "busy: x"}


# ---------------------------------------------------------------- never a grant (core/hookrules.py, config/agentsettings.py)

from reconciler.config import agentsettings  # noqa: E402
from reconciler.core.hookrules import decide  # noqa: E402
from reconciler.core.shellrules import (ADMIT, ALL, GRANT, REWRITE, Rules, claude_covered, claude_pattern_covers,  # noqa: E402
                                        codex_guarded, gemini_covered, gemini_guarded)
from reconciler.core.shellline import simple_commands  # noqa: E402


def decided(cli: str, mode: str | None, line: str, rules: Rules):
    return decide(cli, mode, line, simple_commands(line), rules)


NONE = Rules(False, (), frozenset())


def test_claude_code_a_line_its_rules_allow_is_rewritten_with_its_allow_elsewhere_passed():
    allow = Rules(False, ("make test:*", "python3 -m pytest:*", "pytest"), frozenset())
    for mode in ("default", "acceptEdits", "dontAsk", None):
        assert decided("claude", mode, "python3 -m pytest -q tests", allow) == GRANT
        assert decided("claude", mode, "cd sub && make test -j4 2>&1", allow) == GRANT
    # elsewhere the line passes as it is, booked in place (the CLI asks, or its classifier decides)
    assert decided("claude", "default", "python3 -m pytest -q tests", NONE) == ADMIT  # it would have asked
    assert decided("claude", "default", "make test && make deploy", allow) == ADMIT  # one part not covered
    assert decided("claude", "plan", "python3 -m pytest -q tests", allow) == ADMIT  # a hook's allow runs no write there
    assert decided("claude", "auto", "python3 -m pytest -q tests", allow) == ADMIT  # its classifier decides
    assert decided("claude", "bypassPermissions", "make deploy", Rules(True, (), frozenset())) == GRANT
    assert decided("claude", "bypassPermissions", "make deploy", Rules(True, (), frozenset(), sandboxed=True)) == ADMIT


def test_a_deny_or_ask_rule_about_the_line_or_about_the_rewrite_passes_it_unchanged():
    for guard in ({"make"}, {"res"}, {"bash"}, {ALL}):
        rules = Rules(True, ("make test:*",), frozenset(guard))
        assert decided("claude", "bypassPermissions", "timeout 60 make test", rules) is None
        assert decided("gemini", None, "make test", rules) is None
        assert decided("codex", "bypassPermissions", "make test", rules) is None
    assert decided("shell", None, "make test", Rules(False, (), frozenset({ALL}))) == REWRITE  # a shim's line runs anyway


def test_codex_rewrites_only_unasked_and_unsandboxed_gemini_only_in_yolo():
    assert decided("codex", "bypassPermissions", "make test", Rules(True, (), frozenset())) == GRANT
    assert decided("codex", "bypassPermissions", "make test", Rules(True, (), frozenset(), sandboxed=True)) == ADMIT
    assert decided("codex", "default", "make test", Rules(False, (), frozenset())) == ADMIT  # as it is, booked
    assert decided("gemini", None, "make test", Rules(True, (), frozenset())) == REWRITE  # no grant: yolo allows res
    assert decided("gemini", None, "make test", Rules(False, ("make test:*",), frozenset())) == ADMIT  # it would ask for res


def test_gemini_narrowed_to_its_allowed_prefixes_books_in_place_only_what_they_cover():
    """A run_shell_command(PREFIX) entry in tools.allowed: the CLI runs what its entries cover and denies
    the rest, YOLO or not (a rewritten `res run` would be denied): covered, booked in place; not covered
    (it may be denied, and a booking would outlive it), untouched."""
    for yolo in (False, True):
        rules = Rules(yolo, ("python3 -m pytest", "make"), frozenset(), narrowed=True)
        assert decided("gemini", None, "python3 -m pytest -q tests", rules) == ADMIT
        assert decided("gemini", None, "make test && make build", rules) == ADMIT
        assert decided("gemini", None, "python3 -m pytest -q tests && python3 -c x", rules) is None
        assert decided("gemini", None, "pytest -q", rules) is None


@pytest.mark.parametrize("line, covered", [
    ("python3 -m pytest", True),
    ("python3 -m pytest -q tests", True),
    ("make test && python3 -m pytest -q", True),
    ("python3 -m pytest | tail -3", False),  # tail not covered
    ("python3 -m pytestx", False),  # the prefix must end at a space or the line's end
    (" python3 -m pytest", False),  # leading blank: `"command":" python3` does not start with it
    ("python3 -m pytest ", False),
    ("python3  -m pytest", False),
    ("python3 -m pytest > log", False),  # a redirection makes an allow an ask
    ("python3 -m pytest 2>&1", False),
    ("python3 -m pytest 'tests'", False),
    ("python3 -m pytest $ARGS", False),
    ("FOO=1 python3 -m pytest", False),
    ("python3 -m pytest\nrm x", False),
])
def test_gemini_covered_is_never_looser_than_its_policy_engine(line, covered):
    assert gemini_covered(line, ["python3 -m pytest", "make"]) is covered


def test_the_cli_is_read_from_its_own_command_line_only():
    """A flag on the line of whatever started the CLI (a test runner's `-s`, a script's `--yolo`) is
    not the session's: only the CLI's own processes, past the shells that ran the hook."""
    runner = ["python3", "-m", "pytest", "-s", "--yolo"]
    gemini = [["/bin/sh", "-c", "res hook"], ["/usr/bin/node", "--max-old-space-size=8000", "/x/.bin/gemini", "-p", "hi"],
              ["node", "/x/.bin/gemini", "-p", "hi"], runner]
    assert agentsettings.cli_argvs(gemini, "gemini") == gemini[1:3]
    codex = [["/x/@openai/codex-linux-x64/vendor/codex", "exec", "-s", "workspace-write"],
             ["node", "/x/node_modules/@openai/codex/bin/codex.js", "exec"], runner]
    assert agentsettings.cli_argvs(codex, "codex") == codex[:2]
    claude = [["/x/.bin/claude", "-p", "hi"], runner]
    assert agentsettings.cli_argvs(claude, "claude") == claude[:1]
    assert agentsettings.cli_argvs([["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"]], "claude")
    assert agentsettings.cli_argvs([runner, *gemini], "gemini") == []  # not the CLI's: nothing read
    assert agentsettings.cli_argvs(claude, "gemini") == []
    # what that changes: the runner's `-s` would have read as Gemini's --sandbox, its --yolo as YOLO
    env = {"HOME": "/nonexistent"}
    assert not agentsettings.gemini_rules(None, env, agentsettings.cli_argvs([["node", "/x/gemini"], runner], "gemini")).sandboxed
    assert not agentsettings.gemini_rules(None, env, agentsettings.cli_argvs([["node", "/x/gemini"], runner], "gemini")).unasked


@pytest.mark.parametrize("line, covered", [
    ("python3 -m pytest -q tests", True), ("python3 -m pytest", True), ("cd sub && python3 -m pytest -x", True),
    ("python3 -m pytest -q 2>&1 >/dev/null", True),
    ("python3 -m pytestx", False),  # a word boundary after the prefix
    ("python3 -m pytest  -q", False), ("python3\t-m pytest", False),  # not single spaces
    ("python3 -m pytest -k 'a or b'", False), ('python3 -m pytest -k "x"', False),  # quotes
    ("python3 -m pytest > out.txt", False), ("python3 -m pytest 2>err", False),  # a file written
    ("FOO=1 python3 -m pytest", False), ("timeout 60 python3 -m pytest", False),  # assignment, a wrapper it strips
    ("python3 -m pytest $ARGS", False), ("python3 -m pytest $(cat args)", False), ("python3 -m pytest `x`", False),
    ("python3 -m pytest tests/*.py", False), ("python3 -m pytest ~/x", False), ("(python3 -m pytest)", False),
    ("python3 -m pytest &", False), ("python3 -m pytest # all", False),
    ("cd .. && python3 -m pytest", False), ("cd /tmp && python3 -m pytest", False),
    ("python3 -m pytest | tee log", False),  # tee: not allowed
    ("python3 -m pytest; make lint", False),
])
def test_claude_coverage_is_never_looser_than_its_own_matcher(line, covered):
    assert claude_covered(line, ["python3 -m pytest:*"]) is covered


@pytest.mark.parametrize("pattern, text, covered", [
    ("npm run test:*", "npm run test", True), ("npm run test:*", "npm run test:unit", False),
    ("npm run test:*", "npm run test -- -u", True), ("npm run test *", "npm run test", True),
    ("npm run test*", "npm run test:unit", True),  # no word boundary without the space
    ("git * main", "git push origin main", True), ("git * main", "git push origin main2", False),
    ("git:* push", "git:x push", True), ("git:* push", "git x push", False),  # `:*` only at the end
    ("*", "anything at all", True), ("make", "make", True), ("make", "make test", False),
    ("make te?t", "make test", False), ("make [t]est", "make test", False),  # no ? or [] globs
])
def test_claude_rule_shapes(pattern, text, covered):
    assert claude_pattern_covers(pattern, text) is covered


def test_codex_rules_that_do_not_allow_guard_their_programs():
    text = '''
# a comment
prefix_rule(pattern = ["git", "push"], decision = "forbidden", justification = "no pushing")
prefix_rule(pattern = [["make", "gmake"], "deploy"], decision = "prompt")
prefix_rule(pattern = ["pytest"], decision = "allow")
'''
    assert codex_guarded([text]) == frozenset({"git", "make", "gmake"})
    assert codex_guarded(["prefix_rule(pattern = PATTERNS, decision = 'forbidden')"]) == frozenset({ALL})
    assert codex_guarded([""]) == frozenset()


def test_gemini_policies_that_deny_or_ask_guard_their_programs():
    policies = [{"rule": [{"toolName": "run_shell_command", "commandPrefix": "git push", "decision": "deny"},
                          {"toolName": "run_shell_command", "commandPrefix": ["make deploy"], "decision": "ask_user"},
                          {"toolName": "run_shell_command", "commandPrefix": "pytest", "decision": "allow"},
                          {"toolName": "write_file", "decision": "deny"}]}]
    assert gemini_guarded(policies) == frozenset({"git", "make"})
    assert gemini_guarded([{"rule": [{"toolName": "run_shell_command", "commandRegex": "rm .*", "decision": "deny"}]}]) == frozenset({ALL})


def test_claudes_rules_come_from_its_settings_and_its_command_line(tmp_path):
    home, proj = tmp_path / "claude", tmp_path / "proj"
    (home).mkdir()
    (proj / ".claude").mkdir(parents=True)
    (proj / ".git").mkdir()
    (home / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash(make test:*)", "Read"], "deny": ["Bash(git push:*)"]}}))
    (proj / ".claude" / "settings.local.json").write_text(json.dumps({"permissions": {"ask": ["Bash(make deploy)"]}}))
    (proj / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash(npm test)"]}}))
    env = {"CLAUDE_CONFIG_DIR": str(home), "HOME": str(tmp_path), "CLAUDE_PROJECT_DIR": str(proj)}
    r = agentsettings.claude_rules("default", str(proj), env, [["claude", "-p", "x", "--allowedTools", "Bash(pytest:*),Edit"]])
    assert r.allow == ("make test:*", "pytest:*") and r.guarded == frozenset({"git", "make"}) and not r.unasked
    # the project's allow rules count once its folder is trusted (Claude Code's trust dialog)
    (home / ".claude.json").write_text(json.dumps({"projects": {str(proj): {"hasTrustDialogAccepted": True}}}))
    assert agentsettings.claude_rules("default", str(proj), env, []).allow == ("make test:*", "npm test")
    r = agentsettings.claude_rules("bypassPermissions", str(tmp_path), env, [["claude", "--allowedTools", "Bash"]])
    assert r.unasked and "*" in r.allow and not r.sandboxed
    (proj / ".claude" / "settings.json").write_text(json.dumps({"sandbox": {"enabled": True}}))
    assert agentsettings.claude_rules("bypassPermissions", str(proj), env, []).sandboxed
    (home / "settings.json").write_text("{not json")
    assert agentsettings.claude_rules("bypassPermissions", str(proj), env, []).guarded == frozenset({ALL})


def test_geminis_rules_come_from_its_settings_with_comments_and_its_command_line(tmp_path):
    gem = tmp_path / ".gemini"
    (gem / "policies").mkdir(parents=True)
    (gem / "settings.json").write_text('{\n  // mine\n  "tools": {/* x */ "exclude": ["run_shell_command(rm)"]},\n  "general": {"defaultApprovalMode": "yolo"}\n}\n')
    (gem / "policies" / "p.toml").write_text('[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = "git push"\ndecision = "deny"\npriority = 100\n')
    env = {"HOME": str(tmp_path)}
    r = agentsettings.gemini_rules(str(tmp_path), env, [["node", "/x/gemini", "-p", "hi"]])
    assert not r.unasked and r.guarded == frozenset({"rm", "git"})  # the settings file cannot turn YOLO on
    assert agentsettings.gemini_rules(str(tmp_path), env, [["node", "gemini", "--yolo"]]).unasked
    assert agentsettings.gemini_rules(str(tmp_path), env, [["node", "gemini", "--approval-mode=yolo"]]).unasked
    assert agentsettings.gemini_rules(str(tmp_path), env, [["node", "gemini", "--yolo", "--sandbox"]]).sandboxed
    # an allowed shell command narrows the shell to it: YOLO no longer allows a rewritten line, and
    # only what the entries cover may run at all
    (gem / "settings.json").write_text('{"tools": {"allowed": ["run_shell_command(npm test)"]}}')
    r = agentsettings.gemini_rules(str(tmp_path), env, [["gemini", "--yolo"]])
    assert r.narrowed and r.allow == ("npm test",) and r.guarded == frozenset({"git"})
    # lists that differ between the file and the flag (which one is in force is the CLI's precedence),
    # or a bare entry (every command, by heuristics): every line ungated
    flag = [["gemini", "--allowed-tools", "run_shell_command(make)"]]
    assert agentsettings.gemini_rules(str(tmp_path), env, flag).guarded == frozenset({ALL})
    (gem / "settings.json").write_text('{"tools": {"allowed": ["run_shell_command"]}}')
    assert agentsettings.gemini_rules(str(tmp_path), env, [["gemini"]]).guarded == frozenset({ALL})
    (gem / "settings.json").write_text('{"tools": {"confirmationRequired": ["run_shell_command(npm)"]}}')
    assert agentsettings.gemini_rules(str(tmp_path), env, [["gemini"]]).guarded == frozenset({ALL})
    # folder trust on, and this folder not trusted: Gemini CLI runs it in its default mode
    (gem / "settings.json").write_text('{"security": {"folderTrust": {"enabled": true}}}')
    assert not agentsettings.gemini_rules(str(tmp_path), env, [["gemini", "--yolo"]]).unasked
    (gem / "trustedFolders.json").write_text(json.dumps({str(tmp_path): "TRUST_FOLDER"}))
    assert agentsettings.gemini_rules(str(tmp_path), env, [["gemini", "--yolo"]]).unasked


def test_codex_rules_files(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "default.rules").write_text('prefix_rule(pattern = ["make", "deploy"], decision = "forbidden")\n')
    bypass = [["codex", "exec", "--dangerously-bypass-approvals-and-sandbox", "x"]]
    r = agentsettings.codex_rules("bypassPermissions", None, {"CODEX_HOME": str(tmp_path)}, bypass)
    assert r.unasked and r.guarded == frozenset({"make"}) and not r.sandboxed
    assert decided("codex", "bypassPermissions", "make test", r) is None and decided("codex", "bypassPermissions", "pytest", r) == GRANT
    assert not agentsettings.codex_rules("default", None, {"CODEX_HOME": str(tmp_path)}, bypass).unasked
    # approval never in its default sandbox: the rewrite would take the line out of it
    assert agentsettings.codex_rules("bypassPermissions", None, {"CODEX_HOME": str(tmp_path)}, [["codex", "exec", "x"]]).sandboxed
    assert not agentsettings.codex_rules("bypassPermissions", None, {"CODEX_HOME": str(tmp_path)},
                                         [["codex", "-s", "danger-full-access", "x"]]).sandboxed
    (tmp_path / "config.toml").write_text('sandbox_mode = "danger-full-access"\n')
    assert not agentsettings.codex_rules("bypassPermissions", None, {"CODEX_HOME": str(tmp_path)}, [["codex", "x"]]).sandboxed


