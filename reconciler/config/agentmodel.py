"""What an agent session will run, read at submit time (`res run --agent codex`) from the files the
agent itself reads: the model (its command line, $CODEX_HOME/config.toml, the profile file, a trusted
project's .codex/config.toml, else the installed CLI's default), the CLI's version (the package.json
beside the program: no subprocess), and for `codex exec resume` / `fork` the thread's usage so far
(its rollout file), so that its cumulative usage counts each invocation once. The rules are pure, in
core/agents.py; this module only reads. Import-light, and it never fails a submit: what it cannot read
it leaves unknown, and the digest then prices conservatively (the dearest rates; a resumed thread's
whole total).

Codex (measured with the real CLIs 0.150.1, 0.152.0, 0.158.0 and 0.171.0 on loopback,
tests/agentcli/test_codex_cli.py): `turn.completed` usage is the thread's running total. `exec resume
<id>` starts from the total its rollout recorded last, and `exec fork <id>` from the forked thread's
(under a new thread id). The rollout, `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`,
records that total on each `event_msg` `token_count` line (`payload.info.total_token_usage`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from reconciler.config.agenthome import config_dir
from reconciler.config.files import FileProblem, read_regular
from reconciler.core.agents import MODEL_ID, VERSION, CodexCall, codex_call, codex_model

CONFIG_LIMIT = 1 << 20
PACKAGE_LIMIT = 64 << 10
ROLLOUT_TAIL = 1 << 20  # read from a rollout's end at a time
ROLLOUT_READ_MAX = 64 << 20  # never more of one rollout than this
ROLLOUTS_CHECKED = 64  # resume --last: the most recent rollouts looked at for the working directory
FIELD_MAX = 200


def codex_session(cmd: list[str], cwd: str, env: dict[str, str]) -> dict[str, Any]:
    """The Request fields of a `res run --agent codex` session: model and model_from (where the
    model comes from, or why none is known), agent_version, and for a resumed or forked thread
    usage_before ([input, cached input, output, cache-write input] so far, and the last request's
    prompt) and resumes (the thread
    id it applies to; absent for a fork, which starts a new thread from that total). Empty for a
    command that is no Codex command res can read."""
    call = codex_call(cmd)
    if call is None:
        return {}
    home = Path(config_dir("codex", env))
    version = codex_version(cmd[call.index], cwd, env)
    user = None if call.ignore_user_config else _toml(home / "config.toml")
    profile = None
    if call.profile and _plain_name(call.profile):
        profile = _toml(home / f"{call.profile}.config.toml")
    work = os.path.normpath(os.path.join(cwd, call.cd)) if call.cd else cwd
    project = project_config(work, user or {}, call.trust, home)
    model, where = codex_model(call, version, user, profile, project)
    out: dict[str, Any] = {"model_from": where[:FIELD_MAX]}
    if model is not None:
        out["model"] = model
    if version is not None:
        out["agent_version"] = version
    if call.subcommand in ("resume", "fork"):
        found = rollout_of(home, call, work)
        if found is not None:
            thread, usage = found
            if usage is not None:
                out["usage_before"] = usage
                if call.subcommand == "resume":
                    out["resumes"] = thread
    return out


def codex_version(program: str, cwd: str, env: dict[str, str]) -> str | None:
    """The installed Codex CLI's version, from the package.json of the npm package the program is
    part of (`…/@openai/codex/bin/codex.js`, or the native binary's `codex-package.json` /
    `@openai/codex-<platform>/package.json`); None where there is none (a binary built elsewhere)."""
    path = program if os.path.isabs(program) else _which(program, cwd, env.get("PATH", ""))
    if path is None:
        return None
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return None
    for parent in list(real.parents)[:5]:
        for name in ("codex-package.json", "package.json"):
            data = _json(parent / name)
            if not isinstance(data, dict):
                continue
            if name == "package.json" and not str(data.get("name", "")).startswith("@openai/codex"):
                continue
            v = data.get("version")
            if isinstance(v, str):
                v = v.split("-linux")[0].split("-darwin")[0].split("-win32")[0]
                if VERSION.match(v):
                    return v
    return None


def project_config(work: str, user: dict, trusted_flag: bool, home: Path) -> dict | None:
    """The `.codex/config.toml` Codex reads for a project: the nearest one from `work` up to the
    repository's root (the directory holding .git; `work` alone outside a repository), if the project
    is trusted (`[projects."<dir>"] trust_level = "trusted"` in config.toml for one of those
    directories, or --trust). Codex's own home is never a project's."""
    dirs = []
    d = Path(work)
    for _ in range(64):
        dirs.append(d)
        if (d / ".git").exists() or d.parent == d:
            break
        d = d.parent
    else:
        return None
    if not (d / ".git").exists():
        dirs = dirs[:1]
    projects = user.get("projects") if isinstance(user.get("projects"), dict) else {}
    trusted = trusted_flag or any(
        isinstance(projects.get(str(x)), dict) and projects[str(x)].get("trust_level") == "trusted" for x in dirs)
    if not trusted:
        return None
    for x in dirs:
        cfg = x / ".codex"
        if cfg == home:
            continue
        table = _toml(cfg / "config.toml")
        if table and isinstance(table.get("model"), str):
            return table
    return None


def rollout_of(home: Path, call: CodexCall, work: str) -> tuple[str, list[int] | None] | None:
    """(the thread id, its usage so far) of the thread a resume or fork continues, from its rollout
    file; None where the rollout is not found."""
    sessions = home / "sessions"
    if call.session:
        if not _plain_name(call.session):
            return None
        try:
            found = sorted(sessions.glob(f"*/*/*/rollout-*-{call.session}.jsonl"))
        except OSError:
            return None
        if not found:
            return None
        return call.session, last_total(found[-1])
    if not call.last:
        return None
    try:
        files = sorted(sessions.glob("*/*/*/rollout-*.jsonl"), key=_mtime, reverse=True)[:ROLLOUTS_CHECKED]
    except OSError:
        return None
    for f in files:
        meta = _first_line(f)
        payload = meta.get("payload") if isinstance(meta, dict) else None
        if not isinstance(payload, dict):
            continue
        if not call.all_dirs and payload.get("cwd") != work:
            continue
        thread = payload.get("id") or payload.get("session_id")
        if isinstance(thread, str) and _plain_name(thread):
            return thread, last_total(f)
    return None


def last_total(path: Path) -> list[int] | None:
    """[input, cached input, output, cache-write input, the last request's prompt] of the last
    `token_count` line of a rollout (its `payload.info.total_token_usage`, and `last_token_usage`'s
    input: how big the thread's context is): the thread's usage so far; zeros for a rollout that has
    none; None if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            pos, carry, read = end, b"", 0
            while pos > 0 and read < ROLLOUT_READ_MAX:
                step = min(ROLLOUT_TAIL, pos)
                pos -= step
                f.seek(pos)
                chunk = f.read(step) + carry
                read += step
                lines = chunk.split(b"\n")
                carry = lines[0] if pos > 0 else b""
                for line in reversed(lines[1:] if pos > 0 else lines):
                    if b'"token_count"' in line and b'"total_token_usage"' in line:
                        total = _total(line)
                        if total is not None:
                            return total
            return [0, 0, 0, 0, 0] if pos == 0 else None
    except OSError:
        return None


def _total(line: bytes) -> list[int] | None:
    try:
        ev = json.loads(line)
        info = ev["payload"]["info"]
        t, last = info["total_token_usage"], info.get("last_token_usage") or {}
        counts = [t.get("input_tokens", 0), t.get("cached_input_tokens", 0), t.get("output_tokens", 0),
                  t.get("cache_write_input_tokens", 0), last.get("input_tokens", 0)]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    if all(type(c) is int and 0 <= c <= 10**12 for c in counts):
        return counts
    return None


# ---------------------------------------------------------------- reading


def _toml(path: Path) -> dict | None:
    import tomllib

    try:
        data = read_regular(path, CONFIG_LIMIT)
        return tomllib.loads(data.decode("utf-8")) if data is not None else None
    except (FileProblem, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError, OSError):
        return None


def _json(path: Path) -> Any:
    try:
        data = read_regular(path, PACKAGE_LIMIT)
        return json.loads(data) if data is not None else None
    except (FileProblem, ValueError, RecursionError, OSError):
        return None


def _first_line(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 20)
        return json.loads(line)
    except (OSError, ValueError, RecursionError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _plain_name(name: str) -> bool:
    """A thread id or profile name that is a name, never a path or a glob."""
    return bool(MODEL_ID.match(name)) and not any(c in name for c in "/[]*?") and name not in (".", "..")


def _which(program: str, cwd: str, search_path: str) -> str | None:
    if os.sep in program:
        return os.path.join(cwd, program)
    for d in search_path.split(os.pathsep):
        p = os.path.join(d or cwd, program)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None
