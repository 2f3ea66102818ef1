"""The agent CLIs res gates and reads (Claude Code, Codex, Gemini CLI, OpenCode, GitHub Copilot CLI): the
one list of them (CLIS, in the order lists show them), each one's record in its own module,
core/clis/<name>.py (RECORD), beside everything else of that CLI that is not I/O. Everything that
names the CLIs reads this registry: the command line's `--agent` choices (`res hook`, `res run`,
entry.py's dispatch of `res hook`), the gate (core/hooks.py: which CLI an input is from, its call, its
answers; core/hookrules.py: its rules' decision; config/agentsettings.py: the reader of its rules),
`res hook install` and `res doctor`'s gates (where each one's files are, what is written in them), the
processes a note may be owned by (core/agents.agent_name), the session id in a caller's environment
(observed/asker.py), the digest of `res run --agent` and its output's hint (core/digest.py,
core/agents.unread_output), the spend margin (core/spend.py), where a session's model is read
(commands/run.py, apply/attach.py) and where its usage is (config/agentusage.py). Where a CLI's files
are on this machine is resolved in config/agenthome.py, from its record's fields.

A CLI's module is imported when its record is first asked for (`CLIS[name]`): `res hook --agent X`
imports only X's. Its names (`name in CLIS`, iterating) import nothing. What must stay on other floors
is named in the record by the function's or class's name (its digest, rules_reader, model_source,
usage_source). No caller compares a CLI's name. Sources: docs/agent-hooks.md, docs/agent-output.md.

Pure and import-light: nothing but the shapes' package (`res hook` imports this before every agent
shell command).
"""
from __future__ import annotations


# the shapes, re-exported where callers have always found them
from reconciler.core.clis import (GATE_HOOK_TIMEOUT_S, POST_HOOK_TIMEOUT_S, SESSION_HOOK_TIMEOUT_S, AgentCli,  # noqa: F401
                                  HookEntry)



# Each shipped CLI's module (core/clis/<name>.py), imported when first asked, in the order lists show them
def _claude():
    from reconciler.core.clis import claude
    return claude


def _codex():
    from reconciler.core.clis import codex
    return codex


def _gemini():
    from reconciler.core.clis import gemini
    return gemini


def _opencode():
    from reconciler.core.clis import opencode
    return opencode


def _copilot():
    from reconciler.core.clis import copilot
    return copilot


MODULES = {"claude": _claude, "codex": _codex, "gemini": _gemini, "opencode": _opencode, "copilot": _copilot}


class Registry:
    """name -> record: each shipped CLI's RECORD, its module imported when first asked; a test plants
    a CLI (or another record for a shipped one) for the length of the test, and takes it back. A
    mapping's ways that callers use (not collections.abc's class: `res hook` would import it before every
    command)."""

    def __init__(self, modules: dict):
        self._modules = modules
        self._planted: dict[str, AgentCli] = {}

    def __getitem__(self, name: str) -> AgentCli:
        if name in self._planted:
            return self._planted[name]
        return self._modules[name]().RECORD

    def __contains__(self, name: object) -> bool:
        return name in self._planted or name in self._modules

    def __iter__(self):
        yield from self._modules
        yield from (n for n in self._planted if n not in self._modules)

    def __setitem__(self, name: str, record: AgentCli) -> None:
        self._planted[name] = record

    def __delitem__(self, name: str) -> None:
        del self._planted[name]  # (a shipped CLI's own record is back)

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def keys(self):  # (dict(CLIS) reads it)
        return list(self)

    def items(self):
        return [(n, self[n]) for n in self]

    def update(self, records: dict) -> None:
        for name, record in records.items():
            self[name] = record


# The registry. Read it when it is needed, never copied at import time (a test plants a CLI in it).
CLIS = Registry(MODULES)


def behaviour(name: str):
    """The module of a registered CLI's behaviour (core/clis/), imported now if it was not yet: a shipped
    CLI's own module, a planted one's as its record's `behaviour` says."""
    found = CLIS[name].behaviour
    return found() if found is not None else MODULES[name]()
