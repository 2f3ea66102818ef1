"""config/agenthome.py: the one resolver of each agent CLI's user directory, in its two forms (file
tier: a temporary HOME and a symlink). `config_dir` is the path as the CLI is given it (the gate's rules
reader and `res run`'s model reader read files under it); `named_config_dir` is the one `res hook
install` writes and names: made absolute, and for Codex, whose trust keys name files by the path
Codex computes, $CODEX_HOME with its links resolved (its default ~/.codex as it is)."""
from __future__ import annotations

import os

from reconciler.config.agenthome import config_dir, named_config_dir, settings_path, user_home


def test_each_cli_defaults_under_home(tmp_path):
    env = {"HOME": str(tmp_path)}
    assert [config_dir(cli, env) for cli in ("claude", "codex", "gemini")] == \
        [f"{tmp_path}/.claude", f"{tmp_path}/.codex", f"{tmp_path}/.gemini"]
    assert [named_config_dir(cli, env) for cli in ("claude", "codex", "gemini")] == \
        [f"{tmp_path}/.claude", f"{tmp_path}/.codex", f"{tmp_path}/.gemini"]
    assert user_home({}) == os.path.expanduser("~")


def test_each_variable_moves_its_cli_and_an_empty_one_does_not(tmp_path):
    env = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": "/cc", "CODEX_HOME": "/cx", "GEMINI_CLI_HOME": "/gh"}
    assert [config_dir(cli, env) for cli in ("claude", "codex", "gemini")] == ["/cc", "/cx", "/gh/.gemini"]
    empty = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": "", "GEMINI_CLI_HOME": ""}
    assert config_dir("gemini", empty) == f"{tmp_path}/.gemini" and config_dir("codex", empty) == f"{tmp_path}/.codex"


def test_read_as_given_named_absolute_and_codex_home_by_its_real_path(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    env = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": "link", "CODEX_HOME": "link", "GEMINI_CLI_HOME": "link"}
    assert [config_dir(cli, env) for cli in ("claude", "codex", "gemini")] == ["link", "link", "link/.gemini"]
    assert named_config_dir("claude", env) == f"{tmp_path}/link"  # absolute, the link kept
    assert named_config_dir("gemini", env) == f"{tmp_path}/link/.gemini"
    assert named_config_dir("codex", env) == str(real)  # as Codex canonicalizes CODEX_HOME
    assert settings_path("codex", "user", env) == f"{real}/hooks.json"
    assert settings_path("claude", "user", env) == f"{tmp_path}/link/settings.json"
    assert settings_path("gemini", "user", env) == f"{tmp_path}/link/.gemini/settings.json"


def test_codexs_default_is_not_resolved(tmp_path):
    """Codex canonicalizes CODEX_HOME only; ~/.codex as a link keeps its own path in the trust keys."""
    (tmp_path / "dot").mkdir()
    (tmp_path / ".codex").symlink_to(tmp_path / "dot")
    assert named_config_dir("codex", {"HOME": str(tmp_path)}) == f"{tmp_path}/.codex"
