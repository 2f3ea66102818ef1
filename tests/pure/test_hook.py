"""`res hook`, the Claude Code PreToolUse hook (pure tier: tmp dirs, one real subprocess)."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from reconciler.commands import hook, hookloop
from reconciler.desired.reader import read_game
from reconciler.desired.writer import Writer
from reconciler.config.paths import Paths

NOW = 1764490000.0  # 2025-11-30 08:06:40 UTC
UNTIL = 1764494400.0  # 2025-11-30 09:20:00 UTC
PREFIX = "unset DISPLAY WAYLAND_DISPLAY; "
ALLOWED_INNER = {"hookEventName", "updatedInput", "additionalContext"}


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Clock times in the context line are local: make local UTC so the literals hold."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "state"
    (root / "desired").mkdir(parents=True)
    monkeypatch.setenv("RES_STATE_DIR", str(root))
    # the session's rules are this test's (none unless it writes some), not the developer's
    (tmp_path / "claude").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    return root


def game(state: Path, text: str | bytes) -> None:
    p = state / "desired" / "game.toml"
    if isinstance(text, str):
        p.write_text(text, encoding="utf-8")
    else:
        p.write_bytes(text)


def event(command="firefox http://localhost:3000", tool="Bash", **extra) -> str:
    ti = {"command": command, "description": "open the app"}
    return json.dumps({"session_id": "s-1", "hook_event_name": "PreToolUse", "tool_name": tool,
                       "tool_input": ti, "cwd": "/home/u/proj", "permission_mode": "default", **extra})


def call(stdin: str, now: float = NOW) -> tuple[str, int]:
    return hook.main(stdin, os.environ, now=now)


def out_of(stdin: str, now: float = NOW) -> dict:
    text, code = call(stdin, now)
    assert code == 0 and text, "expected the hook to rewrite the command"
    got = json.loads(text)
    assert_grants_nothing(got)
    return got


def assert_grants_nothing(got: dict) -> None:
    """Only the rewrite and the context: never permissionDecision (allow/ask/deny/defer), never the
    legacy top-level decision, continue, updatedPermissions, ..."""
    assert set(got) == {"hookSpecificOutput"}
    inner = got["hookSpecificOutput"]
    assert set(inner) <= ALLOWED_INNER and inner["hookEventName"] == "PreToolUse"
    for key in ("permissionDecision", "permissionDecisionReason", "decision", "behavior", "updatedPermissions", "continue"):
        assert key not in got and key not in inner


# ---------------------------------------------------------------- on


def test_on_rewrites_bash_once_and_says_why(state):
    game(state, f"# game mode\non = true\nuntil = {UNTIL}\n")
    got = out_of(event())
    assert got == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "updatedInput": {"command": "unset DISPLAY WAYLAND_DISPLAY; firefox http://localhost:3000", "description": "open the app"},
            "additionalContext": (
                "res: game mode is on until 09:20: the person at this machine is using the display, so `res hook` "
                "prefixed this Bash command with `unset DISPLAY WAYLAND_DISPLAY;` and GUI programs (browsers, "
                "Electron apps, headed test runners, anything that opens a window) will fail to start. Run them "
                "headless (--headless, xvfb-run, a CI/headless setting) or leave that step until game mode ends "
                "(`res game status` shows when); everything else works as usual."
            ),
        }
    }


def test_updated_input_keeps_every_field_the_agent_sent(state):
    """updatedInput replaces the whole input object: timeout, run_in_background, ... must survive."""
    game(state, "on = true\n")
    stdin = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                        "tool_input": {"command": "npm run dev", "timeout": 600000, "run_in_background": True, "description": "dev server"}})
    assert out_of(stdin)["hookSpecificOutput"]["updatedInput"] == {
        "command": "unset DISPLAY WAYLAND_DISPLAY; npm run dev", "timeout": 600000, "run_in_background": True, "description": "dev server"}


def test_on_without_until_and_a_far_off_until(state):
    game(state, "on = true\n")
    assert "game mode is on until the user turns it off:" in out_of(event())["hookSpecificOutput"]["additionalContext"]
    game(state, "on = true\nuntil = 1e300\n")  # past the year 3000: a broken file, as for the reconciler
    assert call(event()) == ("", 0)


@pytest.mark.parametrize("command", [
    "unset DISPLAY WAYLAND_DISPLAY; firefox",
    "  unset DISPLAY WAYLAND_DISPLAY;firefox",
    "unset DISPLAY WAYLAND_DISPLAY; unset DISPLAY WAYLAND_DISPLAY; x",
])
def test_an_already_prefixed_command_is_left_alone(state, command):
    game(state, "on = true\n")
    assert call(event(command)) == ("", 0)


def test_a_rewritten_command_is_not_rewritten_again(state):
    game(state, "on = true\n")
    first = out_of(event("make e2e"))["hookSpecificOutput"]["updatedInput"]
    again = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": first})
    assert call(again) == ("", 0)


@pytest.mark.parametrize("command", [
    'echo "it\'s $HOME" && printf \'%s\\n\' `date` $(id -u)',
    "cat <<'EOF'\nline 1\n\tline 2\nEOF",
    "# a comment first\nls -la",
    "echo 'héllo wörld ✓' \u2028 done",
    "echo \ud800 lone surrogate",
])
def test_hostile_commands_reach_the_shell_verbatim_after_the_prefix(state, command):
    game(state, "on = true\n")
    text, _ = call(event(command))
    assert text.isascii() and "\n" not in text  # one line of ASCII JSON on stdout
    assert json.loads(text)["hookSpecificOutput"]["updatedInput"]["command"] == PREFIX + command


# ---------------------------------------------------------------- no output


@pytest.mark.parametrize("text", [
    "on = false\n",
    "# nothing but comments\n",
    "   \n",
    f"on = false\nuntil = {UNTIL}\n",
    f"on = true\nuntil = {NOW - 60}\n",  # expired
    f"on = true\nuntil = {NOW}\n",  # ends at `until`
])
def test_off_or_expired_gives_no_output(state, text):
    game(state, text)
    assert call(event()) == ("", 0)


def test_until_in_the_future_turns_it_on_again(state):
    game(state, f"on = true\nuntil = {NOW + 1}\n")
    assert call(event())[0]
    assert call(event(), now=NOW + 1) == ("", 0)


def test_missing_game_file_or_state_dir(state, tmp_path, monkeypatch):
    assert call(event()) == ("", 0)
    monkeypatch.setenv("RES_STATE_DIR", str(tmp_path / "nowhere"))
    assert call(event()) == ("", 0)
    assert not (tmp_path / "nowhere").exists()  # reading creates nothing


@pytest.mark.parametrize("tool", ["Edit", "Write", "Read", "bash", "BashOutput", "mcp__shell__Bash", ""])
def test_another_tool_gives_no_output(state, tool):
    game(state, "on = true\n")
    assert call(event(tool=tool)) == ("", 0)


@pytest.mark.parametrize("text", [
    b"on = tr",  # truncated
    b"on = true\nuntil = 17644e",  # truncated mid-number
    b"on = \"yes\"\n",  # wrong type
    b"on = 1\n",
    b"on = true\nuntil = \"22:40\"\n",
    b"on = true\nuntil = true\n",
    b"on = true\nuntil = inf\n",
    b"on = true\nuntil = nan\n",
    b"on = true\non = true\n",  # duplicate key
    b"on = true\nmode = \"game\"\n",  # unknown key
    b"[game]\non = true\n",
    b"on = True\n",
    b"",  # empty: a cut-off save
    b"on = true\x00\n",
    b"on = true # \xff\xfe not utf-8\n",
    b"\xef\xbb\xbfon = true\n",  # BOM
    b"on = true\runtil = 1\n",
])
def test_broken_game_file_gives_no_output(state, text):
    game(state, text)
    assert call(event()) == ("", 0)
    assert read_game(Paths(state))[1] is not None  # the reconciler calls it broken too, not "off"
    if text:
        with pytest.raises(ValueError):  # and so does the hook's own reader
            hook.game_until(hook._parse_game(text.decode("utf-8")), NOW)


def test_odd_game_files_give_no_output_and_never_block(state):
    p = state / "desired" / "game.toml"
    p.mkdir()
    assert call(event()) == ("", 0)
    p.rmdir()
    os.mkfifo(p)  # a FIFO with no writer would block a plain open()
    assert call(event()) == ("", 0)
    p.unlink()
    p.write_text("on = true\n" + "# " + "x" * (hook.MAX_GAME_BYTES) + "\n")
    assert call(event()) == ("", 0)


@pytest.mark.parametrize("stdin", [
    "", " ", "not json", "{", "[]", "null", "42", '"Bash"',
    '{"tool_name": "Bash"}',
    '{"tool_name": "Bash", "tool_input": "ls"}',
    '{"tool_name": "Bash", "tool_input": {"command": 42}}',
    '{"tool_name": "Bash", "tool_input": {"command": ""}}',
    '{"tool_name": "Bash", "tool_input": {"command": "  \\n "}}',
    '{"tool_name": "Bash", "tool_input": {"cmd": "ls"}}',
    '{"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}',
    '{"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "ls"}}',
    "[" * 100000 + "]" * 100000,  # deeper than the JSON parser goes
])
def test_bad_stdin_gives_no_output(state, stdin):
    game(state, "on = true\n")
    assert call(stdin) == ("", 0)


def test_main_never_raises(state):
    game(state, "on = true\n")
    assert hook.main(None, os.environ) == ("", 0)  # type: ignore[arg-type]
    assert hook.main(event(), {"RES_STATE_DIR": 42}) == ("", 0)  # type: ignore[dict-item]
    game(state, f"on = true\nuntil = {UNTIL}\n")
    assert hook.main(event(), os.environ, now=float("nan")) == ("", 0)  # no clock, no rewrite


# ---------------------------------------------------------------- symlinks: not followed


def test_symlinked_game_file_is_not_followed(state, tmp_path):
    """Decision: a symlink anywhere the reconciler's reader refuses one (the state dir, desired/,
    the file) makes the hook read nothing: no output, as for a broken file."""
    target = tmp_path / "elsewhere.toml"
    target.write_text("on = true\n")
    (state / "desired" / "game.toml").symlink_to(target)
    assert call(event()) == ("", 0)
    assert read_game(Paths(state))[1] is not None  # the reconciler refuses it too


def test_symlinked_desired_dir_or_state_dir_is_not_followed(tmp_path, monkeypatch):
    real = tmp_path / "real"
    (real / "desired").mkdir(parents=True)
    (real / "desired" / "game.toml").write_text("on = true\n")
    monkeypatch.setenv("RES_STATE_DIR", str(real))
    assert call(event())[0]  # the real tree: on
    link_root = tmp_path / "link-root"
    link_root.symlink_to(real)
    monkeypatch.setenv("RES_STATE_DIR", str(link_root))
    assert call(event()) == ("", 0)
    other = tmp_path / "other"
    other.mkdir()
    (other / "desired").symlink_to(real / "desired")
    monkeypatch.setenv("RES_STATE_DIR", str(other))
    assert call(event()) == ("", 0)


# ---------------------------------------------------------------- the game file, as the reconciler reads it


def test_game_path_is_the_state_dirs(tmp_path, monkeypatch):
    for env in ({"RES_STATE_DIR": str(tmp_path / "s")}, {"XDG_STATE_HOME": str(tmp_path / "x")}, {"HOME": str(tmp_path / "h")}):
        for k in ("RES_STATE_DIR", "XDG_STATE_HOME"):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert hook.game_path(os.environ) == str(Paths.default().game)
    assert hook.game_path({"HOME": "/home/u"}) == "/home/u/.local/state/res/desired/game.toml"
    assert hook.game_path({"XDG_STATE_HOME": "/x", "RES_STATE_DIR": ""}) == "/x/res/desired/game.toml"


AGREE = [
    "on = true\n",
    "on=false",
    "  on\t=\ttrue   # on at last\n",
    "# c\n\non = true\nuntil = 1764494400.0 # 09:20\n",
    "on = true\nuntil = 1764494400\n",
    "on = true\nuntil = 0.5\n",
    "until = 1764494400.25\non = true\n",
    "on = true # ünïcödé comment ✓\n",
    '"on" = true\n',  # quoted key: tomllib's call
    "on = true\nuntil = 1_764_494_400\n",
    "on = true\nuntil = 1.7644944e9\n",
    "on = true\nuntil = 0x10\n",
    "on = true\nuntil = +1764494400.0\n",
    "on = true\r\nuntil = 1764494400.0\r\n",
    "on = true\nuntil = 01\n",
    "on = true\nuntil = 1.\n",
    "on = true\nuntil = -5\n",
    "on.x = true\n",
    "on = true\n[until]\n",
    "on = true\x7f\n",
    "on = true # tab\tin comment\n",
]


@pytest.mark.parametrize("text", AGREE)
def test_the_fast_reader_agrees_with_tomllib_and_the_reconciler(tmp_path, text):
    try:
        want = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        want = None
    try:
        got = hook._parse_game(text)
    except ValueError:
        got = None
    assert got == want and [type(v) for v in (got or {}).values()] == [type(v) for v in (want or {}).values()]

    paths = Paths(tmp_path / "state")
    (tmp_path / "state" / "desired").mkdir(parents=True)
    paths.game.write_bytes(text.encode("utf-8"))
    game_obj, error = read_game(paths)
    active, until = hook.read_game({"RES_STATE_DIR": str(paths.root)}, NOW)
    if error is not None:
        assert (active, until) == (False, None)
    else:
        assert active == game_obj.active(NOW) and until == game_obj.until


def test_the_writers_files_take_the_fast_path(tmp_path):
    paths = Paths(tmp_path / "state")
    w = Writer(paths)
    w.init()
    for on, until in ((True, UNTIL), (False, None), (True, None), (True, 1764494400.123456)):
        w.set_game(on, until)
        text = paths.game.read_text()
        assert hook._fast_parse(text) == tomllib.loads(text)  # never raises _Slow
        assert hook.read_game({"RES_STATE_DIR": str(paths.root)}, NOW) == (on, until)


# ---------------------------------------------------------------- the process and the config


def run_hook(stdin: bytes, state: Path, shell_suffix: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, RES_STATE_DIR=str(state))
    code = "from reconciler.commands.hook import run; run()"
    if shell_suffix:
        return subprocess.run(["sh", "-c", f'"$0" -c "$1" {shell_suffix}', sys.executable, code],
                              input=stdin, capture_output=True, env=env, timeout=60)
    return subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, env=env, timeout=60)


def test_the_real_process(state):
    game(state, f"on = true\nuntil = {time.time() + 3600}\n")
    p = run_hook(event("npm run storybook").encode(), state)
    assert p.returncode == 0 and p.stderr == b""
    got = json.loads(p.stdout)
    assert_grants_nothing(got)
    assert got["hookSpecificOutput"]["updatedInput"]["command"] == PREFIX + "npm run storybook"
    assert p.stdout.endswith(b"}\n") and p.stdout.count(b"\n") == 1

    for stdin in (event(tool="Edit").encode(), b"", b"\xff\xfe garbage", b"{"):
        p = run_hook(stdin, state)
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")

    game(state, "on = false\n")
    p = run_hook(event().encode(), state)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")


def test_the_real_process_with_stdout_closed(state):
    game(state, "on = true\n")
    p = run_hook(event().encode(), state, shell_suffix=">&-")
    assert p.returncode == 0 and b"Traceback" not in p.stderr


def test_print_config_is_the_settings_snippet():
    snippet = json.loads(hook.print_config())
    assert snippet == {"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "res hook", "timeout": 10}]}]}}


HOT = ("json", "json.decoder", "json.scanner", "json.encoder", "shlex", "reconciler.commands", "reconciler.commands.hook",
       "reconciler.core", "reconciler.core.agentclis", "reconciler.core.clis", "reconciler.core.clis.claude",
       "reconciler.core.hooks", "reconciler.core.gate", "reconciler.core.shellline",
       "reconciler.core.sizing", "reconciler.config", "reconciler.config.gatefile",
       "reconciler.config.gitrepo", "reconciler.config.stateroot")


def test_the_hot_path_imports_almost_nothing(state):
    """A light command, game on or off, with the gate.json a loop writes: json, shlex and the gate's own
    modules, no pydantic, tomlkit, dbus, pathlib-based reconciler.config.paths, and no tomllib (the
    game file's fast reader; the table comes from gate.json)."""
    from reconciler.config import gatefile

    gatefile.write(state / "gate.json", {"v": 1, "wait_s": 30, "table": {"pytest": {"mem_gb": 1, "cpus": 1, "minutes": 5}},
                                         "learned": {}})
    code = (
        "import sys, os\n"
        "before = set(sys.modules)\n"
        "from reconciler.commands.hook import main\n"
        "out, _ = main(sys.argv[1], os.environ)\n"
        "new = set(sys.modules) - before\n"
        "print(bool(out), sorted(m for m in new if m.split('.')[0] in "
        "('pydantic', 'tomlkit', 'dbus_fast', 'tomllib', 'json', 'pathlib', 'apscheduler') or m.startswith('reconciler.')))\n"
    )
    env = dict(os.environ, RES_STATE_DIR=str(state))
    run = lambda: subprocess.run([sys.executable, "-c", code, event()], capture_output=True, text=True, env=env, timeout=60)  # noqa: E731
    game(state, f"# res game\non = true\nuntil = {time.time() + 3600}\n")
    p = run()
    assert p.returncode == 0, p.stderr
    on, new = p.stdout.strip().split(" ", 1)
    # game mode's prefix reads the session's rules (core/hookrules.py: an allowed line stays allowed)
    game_on = HOT + ("reconciler.config.agenthome", "reconciler.config.agentsettings", "reconciler.config.files",
                     "reconciler.core.hookrules", "reconciler.core.shellrules")
    assert on == "True" and all(m in game_on for m in ast.literal_eval(new)), new
    game(state, "on = false\n")
    p = run()
    on, new = p.stdout.strip().split(" ", 1)
    assert on == "False" and all(m in HOT for m in ast.literal_eval(new)), new


def test_the_console_script_dispatches_the_hook_before_the_command_line(state):
    """`res` is reconciler.entry:main: for `res hook` neither the CLI module nor argparse loads."""
    # main() leaves by os._exit once its output is out: kept from it here, to look at the modules after
    code = ("import os, sys\nos._exit = lambda code: None\nsys.argv = ['res', 'hook']\nfrom reconciler.entry import main\nmain()\n"
            "print(sorted(m for m in sys.modules if m in ('argparse', 'reconciler.cli', 'reconciler.core.quantities', 'pathlib')"
            " and m not in START), file=sys.stderr)\n")
    code = "import sys\nSTART = set(sys.modules)\n" + code
    env = dict(os.environ, RES_STATE_DIR=str(state))
    # (with site: an installed res is found only through it; START is taken after it)
    p = subprocess.run([sys.executable, "-c", code], input=event(), capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and p.stdout == "" and p.stderr.strip() == "[]", (p.stdout, p.stderr)


# ---------------------------------------------------------------- an allowed line stays allowed (issue 37)


def allow(state: Path, *rules: str) -> None:
    (state.parent / "claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": list(rules)}}))


FITS = lambda environ, size: {"fits": "now", "start": None, "mem_gb": size["mem_gb"], "cpus": size["cpus"]}  # noqa: E731


def test_an_allowed_heavy_line_is_rewritten_with_claude_codes_own_allow(state):
    allow(state, "Bash(python3 -m pytest:*)")
    text, _ = hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=FITS, res_path="/x/res")
    spec = json.loads(text)["hookSpecificOutput"]
    assert spec["permissionDecision"] == "allow" and spec["updatedInput"]["command"].startswith("/x/res run --wait --queue")
    assert spec["updatedInput"]["description"] == "open the app" and "heavy work" in spec["additionalContext"]


def test_a_heavy_line_no_rule_allows_or_in_plan_mode_is_passed_unchanged(state):
    assert hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=FITS) == ("", 0)  # it would ask
    allow(state, "Bash(python3 -m pytest:*)")
    assert hook.main(event("python3 -m pytest -q tests", permission_mode="plan"), os.environ, now=NOW, ask=FITS) == ("", 0)
    assert hook.main(event("python3 -m pytest -q tests > log"), os.environ, now=NOW, ask=FITS) == ("", 0)  # a file write


def test_game_modes_prefix_on_an_allowed_line_carries_the_allow_and_on_others_only_the_prefix(state):
    game(state, f"on = true\nuntil = {UNTIL}\n")
    allow(state, "Bash(npm run lint:*)")
    spec = json.loads(call(event("npm run lint"))[0])["hookSpecificOutput"]
    assert spec["permissionDecision"] == "allow" and spec["updatedInput"]["command"] == PREFIX + "npm run lint"
    assert_grants_nothing(out_of(event("npm run build")))  # it would have been asked about: it still is


def test_a_loop_that_does_not_answer_lets_heavy_lines_run_and_says_so_once_a_session(state):
    stuck = lambda environ, size: hookloop.STUCK  # noqa: E731
    first, _ = hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=stuck)
    assert json.loads(first) == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": hookloop.STUCK_CONTEXT}}
    assert hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=stuck) == ("", 0)
    again, _ = hook.main(event("make test", session_id="s-2"), os.environ, now=NOW, ask=stuck)
    assert "did not answer within 1 s" in json.loads(again)["hookSpecificOutput"]["additionalContext"]


def test_a_stopped_loop_is_given_up_on_within_a_second(state):
    """A real socket whose listener never answers (a SIGSTOPped loop): the question is given up on
    after ASK_TIMEOUT_S (1 s; it was 5), and said to be a stuck loop, not a missing one."""
    import socket

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(state / "serve.sock"))
    srv.listen(8)
    try:
        got = hookloop.would_fit({"RES_STATE_DIR": str(state)}, {"mem_gb": 1, "cpus": 1, "est_s": 60})
        assert got is hookloop.STUCK and hookloop.ASK_TIMEOUT_S == 1.0
    finally:
        srv.close()
    assert hookloop.would_fit({"RES_STATE_DIR": str(state)}, {"mem_gb": 1, "cpus": 1, "est_s": 60}) is None  # none there


def test_game_modes_prefix_on_a_line_admitted_in_place_is_what_it_was_on_a_line_left_alone(state, monkeypatch):
    """A heavy line booked in place (the CLI judges it unchanged) gets game mode's prefix exactly where a
    line the gate left alone would: Claude Code (it asks about the line either way), never Codex (which
    takes a rewrite only with its allow) or Gemini CLI outside YOLO (the prefix would make it ask)."""
    monkeypatch.setattr(hookloop, "admit", lambda *a: ("admit", "res: booked 1 GB for it"))
    game(state, f"# res game\non = true\nuntil = {NOW + 3600}\n")
    claude = json.loads(hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=FITS)[0])
    spec = claude["hookSpecificOutput"]
    assert spec["updatedInput"]["command"] == hook.PREFIX + "python3 -m pytest -q tests"
    assert "permissionDecision" not in spec and spec["additionalContext"].startswith("res: booked 1 GB for it")
    codex = event("python3 -m pytest -q tests", turn_id="t-1", model="gpt-5.5-codex")
    assert hook.main(codex, os.environ, now=NOW, ask=FITS) == ("", 0)
    gemini = json.dumps({"session_id": "g-1", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command",
                         "cwd": "/home/u/proj", "tool_input": {"command": "python3 -m pytest -q tests"}})
    assert hook.main(gemini, os.environ, now=NOW, ask=FITS) == ("", 0)
    game(state, "on = false\n")
    claude = json.loads(hook.main(event("python3 -m pytest -q tests"), os.environ, now=NOW, ask=FITS)[0])
    assert claude == {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "res: booked 1 GB for it"}}
