"""`res hook install`: the gate's hook written into each agent CLI's own settings file, and taken out
again (file tier: a temporary HOME, CLAUDE_CONFIG_DIR, CODEX_HOME and GEMINI_CLI_HOME; no agent CLI).

What must hold: both entries written (the gate's, and SessionStart's that tells the loop of a new
session), every other setting kept (comments too, where the format has them), a second run changes
nothing and says so, a run over an older install that had only the gate's entry adds the other, uninstall
gives back the original bytes, Codex's trust entries are the ones Codex 0.171.0 checks (and move with the
groups after a removed one, each event on its own), and a file that is a symlink, does not parse or has
its own `res hook` entry is left exactly as it was, with one line saying why."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import stat
import tomllib
from pathlib import Path

import pytest

from reconciler.commands.hookinstall import (codex_hash, edit_settings, entry, hook_command, install, installed, is_ours,
                                             settings_path)
from reconciler.config.codextrust import codex_trust, hook_hash, trust_key
from reconciler.config.jsonedit import SettingsError
from reconciler.core.agentclis import CLIS

RES = "/opt/res/bin/res"
CMD = {cli: f"{RES} hook --agent {cli}" for cli in ("claude", "codex", "gemini")}
EVENT = {"claude": "PreToolUse", "codex": "PreToolUse", "gemini": "BeforeTool"}  # the gate's
WHAT = {"claude": "PreToolUse Bash, SessionStart, PostToolUse Bash, PostToolUseFailure Bash",
        "codex": "PreToolUse Bash, SessionStart, PostToolUse Bash",
        "gemini": "BeforeTool ^run_shell_command$, SessionStart, AfterTool ^run_shell_command$"}
# Each CLI's events in the order install adds them: the gate's, SessionStart's, then the post-tool ones
# (admission in place: they release what a command booked, docs/agent-hooks.md).
EVENTS = {"claude": ("PreToolUse", "SessionStart", "PostToolUse", "PostToolUseFailure"),
          "codex": ("PreToolUse", "SessionStart", "PostToolUse"), "gemini": ("BeforeTool", "SessionStart", "AfterTool")}
GATE_HASH = hook_hash("pre_tool_use", "Bash", CMD["codex"], 30)
SESSION_HASH = hook_hash("session_start", None, CMD["codex"], 10)
POST_HASH = hook_hash("post_tool_use", "Bash", CMD["codex"], 10)


def both(cli: str, command: str | None = None) -> dict:
    """The "hooks" install writes into an empty file (every entry of ours, not only two any more)."""
    command = command or CMD[cli]
    return {event: [entry(cli, command, None if i == 0 else event)] for i, event in enumerate(EVENTS[cli])}


def add_both(data: dict, cli: str, command: str | None = None) -> dict:
    """`data` with our two groups added at the end of their lists, as install adds them."""
    for event, groups in both(cli, command).items():
        data.setdefault("hooks", {}).setdefault(event, []).extend(groups)
    return data


def trust(path, event: str = "pre_tool_use", group: int = 0) -> str:
    return f"{path}:{event}:{group}:0"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME with nothing in it; the CLIs' own variables unset; cwd outside any checkout."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "OPENCODE_CONFIG_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return h


def paths(h):
    return {"claude": h / ".claude" / "settings.json", "codex": h / ".codex" / "hooks.json",
            "gemini": h / ".gemini" / "settings.json"}


def run(*args, **kw):
    kw.setdefault("res", RES)
    return install(*args, **kw)


def one_line(line: str) -> bool:
    return "\n" not in line and line == line.strip()


def snapshot(root) -> dict:
    """Every file under `root`: its bytes, mode and inode (a rewrite with the same bytes shows)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.lstat(p)
            out[p] = (open(p, "rb").read() if not stat.S_ISLNK(st.st_mode) else os.readlink(p), st.st_mode, st.st_ino)
    return out


def comments_of(text: str) -> list[str]:
    return re.findall(r"//[^\n]*|/\*.*?\*/", text, re.S)


# ---------------------------------------------------------------- Codex's trust hash


def test_the_trust_hash_is_the_one_codex_checks():
    assert hook_hash("pre_tool_use", "Bash", "res hook", 30) == \
        "sha256:4d2bf2df99de224f497548d536c2119279dc20a4c79d502c70519edd36360500"


def test_the_session_start_trust_hash_has_no_matcher_and_the_handlers_own_timeout():
    """SessionStart's group has no matcher: the hashed identity has none either (Codex drops a None
    field); only session_end clamps the timeout, session_start hashes the handler's own."""
    assert hook_hash("session_start", None, "res hook", 10) == \
        "sha256:925b4fb4d468562f38a8c6d66e59a91dab2b5f897af35fa8d1b97c8f5877c912"
    gate, session, _post = CLIS["codex"].entries
    assert (gate.label, session.label) == ("pre_tool_use", "session_start")
    assert codex_hash(gate, CMD["codex"]) == GATE_HASH
    assert codex_hash(session, CMD["codex"]) == SESSION_HASH != hook_hash("session_start", None, CMD["codex"], 600)


def test_the_trust_key_names_the_file_event_group_and_handler():
    assert trust_key("/h/.codex/hooks.json", 2) == "/h/.codex/hooks.json:pre_tool_use:2:0"
    assert trust_key("/h/.codex/hooks.json", 1, label="session_start") == "/h/.codex/hooks.json:session_start:1:0"


def test_the_session_start_entry_of_each_cli():
    assert entry("claude", CMD["claude"], "SessionStart") == {
        "hooks": [{"type": "command", "command": CMD["claude"], "timeout": 10}]}
    assert entry("codex", CMD["codex"], "SessionStart") == {
        "hooks": [{"type": "command", "command": CMD["codex"], "timeout": 10}]}
    assert entry("gemini", CMD["gemini"], "SessionStart") == {
        "hooks": [{"type": "command", "name": "res gate", "command": CMD["gemini"], "timeout": 10000}]}
    for cli in ("claude", "codex", "gemini"):
        assert is_ours(cli, entry(cli, CMD[cli], "SessionStart"), "SessionStart")
        assert not is_ours(cli, entry(cli, CMD[cli], "SessionStart"))  # not the gate's shape
        assert not is_ours(cli, entry(cli, CMD[cli]), "SessionStart")
        assert not is_ours(cli, {"matcher": "startup"} | entry(cli, CMD[cli], "SessionStart"), "SessionStart")
        assert not is_ours(cli, {"matcher": None} | entry(cli, CMD[cli], "SessionStart"), "SessionStart")


# ---------------------------------------------------------------- an empty home


def test_install_into_an_empty_home(home):
    code, lines = run()
    p = paths(home)
    assert code == 0
    assert lines == [
        f"claude: installed in {p['claude']} ({WHAT['claude']} -> {CMD['claude']})",
        f"codex: installed in {p['codex']} ({WHAT['codex']} -> {CMD['codex']}); "
        f"trusted in {home}/.codex/config.toml",
        f"gemini: installed in {p['gemini']} ({WHAT['gemini']} -> {CMD['gemini']})",
        f"opencode: installed in {home}/.config/opencode/plugins/res-gate.js (tool.execute.before bash, "
        f"tool.execute.after bash -> {RES} hook --agent opencode)",
        f"copilot: installed in {home}/.copilot/hooks/res.json (preToolUse, postToolUse -> {RES} hook --agent copilot)",
    ]
    for cli in ("claude", "codex", "gemini"):
        data = json.loads(p[cli].read_text())
        assert data == {"hooks": both(cli)}
        assert list(data["hooks"]) == list(EVENTS[cli])
        assert stat.S_IMODE(p[cli].stat().st_mode) == 0o600
        assert stat.S_IMODE(p[cli].parent.stat().st_mode) == 0o700
    assert json.loads(p["gemini"].read_text())["hooks"]["BeforeTool"][0]["hooks"][0] == {
        "type": "command", "name": "res gate", "command": CMD["gemini"], "timeout": 30000}
    assert json.loads(p["gemini"].read_text())["hooks"]["SessionStart"] == [{"hooks": [{
        "type": "command", "name": "res gate", "command": CMD["gemini"], "timeout": 10000}]}]
    assert json.loads(p["claude"].read_text())["hooks"]["PreToolUse"][0] == {
        "matcher": "Bash", "hooks": [{"type": "command", "command": CMD["claude"], "timeout": 30}]}
    assert json.loads(p["claude"].read_text())["hooks"]["SessionStart"] == [{"hooks": [{
        "type": "command", "command": CMD["claude"], "timeout": 10}]}]
    assert json.loads(p["codex"].read_text())["hooks"]["SessionStart"] == [{"hooks": [{
        "type": "command", "command": CMD["codex"], "timeout": 10}]}]
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert config == {"hooks": {"state": {trust(p["codex"]): {"trusted_hash": GATE_HASH},
                                          trust(p["codex"], "session_start"): {"trusted_hash": SESSION_HASH},
                                          trust(p["codex"], "post_tool_use"): {"trusted_hash": POST_HASH}}}}
    assert stat.S_IMODE((home / ".codex" / "config.toml").stat().st_mode) == 0o600
    assert all(installed(cli) is True for cli in ("claude", "codex", "gemini"))


def test_a_second_run_changes_nothing_and_says_so(home):
    run()
    before = snapshot(home)
    code, lines = run()
    assert code == 0
    assert [line.split(" in ")[0] for line in lines] == ["claude: already installed", "codex: already installed",
                                                         "gemini: already installed", "opencode: already installed",
                                                         "copilot: already installed"]
    assert snapshot(home) == before


def test_uninstall_takes_out_what_install_put_in(home):
    run()
    code, lines = run(uninstall=True)
    p = paths(home)
    assert code == 0
    assert lines[0] == f"claude: removed from {p['claude']}"
    assert lines[1] == f"codex: removed from {p['codex']}; its trust entries brought in line in {home}/.codex/config.toml"
    assert lines[2] == f"gemini: removed from {p['gemini']}"
    for cli in ("claude", "codex", "gemini"):
        assert json.loads(p[cli].read_text()) == {}
    assert tomllib.loads((home / ".codex" / "config.toml").read_text()) == {}
    before = snapshot(home)
    code, lines = run(uninstall=True)
    assert code == 0 and all(" not installed in " in line for line in lines)
    assert snapshot(home) == before
    assert all(installed(cli) is False for cli in ("claude", "codex", "gemini"))


def test_uninstall_with_no_files_writes_none(home):
    code, lines = run(uninstall=True)
    assert code == 0 and len(lines) == 5 and all(" not installed in " in line for line in lines)
    assert snapshot(home) == {}


def test_one_agent_only(home):
    code, lines = run("gemini")
    assert code == 0 and len(lines) == 1 and lines[0].startswith("gemini: installed")
    assert not paths(home)["claude"].exists() and not paths(home)["codex"].exists()


# ---------------------------------------------------------------- files with other settings


CLAUDE_SETTINGS = """{
  "model": "opus",
  "permissions": {
    "allow": ["Bash(npm test:*)", "Read"],
    "deny": []
  },
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "prettier --check", "timeout": 5}]
      }
    ],
    "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
  },
  "env": {"FOO": "bär ☃"}
}
"""


def test_other_settings_and_hooks_are_kept_and_come_back_byte_for_byte(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    p.write_text(CLAUDE_SETTINGS)
    os.chmod(p, 0o644)
    code, lines = run("claude")
    assert code == 0, lines
    data = json.loads(p.read_text())
    assert data == add_both(json.loads(CLAUDE_SETTINGS), "claude")
    assert list(data) == ["model", "permissions", "hooks", "env"]  # order kept
    assert list(data["hooks"]) == ["PreToolUse", "Stop", "SessionStart", "PostToolUse", "PostToolUseFailure"]
    assert p.read_text().startswith(CLAUDE_SETTINGS[:CLAUDE_SETTINGS.index('        "hooks": [{"type"')])
    assert stat.S_IMODE(p.stat().st_mode) == 0o644  # the file's own mode is kept
    code, lines = run("claude", uninstall=True)
    assert code == 0 and p.read_text() == CLAUDE_SETTINGS
    assert stat.S_IMODE(p.stat().st_mode) == 0o644


ORIGINALS = [
    '{}',
    '{}\n',
    '{\n  "model": "opus"\n}\n',
    '{\n    "model": "opus",\n    "hooks": {\n        "Stop": []\n    }\n}\n',
    '{\n\t"model": "opus",\n\t"hooks": {\n\t\t"PreToolUse": [\n\t\t\t{"matcher": "Read", "hooks": []}\n\t\t]\n\t}\n}',
    '{"model":"opus","hooks":{"PreToolUse":[{"matcher":"Read","hooks":[]}]}}',
    '{"model": "opus", "hooks": {"SessionStart": [{"hooks": []}]}}\n',
    '  {\n  "a": [1, 2, {"b": null}],\n  "hooks": {"Stop": []}\n}\n\n',
    '{\r\n  "model": "opus",\r\n  "hooks": {\r\n    "PreToolUse": [\r\n      {"matcher": "x", "hooks": []}\r\n    ]\r\n  }\r\n}\r\n',
    '{"hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": []},\n  {"matcher": "Write", "hooks": []}]}, "z": "\\u00e9\\"}"}',
]


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
@pytest.mark.parametrize("original", ORIGINALS)
def test_install_then_uninstall_gives_back_the_original_bytes(cli, original):
    command = CMD[cli]
    change = edit_settings(cli, original, command)
    assert change.outcome == "installed"
    assert json.loads(change.text) == add_both(json.loads(original), cli)
    again = edit_settings(cli, change.text, command)
    assert again.outcome == "already" and again.text == change.text and again.ours == change.ours
    back = edit_settings(cli, change.text, command, uninstall=True)
    assert back.outcome == "removed" and back.text == original
    assert set(back.removed) == set(EVENTS[cli])


SETTINGS = Path(__file__).resolve().parents[1] / "fixtures" / "settings"  # real files: SOURCES.md there


@pytest.mark.parametrize("path", sorted(SETTINGS.glob("*.json")), ids=lambda p: p.name)
def test_a_real_file_laid_out_as_the_cli_writes_it_stays_laid_out_so(path):
    """Files people committed (tests/fixtures/settings), each laid out as JSON.stringify(data, null, 2):
    with res's entries in, the file is that layout of the new data, one entry a line; a second run
    changes nothing, and uninstall gives back the file's bytes."""
    cli = path.name.split("-")[0]
    original = path.read_text()
    data = json.loads(original)
    body = json.dumps(data, indent=2, ensure_ascii=False)
    assert original in (body, body + "\n")  # what the test relies on
    change = edit_settings(cli, original, CMD[cli])
    new = json.loads(change.text)
    assert new == add_both(json.loads(original), cli)
    assert change.text == json.dumps(new, indent=2, ensure_ascii=False) + original[len(body):]
    assert edit_settings(cli, change.text, CMD[cli]).outcome == "already"
    assert edit_settings(cli, change.text, CMD[cli], uninstall=True).text == original


def _hooks_on_one_line(hooks: dict) -> str:
    """The real claude-code-presets settings with its "hooks" block written on one line (json.dumps):
    hand-built, the file issue 38 saw."""
    original = (SETTINGS / "claude-claude-code-presets.json").read_text()
    head = original[:original.index('  "hooks": {')]
    return head + '  "hooks": ' + json.dumps(hooks, ensure_ascii=False) + "\n}\n"


def test_a_hooks_block_on_one_line_gets_each_new_event_on_a_line_below_it():
    """Issue 38: the new events were glued onto the block's line with "," and no space
    (`…}]}],"PreToolUse": [{"matcher": "Bash","hooks": …`). Each goes on a line of its own, indented
    one step under the block, with the block's own separators; uninstall takes exactly that out."""
    stop = json.loads((SETTINGS / "claude-claude-code-presets.json").read_text())["hooks"]["Stop"]
    original = _hooks_on_one_line({"Stop": stop})
    change = edit_settings("claude", original, CMD["claude"])
    c = CMD["claude"]
    assert change.text == original.replace('"}]}]}\n}\n', (
        '"}]}],\n'
        f'    "PreToolUse": [{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 30}}]}}],\n'
        f'    "SessionStart": [{{"hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}],\n'
        f'    "PostToolUse": [{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}],\n'
        f'    "PostToolUseFailure": [{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}]}}\n}}\n'))
    assert edit_settings("claude", change.text, c, uninstall=True).text == original
    # a list inside that block: our group stays on the list's line, after the others
    hooks = json.loads((SETTINGS / "claude-claude-code-presets.json").read_text())["hooks"]
    original = _hooks_on_one_line(hooks)
    change = edit_settings("claude", original, c)
    group = f'{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 30}}]}}'
    assert change.text == original.replace('bash-check.mjs\\""}]}]', f'bash-check.mjs\\""}}]}}, {group}]').replace(
        '"}]}]}\n}\n', f'"}}]}}],\n    "SessionStart": [{{"hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}],\n'
        f'    "PostToolUse": [{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}],\n'
        f'    "PostToolUseFailure": [{{"matcher": "Bash", "hooks": [{{"type": "command", "command": "{c}", "timeout": 10}}]}}]}}\n}}\n')
    assert edit_settings("claude", change.text, c, uninstall=True).text == original


def test_one_event_a_line_stays_one_event_a_line():
    """Hand-built on the layout READMEs publish for pasting (tests/fixtures/settings/SOURCES.md): each
    event on one line, spaces inside the brackets. A new event is one more such line; a group added to
    an event's list stays on that event's line."""
    c = CMD["claude"]
    original = ('{\n  "hooks": {\n'
                '    "SessionStart": [{ "hooks": [{ "type": "command", "command": "tsumugi notify --stdin" }] }],\n'
                '    "Stop": [{ "hooks": [{ "type": "command", "command": "tsumugi notify --state done" }] }]\n'
                '  }\n}\n')
    change = edit_settings("claude", original, c)
    assert change.text == (
        '{\n  "hooks": {\n'
        '    "SessionStart": [{ "hooks": [{ "type": "command", "command": "tsumugi notify --stdin" }] }, '
        f'{{ "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}] }}],\n'
        '    "Stop": [{ "hooks": [{ "type": "command", "command": "tsumugi notify --state done" }] }],\n'
        f'    "PreToolUse": [{{ "matcher": "Bash", "hooks": [{{ "type": "command", "command": "{c}", "timeout": 30 }}] }}],\n'
        f'    "PostToolUse": [{{ "matcher": "Bash", "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}] }}],\n'
        f'    "PostToolUseFailure": [{{ "matcher": "Bash", "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}] }}]\n'
        '  }\n}\n')
    assert edit_settings("claude", change.text, c, uninstall=True).text == original


def test_a_group_laid_out_with_its_hooks_list_on_one_line_is_followed_so():
    """Hand-built on the layout of Claude Code's hooks documentation: the group over lines, its
    "hooks" list on one. Ours takes the same shape, in the list and as a new event's."""
    c = CMD["claude"]
    original = ('{\n  "hooks": {\n    "PreToolUse": [\n      {\n        "matcher": "Edit",\n'
                '        "hooks": [{ "type": "command", "command": "lint" }]\n      }\n    ]\n  }\n}\n')
    change = edit_settings("claude", original, c)
    assert change.text == (
        '{\n  "hooks": {\n    "PreToolUse": [\n      {\n        "matcher": "Edit",\n'
        '        "hooks": [{ "type": "command", "command": "lint" }]\n      },\n'
        '      {\n        "matcher": "Bash",\n'
        f'        "hooks": [{{ "type": "command", "command": "{c}", "timeout": 30 }}]\n      }}\n    ],\n'
        '    "SessionStart": [\n      {\n'
        f'        "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}]\n      }}\n    ],\n'
        '    "PostToolUse": [\n      {\n        "matcher": "Bash",\n'
        f'        "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}]\n      }}\n    ],\n'
        '    "PostToolUseFailure": [\n      {\n        "matcher": "Bash",\n'
        f'        "hooks": [{{ "type": "command", "command": "{c}", "timeout": 10 }}]\n      }}\n    ]\n'
        '  }\n}\n')
    assert edit_settings("claude", change.text, c, uninstall=True).text == original


def test_a_crlf_file_gets_crlf_lines():
    original = '{\r\n  "model": "opus",\r\n  "hooks": {\r\n    "Stop": []\r\n  }\r\n}\r\n'
    text = edit_settings("claude", original, CMD["claude"]).text
    assert "\n" not in text.replace("\r\n", "") and text.count("\r\n") > 20


def test_an_empty_list_or_hooks_object_of_the_users_goes_with_ours():
    """Install cannot tell an empty "hooks": {} or "PreToolUse": [] (or "SessionStart": []) the user wrote
    from one it made, and
    uninstall takes out what is left empty: the same to every CLI as none."""
    for original, after in (('{"hooks": {}, "a": 1}', '{"a": 1}'), ('{"hooks": {"PreToolUse": []}}', '{}'),
                            ('{"hooks": {"SessionStart": []}}', '{}'),
                            ('{"hooks": {"SessionStart": [], "Stop": []}}', '{"hooks": {"Stop": []}}')):
        text = edit_settings("claude", original, CMD["claude"]).text
        assert edit_settings("claude", text, CMD["claude"], uninstall=True).text == after


def test_random_documents_come_back_byte_for_byte():
    rng = random.Random(24)

    def value(depth):
        kind = rng.choice(["s", "n", "o", "a"] if depth < 3 else ["s", "n"])
        if kind == "s":
            return rng.choice(["x", "é", "a\"b", "", "//not a comment", "/* nor this */"])
        if kind == "n":
            return rng.choice([0, -1.5, True, None, 10 ** 20])
        if kind == "o":
            return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 3))}
        return [value(depth + 1) for _ in range(rng.randint(0, 3))]

    for _ in range(300):
        doc = {f"key{i}": value(1) for i in range(rng.randint(0, 4))}
        shape = rng.choice(["none", "empty", "other", "list"])
        if shape != "none":
            doc["hooks"] = {} if shape == "empty" else {"Stop": [{"hooks": []}]}
        if shape == "list":
            doc["hooks"]["PreToolUse"] = [{"matcher": "Read", "hooks": [{"type": "command", "command": "x"}]}
                                          for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.5:
                doc["hooks"]["SessionStart"] = [{"hooks": [{"type": "command", "command": "y"}]}
                                                for _ in range(rng.randint(1, 2))]  # an empty one: below
        indent = rng.choice([None, 2, 4, "\t"])
        text = json.dumps(doc, indent=indent, ensure_ascii=rng.random() < 0.5,
                          separators=rng.choice([(",", ":"), (", ", ": ")]) if indent is None else None)
        text += rng.choice(["", "\n"])
        cli = rng.choice(["claude", "codex"])
        change = edit_settings(cli, text, CMD[cli])
        assert json.loads(change.text) == add_both(json.loads(text), cli)
        if shape == "list":
            assert change.ours == {event: (len(doc["hooks"].get(event, [])),) for event in EVENTS[cli]}
        back = edit_settings(cli, change.text, CMD[cli], uninstall=True).text
        if shape == "empty":  # the user's empty "hooks" goes too (above)
            assert json.loads(back) == {k: v for k, v in doc.items() if k != "hooks"}
        else:
            assert back == text, text


def test_only_our_group_goes_when_others_were_added_after_it():
    original = ('{\n  "hooks": {\n    "PreToolUse": [\n      {"matcher": "Read", "hooks": []}\n    ],\n'
                '    "SessionStart": [\n      {"matcher": "resume", "hooks": []}\n    ]\n  }\n}\n')
    text = edit_settings("claude", original, CMD["claude"]).text
    # a group of the user's after ours in each of the two lists that were there (PreToolUse, SessionStart)
    end = "\n    ],\n"
    first = text.index(end)
    second = text.index(end, first + len(end))
    later = (text[:first] + ',\n      {"matcher": "Write", "hooks": []}' + text[first:second]
             + ',\n      {"matcher": "clear", "hooks": []}' + text[second:])
    assert json.loads(later)["hooks"]["PreToolUse"][2] == {"matcher": "Write", "hooks": []}
    assert json.loads(later)["hooks"]["SessionStart"][2] == {"matcher": "clear", "hooks": []}
    back = edit_settings("claude", later, CMD["claude"], uninstall=True)
    assert back.removed == {"PostToolUseFailure": (0,), "PostToolUse": (0,), "SessionStart": (1,), "PreToolUse": (1,)}
    assert back.text == original.replace('"Read", "hooks": []}\n', '"Read", "hooks": []},\n      {"matcher": "Write", "hooks": []}\n') \
        .replace('"resume", "hooks": []}\n', '"resume", "hooks": []},\n      {"matcher": "clear", "hooks": []}\n')
    first = '{"hooks": {"PreToolUse": [' + json.dumps(entry("claude", CMD["claude"])) + ', {"matcher": "Read"}]}}'
    back = edit_settings("claude", first, CMD["claude"], uninstall=True)
    assert back.text == '{"hooks": {"PreToolUse": [{"matcher": "Read"}]}}'


def test_a_hand_edited_entry_is_not_ours():
    group = entry("claude", CMD["claude"])
    assert is_ours("claude", group)
    assert is_ours("claude", entry("claude", "'/my dir/res' hook --agent claude"))
    group["hooks"][0]["timeout"] = 60
    assert not is_ours("claude", group)
    assert not is_ours("claude", entry("claude", "res hook --agent claude"))  # not an absolute path
    assert not is_ours("claude", entry("claude", CMD["codex"]))
    assert not is_ours("codex", entry("claude", CMD["codex"]) | {"description": "x"})
    text = json.dumps({"hooks": {"PreToolUse": [group]}})
    assert edit_settings("claude", text, CMD["claude"], uninstall=True).outcome == "absent"


def test_a_res_path_with_a_space_is_quoted_and_still_ours():
    command = hook_command("/home/me/my tools/res", "claude")
    assert command == "'/home/me/my tools/res' hook --agent claude"
    change = edit_settings("claude", None, command)
    assert edit_settings("claude", change.text, command).outcome == "already"


def test_a_new_res_path_is_written_over_the_old_one():
    old = edit_settings("claude", CLAUDE_SETTINGS, "/old/res hook --agent claude").text
    change = edit_settings("claude", old, CMD["claude"])
    assert change.outcome == "updated" and change.before == "/old/res hook --agent claude"
    assert change.text == old.replace("/old/res", RES)
    assert edit_settings("claude", change.text, CMD["claude"], uninstall=True).text == CLAUDE_SETTINGS


# ---------------------------------------------------------------- over an older install (the gate's entry only)


@contextlib.contextmanager
def older_res():
    """res as it was before its SessionStart entry: the gate's entry only (and, for Codex, its trust)."""
    saved = dict(CLIS)
    CLIS.update({name: cli._replace(entries=cli.entries[:1]) for name, cli in saved.items()})
    try:
        yield
    finally:
        CLIS.update(saved)


def test_an_older_install_gets_the_session_start_entry_added(home):
    with older_res():
        assert run()[0] == 0
    p = paths(home)
    config = home / ".codex" / "config.toml"
    for cli in ("claude", "codex", "gemini"):
        assert json.loads(p[cli].read_text()) == {"hooks": {EVENT[cli]: [entry(cli, CMD[cli])]}}
        assert installed(cli) is False  # one entry of two: the loop would not hear of new sessions
    assert list(tomllib.loads(config.read_text())["hooks"]["state"]) == [trust(p["codex"])]
    code, lines = run()
    assert code == 0
    assert lines == [
        f"claude: updated in {p['claude']} ({WHAT['claude']} -> {CMD['claude']}; added {', '.join(EVENTS['claude'][1:])})",
        f"codex: updated in {p['codex']} ({WHAT['codex']} -> {CMD['codex']}; added {', '.join(EVENTS['codex'][1:])}); "
        f"trusted in {config}",
        f"gemini: updated in {p['gemini']} ({WHAT['gemini']} -> {CMD['gemini']}; added {', '.join(EVENTS['gemini'][1:])})",
        f"opencode: already installed in {home}/.config/opencode/plugins/res-gate.js (tool.execute.before bash, "
        f"tool.execute.after bash -> {RES} hook --agent opencode)",
        f"copilot: already installed in {home}/.copilot/hooks/res.json (preToolUse, postToolUse -> {RES} hook --agent copilot)",
    ]
    for cli in ("claude", "codex", "gemini"):
        assert json.loads(p[cli].read_text()) == {"hooks": both(cli)}
        assert installed(cli) is True
    assert tomllib.loads(config.read_text())["hooks"]["state"] == {
        trust(p["codex"]): {"trusted_hash": GATE_HASH}, trust(p["codex"], "session_start"): {"trusted_hash": SESSION_HASH},
        trust(p["codex"], "post_tool_use"): {"trusted_hash": POST_HASH}}
    before = snapshot(home)
    assert all(" already installed in " in line for line in run()[1])
    assert snapshot(home) == before
    code, lines = run(uninstall=True)
    assert code == 0 and all(json.loads(p[cli].read_text()) == {} for cli in p)
    assert tomllib.loads(config.read_text()) == {}


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
@pytest.mark.parametrize("original", ORIGINALS)
def test_an_older_install_updated_then_uninstalled_gives_back_the_original_bytes(cli, original):
    with older_res():
        old = edit_settings(cli, original, CMD[cli])
    assert old.outcome == "installed" and list(old.ours) == [EVENT[cli]]
    change = edit_settings(cli, old.text, CMD[cli])
    assert change.outcome == "updated" and change.added == EVENTS[cli][1:] and change.before is None
    assert change.text == edit_settings(cli, original, CMD[cli]).text  # as if installed in one go
    assert change.ours == edit_settings(cli, original, CMD[cli]).ours
    assert edit_settings(cli, change.text, CMD[cli], uninstall=True).text == original
    assert edit_settings(cli, old.text, CMD[cli], uninstall=True).text == original  # an older install, taken out


def test_an_older_install_from_another_res_path_is_moved_and_completed(home):
    with older_res():
        run("claude", res="/old/res")
    code, lines = run("claude")
    assert code == 0 and lines == [f"claude: updated in {paths(home)['claude']} ({WHAT['claude']} -> {CMD['claude']}; "
                                   "was /old/res hook --agent claude; added SessionStart, PostToolUse, PostToolUseFailure)"]
    assert json.loads(paths(home)["claude"].read_text()) == {"hooks": both("claude")}


def test_a_missing_gate_entry_is_added_back_next_to_the_session_start_one(home):
    """The user took the gate's entry out by hand and kept SessionStart's: install puts it back."""
    run("gemini")
    p = paths(home)["gemini"]
    p.write_text(json.dumps({"hooks": {"SessionStart": both("gemini")["SessionStart"]}}, indent=2) + "\n")
    assert installed("gemini") is False
    code, lines = run("gemini")
    assert code == 0 and lines == [f"gemini: updated in {p} ({WHAT['gemini']} -> {CMD['gemini']}; added BeforeTool, AfterTool)"]
    assert json.loads(p.read_text())["hooks"] == {"SessionStart": both("gemini")["SessionStart"],
                                                  "BeforeTool": both("gemini")["BeforeTool"],
                                                  "AfterTool": both("gemini")["AfterTool"]}
    assert installed("gemini") is True


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
def test_installed_only_with_both_entries(home, cli):
    run(cli)
    assert installed(cli) is True
    p = paths(home)[cli]
    for event in (EVENT[cli], "SessionStart"):
        p.write_text(json.dumps({"hooks": {event: both(cli)[event]}}))
        assert installed(cli) is False, event
    p.write_text(json.dumps({"hooks": both(cli, "/other/res hook --agent " + cli)}))  # another res path: still ours
    assert installed(cli) is (cli != "codex")  # Codex: trusted for the other command only


def test_codex_installed_only_with_both_trust_entries(home):
    run("codex")
    config = home / ".codex" / "config.toml"
    hooks_json = home / ".codex" / "hooks.json"
    full = config.read_text()
    for label, digest in (("pre_tool_use", GATE_HASH), ("session_start", SESSION_HASH)):
        config.write_text(f'[hooks.state."{trust(hooks_json, label)}"]\ntrusted_hash = "{digest}"\n')
        assert installed("codex") is False, label  # the other one is untrusted: Codex skips it silently
    config.write_text(full.replace(SESSION_HASH, GATE_HASH))  # SessionStart's key with the gate's hash: modified
    assert installed("codex") is False
    code, lines = run("codex")
    assert code == 0 and lines[0].startswith("codex: already installed") and lines[0].endswith(f"trusted in {config}")
    assert config.read_text() == full and installed("codex") is True


# ---------------------------------------------------------------- refusals


def test_a_file_with_its_own_res_hook_entry_is_left_alone(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    snippet = '{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "res hook", "timeout": 10}]}]}}'
    p.write_text(snippet)
    code, lines = run("claude")
    assert code == 1 and len(lines) == 1 and one_line(lines[0])
    assert lines[0].startswith(f"res: claude: {p}: already runs `res hook` from an entry of its own ('res hook'")
    assert p.read_text() == snippet
    code, lines = run("claude", uninstall=True)
    assert code == 0 and lines == [f"claude: not installed in {p}; it runs `res hook` from an entry of its own "
                                   "('res hook'), left as it is"]
    assert p.read_text() == snippet


def test_a_file_with_its_own_res_hook_at_session_start_is_left_alone(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    own = '{"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "res hook"}]}]}}\n'
    p.write_text(own)
    code, lines = run("claude")
    assert code == 1 and len(lines) == 1 and one_line(lines[0])
    assert lines[0] == (f"res: claude: {p}: already runs `res hook` from an entry of its own ('res hook' in "
                        "hooks.SessionStart); remove that entry and run `res hook install` again, or keep it; "
                        "nothing written")
    assert p.read_text() == own
    code, lines = run("claude", uninstall=True)
    assert code == 0 and lines[0].endswith("it runs `res hook` from an entry of its own ('res hook'), left as it is")
    assert p.read_text() == own


def test_other_session_start_hooks_are_kept(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    theirs = {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi", "timeout": 10}]}
    original = json.dumps({"hooks": {"SessionStart": [theirs]}}, indent=2) + "\n"
    p.write_text(original)
    assert run("claude")[0] == 0
    assert json.loads(p.read_text())["hooks"]["SessionStart"] == [theirs, entry("claude", CMD["claude"], "SessionStart")]
    assert run("claude", uninstall=True)[0] == 0 and p.read_text() == original


def test_a_symlinked_settings_file_is_refused(home, tmp_path):
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}\n')
    p = paths(home)["claude"]
    p.parent.mkdir()
    p.symlink_to(real)
    before = snapshot(tmp_path)
    for uninstall in (False, True):
        code, lines = run("claude", uninstall=uninstall)
        assert code == 1 and len(lines) == 1 and one_line(lines[0])
        assert lines[0] == f"res: claude: {p}: is a symlink; not following it (edit the file it points to); nothing written"
    assert snapshot(tmp_path) == before
    assert installed("claude") is None


def test_a_symlinked_codex_config_is_refused_and_nothing_written(home, tmp_path):
    (home / ".codex").mkdir()
    real = tmp_path / "config.toml"
    real.write_text('model = "o3"\n')
    (home / ".codex" / "config.toml").symlink_to(real)
    before = snapshot(tmp_path)
    code, lines = run("codex")
    assert code == 1 and lines == [f"res: codex: {home}/.codex/config.toml: is a symlink; not following it "
                                   "(edit the file it points to); nothing written"]
    assert snapshot(tmp_path) == before  # hooks.json not written either


@pytest.mark.parametrize("cli,text", [
    ("claude", '{"model": "opus",}\n'),
    ("claude", '{"model": "opus"} // a comment\n'),  # Claude Code reads plain JSON
    ("codex", '{"hooks": {"PreToolUse": [}}'),
    ("gemini", '{\n  /* never closed\n}\n'),
    ("gemini", '[1, 2]\n'),
    ("gemini", '{"hooks": []}\n'),
    ("claude", '{"hooks": {"PreToolUse": {"matcher": "Bash"}}}\n'),
    ("claude", '{"hooks": {}, "hooks": {}}\n'),
    ("claude", '{"a": NaN}\n'),
    ("claude", '\ufeff{}\n'),
])
def test_a_file_that_does_not_parse_is_refused_with_nothing_written(home, cli, text):
    p = paths(home)[cli]
    p.parent.mkdir()
    p.write_text(text, encoding="utf-8")
    before = snapshot(home)
    code, lines = run(cli)
    assert code == 1 and len(lines) == 1 and one_line(lines[0]), lines
    assert lines[0].startswith(f"res: {cli}: {p}: ") and lines[0].endswith("nothing written")
    assert snapshot(home) == before  # no temp file left, no config.toml
    assert installed(cli) is None


def test_not_json_names_the_line(home):
    with pytest.raises(SettingsError, match=r"^f: not valid JSON \(line 3 column 1: Expecting property name"):
        edit_settings("claude", '{\n  "a": 1,\n}\n', CMD["claude"], name="f")


def test_broken_codex_config_toml_is_refused(home):
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "o3\n')
    before = snapshot(home)
    code, lines = run("codex")
    assert code == 1 and len(lines) == 1 and "config.toml: not valid TOML" in lines[0]
    assert snapshot(home) == before


def test_one_broken_file_does_not_stop_the_others(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    p.write_text("{")
    code, lines = run()
    assert code == 1
    assert lines[0].startswith("res: claude: ") and lines[1].startswith("codex: installed")
    assert lines[2].startswith("gemini: installed")


def test_a_dollar_in_the_res_path_is_refused_for_gemini():
    with pytest.raises(SettingsError, match="Gemini CLI would expand"):
        edit_settings("gemini", None, hook_command("/opt/$x/res", "gemini"))


def test_a_comment_inside_our_entry_stops_uninstall():
    text = edit_settings("gemini", "{}\n", CMD["gemini"]).text.replace('"timeout"', '// mine\n "timeout"')
    with pytest.raises(SettingsError, match="has a comment inside"):
        edit_settings("gemini", text, CMD["gemini"], uninstall=True)


# ---------------------------------------------------------------- Gemini: comments


GEMINI_JSONC = """// Gemini CLI settings
{
  /* the look */
  "ui": {"theme": "GitHub"}, // trailing comment
  "general": {
    "vimMode": true // "quoted" // words
  },
  "url": "http://example.com/*not a comment*/", // after a string with slashes
  "hooks": {
    // before tool
    "BeforeTool": [
      {"matcher": "^read_file$", "hooks": [{"type": "command", "command": "audit"}]} // theirs
      // the end of the list
    ]
  }
  /* the end */
}
"""


def test_gemini_comments_are_kept(home):
    p = paths(home)["gemini"]
    p.parent.mkdir()
    p.write_text(GEMINI_JSONC)
    code, lines = run("gemini")
    assert code == 0, lines
    text = p.read_text()
    assert comments_of(text) == comments_of(GEMINI_JSONC)
    assert "http://example.com/*not a comment*/" in text
    change = edit_settings("gemini", text, CMD["gemini"])
    assert change.outcome == "already"
    from reconciler.config.jsonc import blanked as _blank, comment_spans as _comments

    data = json.loads(_blank(text, _comments(text)))
    assert data["hooks"]["BeforeTool"] == [{"matcher": "^read_file$", "hooks": [{"type": "command", "command": "audit"}]},
                                           entry("gemini", CMD["gemini"])]
    assert data["hooks"]["SessionStart"] == [entry("gemini", CMD["gemini"], "SessionStart")]
    assert data["hooks"]["AfterTool"] == [entry("gemini", CMD["gemini"], "AfterTool")]
    assert list(data["hooks"]) == ["BeforeTool", "SessionStart", "AfterTool"]
    assert data["general"] == {"vimMode": True}
    code, lines = run("gemini", uninstall=True)
    assert code == 0 and p.read_text() == GEMINI_JSONC


@pytest.mark.parametrize("original", [
    '// only a comment before\n{}\n',
    '{ /* empty */ }',
    '{\n  // nothing yet\n}\n',
    '{"hooks": { /* none */ }}',
    '{"hooks": {"BeforeTool": [ // none yet\n]}}',
    '{"a": 1 // last\n}',
    '{"a": 1 /* last */}',
    '{"hooks": {"BeforeTool": [{"matcher": "x"} /* c */, {"matcher": "y"} // d\n]}}',
])
def test_gemini_comments_in_odd_places(original):
    change = edit_settings("gemini", original, CMD["gemini"])
    assert comments_of(change.text) == comments_of(original)
    assert edit_settings("gemini", change.text, CMD["gemini"]).outcome == "already"
    back = edit_settings("gemini", change.text, CMD["gemini"], uninstall=True)
    assert comments_of(back.text) == comments_of(original)
    from reconciler.config.jsonc import blanked as _blank, comment_spans as _comments

    assert json.loads(_blank(back.text, _comments(back.text))) == json.loads(_blank(original, _comments(original)))


def test_gemini_notes_a_setting_that_keeps_the_hook_off():
    change = edit_settings("gemini", '{"hooksConfig": {"enabled": false}}', CMD["gemini"])
    assert change.note == 'but "hooksConfig.enabled": false in this file turns every hook off'
    change = edit_settings("claude", '{"disableAllHooks": true}', CMD["claude"])
    assert change.note == 'but "disableAllHooks": true in this file turns every hook off'


# ---------------------------------------------------------------- Codex: config.toml and trust


CODEX_CONFIG = """# my codex config
model = "o3"  # the model I like

[projects."/home/me/src/app"]
trust_level = "trusted"  # yes

# hooks I trusted in the TUI
[hooks.state."/elsewhere/hooks.json:pre_tool_use:0:0"]
trusted_hash = "sha256:abc"

[tui]
notifications = true
"""


def test_codex_config_comments_and_keys_are_kept(home):
    (home / ".codex").mkdir()
    config = home / ".codex" / "config.toml"
    config.write_text(CODEX_CONFIG)
    os.chmod(config, 0o640)
    code, lines = run("codex")
    assert code == 0, lines
    text = config.read_text()
    for line in CODEX_CONFIG.splitlines():
        assert line in text
    data = tomllib.loads(text)
    want = tomllib.loads(CODEX_CONFIG)
    want["hooks"]["state"][trust(f"{home}/.codex/hooks.json")] = {"trusted_hash": GATE_HASH}
    want["hooks"]["state"][trust(f"{home}/.codex/hooks.json", "session_start")] = {"trusted_hash": SESSION_HASH}
    want["hooks"]["state"][trust(f"{home}/.codex/hooks.json", "post_tool_use")] = {"trusted_hash": POST_HASH}
    assert data == want
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    code, lines = run("codex", uninstall=True)
    assert code == 0 and config.read_text() == CODEX_CONFIG


def test_codex_trust_moves_with_the_groups_after_a_removed_one():
    path = "/h/.codex/hooks.json"
    ours = hook_hash("pre_tool_use", "Bash", CMD["codex"], 30)
    config = (f'[hooks.state."{path}:pre_tool_use:0:0"]\ntrusted_hash = "sha256:A"\n\n'
              f'[hooks.state."{path}:pre_tool_use:1:0"]\ntrusted_hash = "{ours}"\n\n'
              f'[hooks.state."{path}:pre_tool_use:2:0"]\ntrusted_hash = "sha256:B"\n\n'
              f'[hooks.state."{path}:pre_tool_use:2:1"]\ntrusted_hash = "sha256:B1"\n\n'
              f'[hooks.state."/other/hooks.json:pre_tool_use:2:0"]\ntrusted_hash = "sha256:O"\n')
    new = codex_trust(config, path, {}, (1,))
    assert tomllib.loads(new)["hooks"]["state"] == {
        f"{path}:pre_tool_use:0:0": {"trusted_hash": "sha256:A"},
        f"{path}:pre_tool_use:1:0": {"trusted_hash": "sha256:B"},
        f"{path}:pre_tool_use:1:1": {"trusted_hash": "sha256:B1"},
        "/other/hooks.json:pre_tool_use:2:0": {"trusted_hash": "sha256:O"},
    }


def test_codex_trust_moves_only_the_keys_of_its_own_event():
    path = "/h/.codex/hooks.json"
    config = (f'[hooks.state."{path}:pre_tool_use:1:0"]\ntrusted_hash = "sha256:P"\n\n'
              f'[hooks.state."{path}:session_start:0:0"]\ntrusted_hash = "sha256:S0"\n\n'
              f'[hooks.state."{path}:session_start:1:0"]\ntrusted_hash = "sha256:S1"\n')
    new = codex_trust(config, path, {}, (0,), label="session_start")
    assert tomllib.loads(new)["hooks"]["state"] == {f"{path}:pre_tool_use:1:0": {"trusted_hash": "sha256:P"},
                                                    f"{path}:session_start:0:0": {"trusted_hash": "sha256:S1"}}
    new = codex_trust(config, path, {2: "sha256:N"}, label="session_start")
    assert tomllib.loads(new)["hooks"]["state"][f"{path}:session_start:2:0"] == {"trusted_hash": "sha256:N"}
    assert codex_trust(config, path, {}, ()) == config


def test_codex_session_start_trust_follows_the_groups_on_install_and_uninstall(home):
    """The user's own SessionStart group before ours and one after it: ours is trusted at its position,
    and after uninstall the later group's trust moves down one (the gate's keys on their own)."""
    codex = home / ".codex"
    codex.mkdir()
    hooks_json = codex / "hooks.json"
    first = {"hooks": [{"type": "command", "command": "first", "timeout": 5}]}
    last = {"matcher": "resume", "hooks": [{"type": "command", "command": "last"}]}
    hash_first, hash_last = hook_hash("session_start", None, "first", 5), hook_hash("session_start", "resume", "last")
    hooks_json.write_text(json.dumps({"hooks": {"SessionStart": [first]}}, indent=2) + "\n")
    (codex / "config.toml").write_text(f'[hooks.state."{trust(hooks_json, "session_start")}"]\n'
                                       f'trusted_hash = "{hash_first}"\n')
    assert run("codex")[0] == 0
    state = tomllib.loads((codex / "config.toml").read_text())["hooks"]["state"]
    assert state == {trust(hooks_json, "session_start"): {"trusted_hash": hash_first},
                     trust(hooks_json, "session_start", 1): {"trusted_hash": SESSION_HASH},
                     trust(hooks_json): {"trusted_hash": GATE_HASH},
                     trust(hooks_json, "post_tool_use"): {"trusted_hash": POST_HASH}}
    data = json.loads(hooks_json.read_text())
    assert data["hooks"]["SessionStart"] == [first, entry("codex", CMD["codex"], "SessionStart")]
    data["hooks"]["SessionStart"].append(last)
    hooks_json.write_text(json.dumps(data, indent=2))
    with open(codex / "config.toml", "a") as f:
        f.write(f'\n[hooks.state."{trust(hooks_json, "session_start", 2)}"]\ntrusted_hash = "{hash_last}"\n')
    assert installed("codex") is True
    code, lines = run("codex", uninstall=True)
    assert code == 0, lines
    assert json.loads(hooks_json.read_text()) == {"hooks": {"SessionStart": [first, last]}}
    assert tomllib.loads((codex / "config.toml").read_text())["hooks"]["state"] == {
        trust(hooks_json, "session_start"): {"trusted_hash": hash_first},
        trust(hooks_json, "session_start", 1): {"trusted_hash": hash_last}}


def test_codex_uninstall_from_the_middle_rekeys_the_later_groups_trust(home):
    codex = home / ".codex"
    codex.mkdir()
    hooks_json = codex / "hooks.json"
    a = {"matcher": "Read", "hooks": [{"type": "command", "command": "a", "timeout": 5}]}
    b = {"matcher": "Bash", "hooks": [{"type": "command", "command": "b", "timeout": 7}]}
    hooks_json.write_text(json.dumps({"hooks": {"PreToolUse": [a]}}, indent=2) + "\n")
    hash_a = hook_hash("pre_tool_use", "Read", "a", 5)
    hash_b = hook_hash("pre_tool_use", "Bash", "b", 7)
    (codex / "config.toml").write_text(f'[hooks.state."{hooks_json}:pre_tool_use:0:0"]\ntrusted_hash = "{hash_a}"\n')
    assert run("codex")[0] == 0
    data = json.loads(hooks_json.read_text())
    data["hooks"]["PreToolUse"].append(b)  # the user adds one after ours, and trusts it
    hooks_json.write_text(json.dumps(data, indent=2))
    with open(codex / "config.toml", "a") as f:
        f.write(f'\n[hooks.state."{hooks_json}:pre_tool_use:2:0"]\ntrusted_hash = "{hash_b}"\n')
    assert installed("codex") is True
    code, lines = run("codex", uninstall=True)
    assert code == 0, lines
    assert json.loads(hooks_json.read_text())["hooks"]["PreToolUse"] == [a, b]
    assert tomllib.loads((codex / "config.toml").read_text())["hooks"]["state"] == {
        f"{hooks_json}:pre_tool_use:0:0": {"trusted_hash": hash_a},
        f"{hooks_json}:pre_tool_use:1:0": {"trusted_hash": hash_b},
    }


def test_codex_trust_is_written_again_where_it_went_missing(home):
    run("codex")
    config = home / ".codex" / "config.toml"
    config.write_text('model = "o3"\n')
    assert installed("codex") is False  # an untrusted hook never runs
    code, lines = run("codex")
    assert code == 0
    assert lines == [f"codex: already installed in {home}/.codex/hooks.json ({WHAT['codex']} -> "
                     f"{CMD['codex']}); trusted in {config}"]
    assert installed("codex") is True
    assert len(tomllib.loads(config.read_text())["hooks"]["state"]) == 3


def test_codex_trust_follows_a_new_res_path(home):
    run("codex", res="/old/res")
    code, lines = run("codex")
    assert code == 0 and lines[0].startswith(f"codex: updated in {home}/.codex/hooks.json ({WHAT['codex']} "
                                             f"-> {CMD['codex']}; was /old/res hook --agent codex); trusted in")
    state = tomllib.loads((home / ".codex" / "config.toml").read_text())["hooks"]["state"]
    assert state == {trust(f"{home}/.codex/hooks.json"): {"trusted_hash": GATE_HASH},
                     trust(f"{home}/.codex/hooks.json", "session_start"): {"trusted_hash": SESSION_HASH},
                     trust(f"{home}/.codex/hooks.json", "post_tool_use"): {"trusted_hash": POST_HASH}}
    assert json.loads((home / ".codex" / "hooks.json").read_text()) == {"hooks": both("codex")}


def test_codex_home_is_named_as_codex_resolves_it(home, tmp_path, monkeypatch):
    real = tmp_path / "real-codex"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "link"))
    code, lines = run("codex")
    assert code == 0
    assert (real / "hooks.json").exists()
    state = tomllib.loads((real / "config.toml").read_text())["hooks"]["state"]
    assert list(state) == [trust(f"{real}/hooks.json"), trust(f"{real}/hooks.json", "session_start"),
                           trust(f"{real}/hooks.json", "post_tool_use")]  # canonical


def test_codex_config_with_inline_hooks_keeps_them(home):
    (home / ".codex").mkdir()
    config = home / ".codex" / "config.toml"
    original = ('[[hooks.PreToolUse]]\nmatcher = "Read"\n[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = "x"\n\n'
                '[hooks.state."/x:pre_tool_use:0:0"]\ntrusted_hash = "sha256:x"\n')
    config.write_text(original)
    assert run("codex")[0] == 0
    data = tomllib.loads(config.read_text())
    assert data["hooks"]["PreToolUse"] == tomllib.loads(original)["hooks"]["PreToolUse"]
    assert len(data["hooks"]["state"]) == 4
    assert run("codex", uninstall=True)[0] == 0
    assert tomllib.loads(config.read_text()) == tomllib.loads(original)


# ---------------------------------------------------------------- where the files are


def test_the_variables_that_move_each_clis_files(home, tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "gh"))
    assert settings_path("claude", "user", os.environ) == str(tmp_path / "cc" / "settings.json")
    assert settings_path("codex", "user", os.environ) == str(tmp_path / "cx" / "hooks.json")
    assert settings_path("gemini", "user", os.environ) == str(tmp_path / "gh" / ".gemini" / "settings.json")
    code, lines = run()
    assert code == 0
    assert (tmp_path / "cc" / "settings.json").exists() and (tmp_path / "cx" / "config.toml").exists()
    assert (tmp_path / "gh" / ".gemini" / "settings.json").exists()
    assert not (home / ".claude").exists() and not (home / ".codex").exists()


def test_project_scope_writes_into_the_checkouts_root(home, tmp_path):
    root = tmp_path / "work"
    (root / ".git").mkdir()
    (root / "src" / "deep").mkdir(parents=True)
    code, lines = run(scope="project", cwd=str(root / "src" / "deep"))
    assert code == 0, lines
    for cli, rel in (("claude", ".claude/settings.json"), ("codex", ".codex/hooks.json"),
                     ("gemini", ".gemini/settings.json")):
        assert json.loads((root / rel).read_text()) == {"hooks": both(cli)}
    assert lines[0] == f"claude: installed in {root}/.claude/settings.json ({WHAT['claude']} -> {CMD['claude']})"
    assert lines[2] == (f"codex: note: Codex reads {root}/.codex/hooks.json only in a trusted project (say yes when codex "
                        f'asks, or set [projects."{root}"] trust_level = "trusted" in {home}/.codex/config.toml)')
    assert lines[4] == f"gemini: note: Gemini CLI reads {root}/.gemini/settings.json only when started in {root}, in a trusted folder"
    state = tomllib.loads((home / ".codex" / "config.toml").read_text())["hooks"]["state"]
    assert list(state) == [trust(f"{root}/.codex/hooks.json"),  # the hook's trust is the user's to keep
                           trust(f"{root}/.codex/hooks.json", "session_start"),
                           trust(f"{root}/.codex/hooks.json", "post_tool_use")]
    assert installed("claude", "project", cwd=str(root)) is True and installed("claude") is False
    assert lines[5] == (f"opencode: installed in {root}/.opencode/plugins/res-gate.js (tool.execute.before bash, "
                        f"tool.execute.after bash -> {RES} hook --agent opencode)")
    assert lines[6] == (f"copilot: installed in {root}/.github/hooks/res.json (preToolUse, postToolUse -> "
                        f"{RES} hook --agent copilot)")
    code, lines = run(scope="project", uninstall=True, cwd=str(root))
    assert code == 0 and len(lines) == 5
    assert lines[3] == f"opencode: removed {root}/.opencode/plugins/res-gate.js"
    assert lines[4] == f"copilot: removed {root}/.github/hooks/res.json"
    assert not (root / ".github" / "hooks" / "res.json").exists()
    assert not (root / ".opencode" / "plugins" / "res-gate.js").exists()
    assert tomllib.loads((home / ".codex" / "config.toml").read_text()) == {}


def test_project_scope_outside_a_checkout_is_the_directory_itself(home, tmp_path):
    here = tmp_path / "plain"
    here.mkdir()
    assert settings_path("claude", "project", os.environ, str(here)) == str(here / ".claude" / "settings.json")


def test_no_project_note_when_codex_already_trusts_the_project(home, tmp_path):
    root = tmp_path / "work"
    (root / ".git").mkdir()
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(f'[projects."{root}"]\ntrust_level = "trusted"\n')
    code, lines = run("codex", scope="project", cwd=str(root))
    assert code == 0 and len(lines) == 1


# ---------------------------------------------------------------- writing


def test_no_temp_file_is_left_and_directories_are_private(home):
    run()
    for d in (home / ".claude", home / ".codex", home / ".gemini"):
        assert sorted(os.listdir(d)) in (["settings.json"], ["config.toml", "hooks.json"])
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_an_existing_directory_keeps_its_mode(home):
    (home / ".claude").mkdir(mode=0o755)
    os.chmod(home / ".claude", 0o755)
    run("claude")
    assert stat.S_IMODE((home / ".claude").stat().st_mode) == 0o755


def test_installed_says_none_for_an_unreadable_file(home):
    p = paths(home)["gemini"]
    p.parent.mkdir()
    p.mkdir()  # a directory where the file should be
    assert installed("gemini") is None
    assert installed("claude") is False


def test_a_failed_write_leaves_the_old_file_whole_and_no_temp_file(home, monkeypatch):
    p = paths(home)["claude"]
    p.parent.mkdir()
    p.write_text(CLAUDE_SETTINGS)

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(p))

    monkeypatch.setattr(os, "replace", full)
    code, lines = run("claude")
    assert code == 1 and lines == [f"res: claude: {p}: No space left on device"]
    assert p.read_text() == CLAUDE_SETTINGS and os.listdir(p.parent) == ["settings.json"]


def test_a_relative_res_path_is_made_absolute(home):
    code, lines = install("claude", res="bin/res")
    assert code == 0 and f"-> {os.getcwd()}/bin/res hook --agent claude" in lines[0]
    assert installed("claude") is True


def test_a_setting_that_turns_hooks_off_is_said_on_the_line(home):
    p = paths(home)["claude"]
    p.parent.mkdir()
    p.write_text('{"disableAllHooks": true}\n')
    code, lines = run("claude")
    assert code == 0 and lines[0].endswith('; but "disableAllHooks": true in this file turns every hook off')


def test_installed_says_none_for_a_broken_codex_config(home):
    run("codex")
    (home / ".codex" / "config.toml").write_text("[[[")
    assert installed("codex") is None
