"""Who asks (`by`, `task`, `batch`, `reply_to` of a request): from the flags, the caller's
environment, its process tree and its git checkout. Import-light: `res run` and `res note` call it.

Never a secret: every value passes the environment's filter (config/environ.is_secret, under the
name it came from), so what a person or an agent would not want written down is left out.
"""
from __future__ import annotations

import os
import re

from reconciler.config.environ import is_secret
from reconciler.core.agentclis import CLIS

JOB_ID = re.compile(r"^r-[1-9][0-9]{0,9}$")
MAX_TEXT = 200
MAX_ADDRESS = 500


def _clean(value: str | None, limit: int = MAX_TEXT) -> str | None:
    """One line, at most `limit` characters; None for nothing."""
    if value is None:
        return None
    text = " ".join(value.split())[:limit]
    return text or None


def _public(name: str, value: str | None, limit: int = MAX_TEXT) -> str | None:
    value = _clean(value, limit)
    return None if value is None or is_secret(name, value) else value


def user_name(env: dict[str, str]) -> str | None:
    for name in ("USER", "LOGNAME"):
        if env.get(name):
            return env[name]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return None


SESSION_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")


def agent_of(pid: int, env: dict[str, str]) -> str | None:
    """`claude pid 4121 session 0f3c2a1b`: the nearest agent CLI among `pid` and its ancestors (its
    session's id, shortened, when the environment has that agent's: its session_var), or None."""
    from reconciler.observed.procs import nearest_agent

    found = nearest_agent(pid)
    if found is None:
        return None
    agent_pid, agent = found
    var = CLIS[agent].session_var if agent in CLIS else None
    session = env.get(var, "") if var else ""
    return f"{agent} pid {agent_pid}" + (f" session {session[:8]}" if SESSION_ID.match(session) else "")


def asker(env: dict[str, str], pid: int, repo: tuple[str, str] | None, by: str | None = None,
          task: str | None = None) -> dict:
    """The request's `by`, `task`, `batch`, `reply_to` (keys with None left out). `by` and `task`
    given as flags win (ValueError when one looks like a secret); else RES_BY / RES_TASK; else the
    agent in the process tree (or the user) and the git branch of `repo` (config/gitrepo.checkout of
    the caller's cwd). `batch`: RES_ID, set in
    every job's environment, when a job's command asks. `reply_to`: RES_REPLY_TO."""
    out: dict[str, str | None] = {}
    for flag, value in (("--by", by), ("--task", task)):
        if value is not None and is_secret(flag[2:].upper(), value):
            raise ValueError(f"{flag} looks like a secret (a key, a token, a URL with a password); res never writes those down")
    out["by"] = _clean(by) or _public("RES_BY", env.get("RES_BY")) or agent_of(pid, env) or _public("USER", user_name(env))
    out["task"] = _clean(task) or _public("RES_TASK", env.get("RES_TASK"))
    if out["task"] is None:
        from reconciler.config.gitrepo import branch_in

        out["task"] = _public("branch", branch_in(repo))
    batch = env.get("RES_ID", "")
    out["batch"] = batch if JOB_ID.match(batch) else None
    out["reply_to"] = _public("RES_REPLY_TO", env.get("RES_REPLY_TO"), MAX_ADDRESS)
    return {k: v for k, v in out.items() if v is not None}
