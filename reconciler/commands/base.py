"""What every command of the command line shares: the one-line failure, the policy, a pass run here
when no loop answers, and how lines are printed. Import-light: the hot path (`res run`) starts here."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Awaitable, Callable

from reconciler.config.paths import Paths

if TYPE_CHECKING:
    from typing import TypeVar

    from reconciler.ops.engine import Engine

    T = TypeVar("T")


class Fail(Exception):
    """Exit with this code after printing this one line."""

    def __init__(self, line: str, code: int = 1):
        super().__init__(line)
        self.line, self.code = line, code


def the_policy():
    from reconciler.config.policy import PolicyError, load_policy

    try:
        return load_policy()
    except PolicyError as e:
        raise Fail(f"res: {e}") from None


def quiet_logs() -> None:
    """A one-shot command says what matters in its own lines; the passes' log records (meant for
    `res serve`'s log) must not reach stderr as extra, unprefixed lines."""
    import logging

    logging.getLogger("res").addHandler(logging.NullHandler())


async def with_engine(paths: Paths, fn: Callable[[Engine], Awaitable[T]]) -> T:
    from reconciler.loop.tick import with_engine as run_with_engine

    quiet_logs()
    return await run_with_engine(paths, the_policy(), fn)


def decide(paths: Paths, request: dict, local: Callable[[Engine], Awaitable[tuple[int, str, dict | None]]],
           resume: Callable[[Engine], Awaitable[tuple[int, str, dict | None]]] | None = None) -> tuple[int, str, dict | None]:
    """Ask the running loop; without one, run the passes here under the same lock. `resume`: what
    to run here instead of `local` when the loop took the request and ended before answering (it may
    have acted on it already)."""
    from reconciler.loop.client import NoAnswer, NoDaemon, Unanswered, ask

    fn = local
    # Until the loop has taken the request; once it has, it says within how long it answers (its
    # policy's answer_timeout_s), and the wait becomes that (loop.client.ask).
    timeout = 60.0
    try:
        answer = ask(paths.socket, request, timeout=timeout)
        if answer.get("hint"):
            print(answer["hint"], file=sys.stderr)
        return answer["code"], answer["line"], answer.get("data")
    except NoAnswer:
        fn = resume or local
    except NoDaemon:
        start_the_loop(paths)  # in the background: this call decides here, the next ones ask it
    except Unanswered as e:
        if e.accepted:  # written, not decided: say so, so nothing starts behind the caller's back
            raise Fail(f"res: the reconciler loop took {e.accepted} but did not decide it; it may "
                       f"still start (res status {e.accepted}; res release {e.accepted} withdraws it)") from None
        raise Fail("res: the reconciler loop did not answer in time; see res status") from None
    import asyncio

    return asyncio.run(with_engine(paths, fn))


def start_the_loop(paths: Paths) -> None:
    """No loop listens: start one where the policy says so (loop.start), saying so in one line on
    stderr, and go on without waiting for it."""
    from reconciler.loop.start import autostart

    _, line = autostart(paths, the_policy(), wait=False)
    if line:
        print(line, file=sys.stderr)


def say(line: str, code: int) -> None:
    print(line, file=sys.stderr if code == 1 else sys.stdout)


def print_lines(code: int, lines: list[str]) -> int:
    for line in lines:
        print(line, file=sys.stderr if code == 1 else sys.stdout)
    return code
