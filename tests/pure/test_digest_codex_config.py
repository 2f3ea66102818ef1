"""What res reads of a Codex session's configuration at `res run` (core/agents.py: the rules;
config/agentmodel.py: the files): the model it runs, the CLI's version, a resumed thread's usage so far.
The rules' expectations are what the real CLIs did (tests/agentcli/test_codex_cli.py and the measured
releases named in core/agents.py); the files here are built in a temporary directory."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.config.agentmodel import codex_session, codex_version, last_total
from reconciler.core.agents import codex_call, codex_default_model, codex_model


@pytest.mark.parametrize("version, model", [
    ("0.120.0", "gpt-5.3-codex"), ("0.125.0", None), ("0.130.0", "gpt-5.5"), ("0.142.5", "gpt-5.5"),
    ("0.143.0", "gpt-5.5"), ("0.144.0", "gpt-5.6-sol"), ("0.152.0", "gpt-5.6-sol"), ("0.153.3", "gpt-5.6-sol"),
    ("0.153.4", "gpt-6-astra"), ("0.157.0", "gpt-6-astra"), ("0.159.0", "gpt-6-astra"), ("0.159.1", "gpt-6.1-sol"),
    ("0.166.0", "gpt-6.1-sol"), ("0.171.0", "gpt-6.2-sol"), ("0.172.0", None), ("0.100.0", None), (None, None),
    ("garbage", None), ("0.171.0-linux-x64", "gpt-6.2-sol"),
])
def test_the_default_model_of_each_release(version, model):
    assert codex_default_model(version) == model


@pytest.mark.parametrize("cmd, want", [
    (["/usr/bin/codex", "exec", "--json", "-m", "gpt-5-mini", "fix it"], dict(model="gpt-5-mini", subcommand="exec")),
    (["codex", "exec", "--model=o4-mini", "x"], dict(model="o4-mini")),
    (["codex", "exec", "-mgpt-5.5", "x"], dict(model="gpt-5.5")),
    (["codex", "-c", 'model="gpt-6-sol"', "exec", "x"], dict(config_model="gpt-6-sol")),
    (["codex", "exec", "--config", "model = 'gpt-6-sol'", "x"], dict(config_model="gpt-6-sol")),
    (["codex", "exec", "--config=model=gpt-6-sol", "-c", "model=gpt-6-luna", "x"], dict(config_model="gpt-6-luna")),
    (["codex", "exec", "-c", "profile=fast", "x"], dict(config_profile="fast")),
    (["codex", "exec", "-p", "fast", "-C", "sub", "x"], dict(profile="fast", cd="sub")),
    (["codex", "exec", "--json", "resume", "01a0-xx", "again"], dict(subcommand="resume", session="01a0-xx")),
    (["codex", "exec", "resume", "--last", "again"], dict(subcommand="resume", session=None, last=True)),
    (["codex", "e", "fork", "01a0-yy", "--json"], dict(subcommand="fork", session="01a0-yy")),
    (["node", "/x/@openai/codex/bin/codex.js", "exec", "-m", "m1"], dict(index=1, model="m1")),
    (["npx", "@openai/codex@0.171.0", "exec", "-m", "m1"], dict(index=1, model="m1")),
    (["codex", "exec", "--ignore-user-config", "--trust", "--ephemeral", "--oss", "x"],
     dict(ignore_user_config=True, trust=True, ephemeral=True, oss=True)),
    (["codex", "exec", "--", "-m", "not an option"], dict(model=None)),
])
def test_what_a_codex_command_line_says(cmd, want):
    call = codex_call(cmd)
    assert call is not None
    for k, v in want.items():
        assert getattr(call, k) == v, (k, getattr(call, k))


def test_a_command_that_is_no_codex_says_nothing():
    assert codex_call(["bash", "-c", "codex exec x"]) is None
    assert codex_call(["claude", "-p", "x"]) is None


USER = {"model": "m-top", "profiles": {"p": {"model": "m-legacy"}}}


@pytest.mark.parametrize("cmd, version, user, profile, project, want", [
    (["codex", "exec", "x"], "0.171.0", {"model": "m-top"}, None, None, ("m-top", "config.toml")),
    (["codex", "exec", "-m", "m-flag", "-c", "model=m-cli"], "0.171.0", {"model": "m-top"}, None, None, ("m-flag", "-m")),
    (["codex", "exec", "-c", "model=m-cli"], "0.171.0", {"model": "m-top"}, None, {"model": "m-proj"}, ("m-cli", "-c model=")),
    (["codex", "exec", "x"], "0.171.0", {"model": "m-top"}, None, {"model": "m-proj"},
     ("m-proj", "the project's .codex/config.toml")),
    (["codex", "exec", "--profile", "p", "x"], "0.171.0", {"model": "m-top"}, {"model": "m-prof"}, {"model": "m-proj"},
     ("m-proj", "the project's .codex/config.toml")),
    (["codex", "exec", "--profile", "p", "x"], "0.171.0", {"model": "m-top"}, {"model": "m-prof"}, None,
     ("m-prof", "profile p (p.config.toml)")),
    (["codex", "exec", "--profile", "p", "-c", "model=m-cli"], "0.152.0", {"model": "m-top"}, {"model": "m-prof"}, None,
     ("m-cli", "-c model=")),
    (["codex", "exec", "--profile", "p", "x"], "0.171.0", {"model": "m-top"}, {"effort": "low"}, None,
     ("m-top", "config.toml")),
    # up to 0.130 a legacy [profiles.P] table names the model, ahead of -c model=
    (["codex", "exec", "--profile", "p", "-c", "model=m-cli"], "0.130.0", USER, None, None,
     ("m-legacy", "[profiles.p] in config.toml")),
    (["codex", "exec", "-c", "profile=p"], "0.120.0", USER, None, None, ("m-legacy", "[profiles.p] in config.toml")),
    (["codex", "exec", "x"], "0.120.0", dict(USER, profile="p"), None, None, ("m-legacy", "[profiles.p] in config.toml")),
    (["codex", "exec", "x"], "0.171.0", None, None, None, ("gpt-6.2-sol", "codex 0.171.0's default")),
    (["codex", "exec", "x"], "0.158.0", {}, None, None, ("gpt-6-astra", "codex 0.158.0's default")),
    (["codex", "exec", "x"], "0.172.0", {}, None, None,
     (None, "no model named, and codex 0.172.0's default model is not known to res (give -m)")),
    (["codex", "exec", "x"], None, {}, None, None,
     (None, "no model named, and the Codex CLI's version is not known (give -m)")),
    (["codex", "exec", "-m", "bad model id", "x"], "0.171.0", {}, None, None,
     (None, "-m names no model id res can price ('bad model id')")),
])
def test_which_model_a_codex_session_runs(cmd, version, user, profile, project, want):
    assert codex_model(codex_call(cmd), version, user, profile, project) == want


# ---------------------------------------------------------------- the files


def fake_cli(root: Path, version: str) -> Path:
    """An npm install of @openai/codex as npm lays it out: .bin/codex -> ../@openai/codex/bin/codex.js."""
    pkg = root / "node_modules" / "@openai" / "codex"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": version}))
    (pkg / "bin" / "codex.js").write_text("#!/usr/bin/env node\n")
    (pkg / "bin" / "codex.js").chmod(0o755)
    (root / "node_modules" / ".bin").mkdir()
    os.symlink("../@openai/codex/bin/codex.js", root / "node_modules" / ".bin" / "codex")
    native = root / "node_modules" / "@openai" / "codex-linux-x64"
    (native / "vendor" / "x86_64-unknown-linux-musl" / "bin").mkdir(parents=True)
    (native / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": f"{version}-linux-x64"}))
    (native / "vendor" / "x86_64-unknown-linux-musl" / "bin" / "codex").write_text("")
    return root / "node_modules" / ".bin" / "codex"


def rollout(home: Path, thread: str, cwd: str, totals: list[tuple[int, int, int, int]], last_prompt: int) -> Path:
    path = home / "sessions" / "2026" / "12" / "02" / f"rollout-2026-12-02T05-54-33-{thread}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "session_meta", "payload": {"id": thread, "cwd": cwd}}]
    for inp, cached, out, cw in totals:
        lines.append({"type": "event_msg", "payload": {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
                                  "cache_write_input_tokens": cw, "reasoning_output_tokens": 0},
            "last_token_usage": {"input_tokens": last_prompt}}}})
        lines.append({"type": "response_item", "payload": {"type": "message", "content": "x" * 5000}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_the_version_comes_from_the_installed_package(tmp_path):
    program = fake_cli(tmp_path, "0.158.0")
    assert codex_version(str(program), "/", {}) == "0.158.0"
    native = tmp_path / "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
    assert codex_version(str(native), "/", {}) == "0.158.0"
    assert codex_version("codex", "/", {"PATH": str(program.parent)}) == "0.158.0"
    other = tmp_path / "elsewhere" / "codex"
    other.parent.mkdir()
    other.write_text("")
    assert codex_version(str(other), "/", {}) is None


def test_a_session_reads_the_users_config_the_profile_and_a_trusted_project(tmp_path):
    program = fake_cli(tmp_path / "cli", "0.171.0")
    home, work = tmp_path / "home", tmp_path / "repo"
    (home).mkdir()
    (work / ".git").mkdir(parents=True)
    (work / "sub").mkdir()
    env = {"CODEX_HOME": str(home)}
    cmd = [str(program), "exec", "--json", "x"]
    assert codex_session(cmd, str(work), env) == {"model": "gpt-6.2-sol", "model_from": "codex 0.171.0's default",
                                                  "agent_version": "0.171.0"}
    (home / "config.toml").write_text('model = "gpt-5.5"\n')
    assert codex_session(cmd, str(work), env)["model"] == "gpt-5.5"
    assert codex_session(cmd[:2] + ["--ignore-user-config"] + cmd[2:], str(work), env)["model"] == "gpt-6.2-sol"
    (home / "fast.config.toml").write_text('model = "gpt-6-luna"\n')
    assert codex_session(cmd[:2] + ["-p", "fast"] + cmd[2:], str(work), env)["model"] == "gpt-6-luna"
    (work / ".codex").mkdir()
    (work / ".codex" / "config.toml").write_text('model = "gpt-6.2-astra"\n')
    assert codex_session(cmd, str(work / "sub"), env)["model"] == "gpt-5.5"  # not trusted
    assert codex_session(cmd[:2] + ["--trust"] + cmd[2:], str(work / "sub"), env)["model"] == "gpt-6.2-astra"
    (home / "config.toml").write_text(f'model = "gpt-5.5"\n[projects."{work}"]\ntrust_level = "trusted"\n')
    got = codex_session(cmd, str(work / "sub"), env)
    assert (got["model"], got["model_from"]) == ("gpt-6.2-astra", "the project's .codex/config.toml")
    (home / "config.toml").write_text("model = [broken")
    assert codex_session(cmd, str(tmp_path), env)["model"] == "gpt-6.2-sol"  # the CLI would refuse to start
    assert codex_session(["bash", "-c", "codex exec -m gpt-5.5 x"], str(work), env) == {}


def test_a_resumed_or_forked_thread_carries_its_usage_so_far(tmp_path):
    program = fake_cli(tmp_path / "cli", "0.171.0")
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = {"CODEX_HOME": str(home)}
    thread = "01a23551-a63d-7040-baa3-0f9d51dabb6c"
    rollout(home, thread, str(work), [(1000, 200, 30, 0), (4000, 1200, 80, 5)], 3000)
    got = codex_session([str(program), "exec", "--json", "resume", thread, "again"], str(work), env)
    assert (got["usage_before"], got["resumes"]) == ([4000, 1200, 80, 5, 3000], thread)
    got = codex_session([str(program), "exec", "fork", thread, "again"], str(work), env)
    assert got["usage_before"] == [4000, 1200, 80, 5, 3000] and "resumes" not in got
    got = codex_session([str(program), "exec", "resume", "--last", "again"], str(work), env)
    assert got["resumes"] == thread
    got = codex_session([str(program), "exec", "resume", "--last", "again"], str(tmp_path), env)
    assert "resumes" not in got  # --last looks in this directory's threads only
    got = codex_session([str(program), "exec", "resume", "--last", "--all", "again"], str(tmp_path), env)
    assert got["resumes"] == thread
    for missing in ("01a23551-0000-0000-0000-000000000000", "../../etc/passwd", "*"):
        assert "usage_before" not in codex_session([str(program), "exec", "resume", missing], str(work), env)


def test_the_last_total_is_found_from_the_end_of_a_long_rollout(tmp_path):
    path = rollout(tmp_path, "t", "/", [(i * 1000, i * 500, i, 0) for i in range(1, 400)], 777)
    assert path.stat().st_size > 2 * (1 << 20)  # several tail reads
    assert last_total(path) == [399000, 199500, 399, 0, 777]
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"type":"session_meta","payload":{"id":"t"}}\n')
    assert last_total(empty) == [0, 0, 0, 0, 0]
