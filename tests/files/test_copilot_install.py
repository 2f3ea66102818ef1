"""`res hook install --agent copilot`: res's hooks file where GitHub Copilot CLI reads hooks
($COPILOT_HOME/hooks/res.json, else ~/.copilot/hooks/res.json; a project's .github/hooks/res.json),
another file there left alone, and the file removed only while it is byte for byte what res wrote."""
from __future__ import annotations

import stat

import pytest

from reconciler.commands.hookinstall import install, installed
from reconciler.config.ownhookfiles import copilot_hooks
from tests.clihelp import file_tree

RES = "/opt/res/bin/res"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("COPILOT_HOME", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return h


def _run(**kw):
    kw.setdefault("res", RES)
    return install("copilot", **kw)


def test_install_writes_the_hooks_file_and_uninstall_restores_the_directory(home):
    hooks = home / ".copilot" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "mine.json").write_text('{"version": 1, "hooks": {"sessionStart": []}}\n')
    before = file_tree(home)
    path = hooks / "res.json"
    code, lines = _run()
    assert code == 0 and lines == [f"copilot: installed in {path} (preToolUse, postToolUse -> {RES} hook --agent copilot)"]
    assert path.read_text() == copilot_hooks(RES) and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert installed("copilot") is True
    assert _run()[1][0].startswith("copilot: already installed in ")
    code, lines = _run(res="/usr/local/bin/res")
    assert code == 0 and lines[0].endswith(f"; was {RES} hook --agent copilot)")
    code, lines = _run(uninstall=True)
    assert code == 0 and lines == [f"copilot: removed {path}"]
    assert file_tree(home) == before and installed("copilot") is False
    assert _run(uninstall=True)[1] == [f"copilot: not installed in {path}"]


def test_copilot_home_and_the_project(home, tmp_path, monkeypatch):
    elsewhere = tmp_path / "cphome"
    monkeypatch.setenv("COPILOT_HOME", str(elsewhere))
    assert _run()[0] == 0 and (elsewhere / "hooks" / "res.json").read_text() == copilot_hooks(RES)
    assert not (home / ".copilot").exists()
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    code, lines = _run(scope="project", cwd=str(root / "src"))
    assert code == 0 and (root / ".github" / "hooks" / "res.json").read_text() == copilot_hooks(RES), lines
    assert installed("copilot", "project", cwd=str(root)) is True
    assert _run(scope="project", uninstall=True, cwd=str(root))[0] == 0
    assert not (root / ".github" / "hooks" / "res.json").exists()


def test_a_file_res_did_not_write_is_left_as_it_is(home):
    path = home / ".copilot" / "hooks" / "res.json"
    _run()
    path.write_text(path.read_text().replace('"timeoutSec": 30', '"timeoutSec": 60'))
    before = path.read_bytes()
    code, lines = _run(uninstall=True)
    assert code == 0 and "is not the file res wrote" in lines[0] and path.read_bytes() == before
    code, lines = _run()
    assert code == 1 and lines[0].startswith(f"res: copilot: {path}: is not a hooks file res wrote")
    assert path.read_bytes() == before and installed("copilot") is False
