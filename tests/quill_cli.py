"""A made-up fifth agent CLI, Quill, in one module as each real one is (core/clis/): its record and its
behaviour. tests/files/test_fifth_cli.py registers the record in core/agentclis.CLIS for the length of
a test. Quill speaks a protocol of its own: its hook input names the event `quill.before` (tool
`Shell`, the command under `args.cmd`), and it takes `{"run": …}` and `{"refuse": …}` as answers, so
a caller that reads or answers it by any other CLI's code is caught."""
from __future__ import annotations

import sys

from reconciler.core.agentclis import AgentCli, HookEntry

UNSHOWN_CALLS = False
PREFIX_SHOWN = False
TRUST_CONFIG = None


def _me():
    return sys.modules[__name__]


RECORD = AgentCli(
    name="quill", programs=("quill",), package="/quill-cli/", home_var="QUILL_HOME", home_default=".quill",
    home_sub="", home_realpath=False, project_dir=".quill", hooks_file="hooks.json", shell_tools=("Shell",),
    pre_event="quill.before", post_events=("quill.after",),
    entries=(HookEntry("PreToolUse", "Shell", (("type", "command"), ("command", None), ("timeout", 30)), False),
             HookEntry("SessionStart", None, (("type", "command"), ("command", None), ("timeout", 10)), False)),
    session_var="QUILL_SESSION_ID", digest="ClaudeDigest", model_source=None,
    rules_reader="claude_session_rules", behaviour=_me)


def claims(event: dict) -> bool:
    return event.get("event") in ("quill.before", "quill.after")


def hook_event(event: dict) -> dict | None:
    args = event.get("args")
    if not isinstance(args, dict):
        return None
    return {"hook_event_name": event.get("event"), "tool_name": event.get("tool"), "cwd": event.get("cwd"),
            "session_id": event.get("session"), "tool_use_id": event.get("call"),
            "tool_input": dict(args, command=args.get("cmd"))}


def run_dir(tool_input: dict) -> object:
    return tool_input.get("in")


def call_id(event: dict) -> object:
    return event.get("tool_use_id")


def timeout_s(tool_input: dict) -> int | None:
    return tool_input.get("seconds") if type(tool_input.get("seconds")) is int else None


def rewrite_answer(call, command: str, context: str | None, grant: bool) -> dict:
    return {"run": command, "why": context}


def note_answer(call, context: str) -> dict:
    return {"say": context}


def deny_answer(call, reason: str) -> dict:
    return {"refuse": reason}


def decide(mode: str | None, line: str, commands: list[list[str]], rules) -> str | None:
    from reconciler.core.shellrules import REWRITE, guarded

    return None if guarded(commands, rules) else REWRITE  # it runs every line unasked, rewritten or not


def unread_output(cmd: list[str]) -> str | None:
    return None if "--jsonl" in cmd else "quill prints its usage only with --jsonl"


def settings_refusal(command: str, name: str) -> str | None:
    return f"{name}: quill cannot run {command!r} (a '#' in it); nothing written" if "#" in command else None


def disabled_note(data: dict) -> str:
    return 'but "quiet": true in this file turns every hook off' if data.get("quiet") is True else ""


def project_note(path: str, root: str, config: str | None, trusted: bool | None) -> str:
    return f"quill: note: Quill reads {path} only in {root}"
