"""`res status`, asked of the running loop (it has the models loaded and enforces the policy it
shows). HOT PATH: agents poll it. `res status`, `res status --json` and `--all` are answered from
reconciler/entry.py through `quick` with os, json and socket alone, before the command line
(argparse, pathlib, typing) is imported; any other form, and a loop that does not answer, go the
whole way (commands/handlers.cmd_status, which reads state.db here)."""
from __future__ import annotations

import os
import sys

ASK_TIMEOUT_S = 3.0  # a loop this slow to say what it holds is stopped or stuck: read it here instead


class Unanswered(Exception):
    """A loop listens but did not answer in time: read here, without asking it again."""


def ask_loop(sock_path, entry_id: str | None, as_json: bool, all_: bool, timeout: float) -> tuple[str, int, str | None] | None:
    """(line, exit code, problem) as the loop answers, or None when no loop listens. Unanswered when
    one listens and says nothing usable in `timeout`."""
    from reconciler.loop.client import NoDaemon, ask
    from reconciler.loop.protocol import Status

    try:
        answer = ask(sock_path, Status(entry_id, json=as_json, all=all_), timeout=timeout)
    except NoDaemon:
        return None
    except (TimeoutError, OSError, ValueError) as e:
        raise Unanswered(str(e)) from None
    if answer.get("code") == 2 or not isinstance(answer.get("line"), str) or not isinstance(answer.get("code"), int):
        raise Unanswered("a loop from before the status op")  # read here
    problem = answer.get("problem")
    return answer["line"], answer["code"], problem if isinstance(problem, str) else None


def show(line: str, code: int, problem: str | None) -> int:
    """The answer as `res status` prints it: stdout when all is well, stderr otherwise; a problem as
    a line of its own."""
    print(line, file=sys.stderr if code else sys.stdout)
    if problem:
        print(f"res: {problem}", file=sys.stderr)
    return code


def simple_form(args: list[str]) -> tuple[bool, bool] | None:
    """(--json, --all) when `args` (after `status`) is only those flags, each at most once; else None
    (an id, --help, anything else: the whole command line's parser)."""
    if len(set(args)) != len(args) or any(a not in ("--json", "--all") for a in args):
        return None
    return "--json" in args, "--all" in args


def quick(args: list[str], environ=os.environ) -> tuple[int | None, bool]:
    """`res status ARGS` answered by the loop: (exit code, False); (None, asked) when it must go the
    whole way, `asked` True when a loop listened but did not answer (do not ask it again)."""
    form = simple_form(args)
    if form is None:
        return None, False
    from reconciler.config.stateroot import state_root
    from reconciler.loop.client import answer_wait_s

    try:
        timeout = min(ASK_TIMEOUT_S, answer_wait_s(environ))
    except ValueError:
        return None, False  # the whole way says what is wrong with RES_ANSWER_WAIT_S
    try:
        answered = ask_loop(os.path.join(state_root(environ), "serve.sock"), None, *form, timeout=timeout)
    except Unanswered:
        return None, True
    if answered is None:
        return None, False
    return show(*answered), False
