"""What every command of the command line shares: the one-line failure, the policy, a pass run here
when no loop answers, and how lines are printed. Import-light: the hot path (`res run`) starts here."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Awaitable, Callable

from reconciler.config.paths import Paths

if TYPE_CHECKING:
    from typing import TypeVar

    from reconciler.loop.protocol import Release, Submit
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
    from reconciler.loop.oneshot import with_engine as run_with_engine

    quiet_logs()
    return await run_with_engine(paths, the_policy(), fn)


def decide(paths: Paths, request: Submit | Release, local: Callable[[Engine], Awaitable[tuple[int, str, dict | None]]],
           resume: Callable[[Engine], Awaitable[tuple[int, str, dict | None]]] | None = None,
           wait_s: float | None = None) -> tuple[int, str, dict | None]:
    """Ask the running loop `request` (a record of loop/protocol.py); without one, run the passes here
    under the same lock. `resume`: what to run here instead of `local` when the loop took the request
    and ended before answering (it may have acted on it already). `wait_s`: a shorter wait than the
    caller's answer wait, if given."""
    import time

    from reconciler.loop.client import NoAnswer, NoDaemon, Unanswered, answer_wait_s, ask, grace_s
    from reconciler.loop.protocol import Submit
    from reconciler.config.deadline import clear_deadline, wait_limits

    fn = local
    try:
        wait_s = answer_wait_s() if wait_s is None else min(answer_wait_s(), max(wait_s, 0.25))
    except ValueError as e:
        raise Fail(f"res: {e}", 2) from None
    # One wait, kept whoever holds the loop or state.db: the answer by then, or a line saying what
    # becomes of the request. A request carries when its caller stops waiting (a little before this
    # call gives up: the loop's answer has time to arrive), and no pass starts it after that.
    gives_up = time.monotonic() + wait_s
    if isinstance(request, Submit):
        request.fields.setdefault("answer_by", time.time() + wait_s - grace_s(wait_s))
    wait_limits(deadline=gives_up)  # every wait of this process for state.db (a pass here) ends by then
    try:
        try:
            answer = ask(paths.socket, request, timeout=wait_s)
            if _older_loop(answer, request):  # a loop from before request ids refused them: as before
                fields = {k: v for k, v in request.fields.items() if k not in NEW_FIELDS}
                request = Submit(request.kind, fields, who=request.who)
                answer = ask(paths.socket, request, timeout=max(gives_up - time.monotonic(), 0.001))
            if answer.get("hint"):
                print(answer["hint"], file=sys.stderr)
            return answer["code"], answer["line"], answer.get("data")
        except NoAnswer:
            fn = resume or local
        except NoDaemon:
            start_the_loop(paths)  # in the background: this call decides here, the next ones ask it
        except Unanswered as e:
            raise Fail(gave_up_line(request, wait_s, e.accepted)) from None
        import asyncio

        return asyncio.run(with_engine(paths, fn))
    finally:
        clear_deadline()  # (a `res run --wait` then waits for the job as long as it takes)


NEW_FIELDS = ("request_id", "answer_by", "start_by")  # what a loop from before issue 40 refuses in a request


def _older_loop(answer: dict, request: Submit | Release) -> bool:
    """A loop still running code from before request ids (an upgrade it has not been restarted
    for) refuses a request that carries one, writing nothing: it is asked again without."""
    line = str(answer.get("line") or "")
    # (its words are pydantic's: an older res said them as they were)
    return (request.op == "submit" and answer.get("code") == 1 and "Extra inputs are not permitted" in line
            and any(f"{name}:" in line for name in NEW_FIELDS))


def gave_up_line(request: Submit | Release, wait_s: float, accepted: str | None) -> str:
    """What a caller that stops waiting for the loop is told (issue 40): which request it leaves
    behind, and what becomes of it: asked for now, it never starts unless it already did; with
    --queue, it waits in the queue if the loop took it. Asking again with the same request id is the
    same request, so the caller learns which, and never gets a second job."""
    waited = f"no answer from the reconciler loop in {wait_s:g} s (stopped or stuck?)"
    if request.op != "submit":
        job = getattr(request, "id", "the entry")
        return (f"res: {waited}: the {request.op} of {job} is carried out if the loop took it; "
                f"see res status {job}")
    fields = request.fields or {}
    rid = fields.get("request_id")
    name = f"request {rid}" + (f" ({accepted})" if accepted else "")
    again = (f"ask again with --request-id {rid} to learn which (the same request: never a second job)" if rid
             else f"see res status {accepted}" if accepted else "see res status")
    by = _clock(fields.get("answer_by"))
    if fields.get("queue"):
        return (f"res: {waited}: {name} waits in the queue if the loop took it by {by} (--queue), else it "
                f"never starts; {again}")
    return f"res: {waited}: {name} is not started after {by} unless it already was; {again}"


def _clock(epoch) -> str:
    """`14:02:55` in the policy's time zone (the caller's where the policy cannot be read)."""
    import time

    if not isinstance(epoch, (int, float)):
        return "its deadline"
    try:
        from reconciler.config.zone import zone_of

        zone = zone_of(the_policy())
        at = int(epoch + zone(epoch))
        return f"{at // 3600 % 24:02d}:{at // 60 % 60:02d}:{at % 60:02d}"
    except Exception:  # noqa: BLE001 - a clock time is worth no failure of its own here
        return time.strftime("%H:%M:%S", time.localtime(epoch))


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
