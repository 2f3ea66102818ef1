"""`res hook install --agent opencode`: the plugin file where OpenCode looks (OPENCODE_CONFIG_DIR,
XDG_CONFIG_HOME, ~/.config/opencode; a project's .opencode/), removed only while it is what res
wrote; and the rules reader over OpenCode's config files (config/agentsettings.opencode_rules)."""
from __future__ import annotations

import json
import os
import stat

import pytest

from reconciler.commands.hookinstall import install, installed
from reconciler.config.ownhookfiles import opencode_plugin
from reconciler.config.agentsettings import opencode_rules

RES = "/opt/res/bin/res"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for name in ("OPENCODE_CONFIG_DIR", "XDG_CONFIG_HOME", "OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT",
                 "OPENCODE_PERMISSION"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return h


def _run(**kw):
    kw.setdefault("res", RES)
    return install("opencode", **kw)


def test_install_writes_the_plugin_and_uninstall_takes_it_away(home):
    path = home / ".config" / "opencode" / "plugins" / "res-gate.js"
    code, lines = _run()
    assert code == 0 and lines == [f"opencode: installed in {path} (tool.execute.before bash, tool.execute.after bash "
                                   f"-> {RES} hook --agent opencode)"]
    assert path.read_text() == opencode_plugin(RES) and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert installed("opencode") is True
    assert _run()[1][0].startswith("opencode: already installed in ")
    code, lines = _run(res="/usr/local/bin/res")
    assert code == 0 and lines[0].endswith(f"; was {RES} hook --agent opencode)")
    code, lines = _run(uninstall=True)
    assert code == 0 and lines == [f"opencode: removed {path}"] and not path.exists()
    assert installed("opencode") is False
    assert _run(uninstall=True)[1] == [f"opencode: not installed in {path}"]


def test_a_file_res_did_not_write_is_left_as_it_is(home):
    path = home / ".config" / "opencode" / "plugins" / "res-gate.js"
    _run()
    path.write_text(path.read_text() + "// mine\n")
    before = path.read_bytes()
    code, lines = _run(uninstall=True)
    assert code == 0 and "is not the file res wrote" in lines[0] and path.read_bytes() == before
    code, lines = _run()
    assert code == 1 and lines[0].startswith(f"res: opencode: {path}: is not a plugin res wrote") and path.read_bytes() == before


def test_where_opencode_looks(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    _run()
    assert (tmp_path / "xdg" / "opencode" / "plugins" / "res-gate.js").exists()
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(tmp_path / "oc"))
    _run()
    assert (tmp_path / "oc" / "plugins" / "res-gate.js").exists()
    root = tmp_path / "work"
    (root / ".git").mkdir()
    (root / "sub").mkdir()
    _run(scope="project", cwd=str(root / "sub"))
    assert (root / ".opencode" / "plugins" / "res-gate.js").exists()


def _write(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_the_rules_in_force_from_every_source_in_order(home, tmp_path):
    env = {"HOME": str(home)}
    proj = tmp_path / "work"
    (proj / ".git").mkdir()
    assert opencode_rules(str(proj), env, []).ordered == (("*", "allow"),)
    _write(home / ".config" / "opencode" / "opencode.json", {"permission": {"bash": {"*": "ask"}}})
    _write(proj / "opencode.json", {"permission": {"bash": {"make *": "allow"}}})
    _write(proj / ".opencode" / "opencode.jsonc", {"permission": {"bash": {"rm *": "deny"}}})
    got = opencode_rules(str(proj), {**env, "OPENCODE_PERMISSION": '{"bash": {"git *": "allow"}}'}, [])
    assert got.ordered == (("*", "allow"), ("*", "ask"), ("make *", "allow"), ("rm *", "deny"), ("git *", "allow"))
    assert opencode_rules(str(proj), env, [["opencode", "run", "--auto", "hi"]]).ordered[1] == ("*", "allow")
    _write(proj / "opencode.json", {"agent": {"build": {"permission": {"bash": "ask"}}}})
    assert opencode_rules(str(proj), env, []).ordered == ()  # whose agent runs is not told: nothing is known
    (proj / "opencode.json").write_text("{not json")
    assert opencode_rules(str(proj), env, []).ordered == ()
    os.unlink(proj / "opencode.json")
    (proj / ".opencode" / "agent").mkdir()
    (proj / ".opencode" / "agent" / "review.md").write_text("---\npermission:\n  bash: deny\n---\n")
    assert opencode_rules(str(proj), env, []).ordered == ()
