"""Two kinds of failure, and what the loop does with each (DESIGN §2 step 5). Pure.

- `RetryLater`: the world was not ready: the runtime did not answer or is busy, D-Bus timed out, a lock
  was held, a file was being replaced. The action (or the pass) is tried again by the next pass, as
  every failure was before; nobody needs to do anything.
- `NeedsPerson`: trying again cannot help: a transition the lifecycle does not allow
  (core/lifecycle.IllegalTransition), a record or plan that makes no sense, a bug. It is said where
  failures are said (the plan's notices, the loop's log, once with its traceback) and not tried again
  in a hot loop.

A failure of neither class is sorted by `needs_a_person`: Python's own signs of a bug (a wrong type, a
missing attribute or key, a failed assertion) need a person; anything else the world raised (an OSError,
a runtime's RuntimeError, a timeout) is retried, as before.
"""
from __future__ import annotations


class RetryLater(Exception):
    """A failure the next pass may not meet: tried again then."""


class HeldElsewhere(RetryLater):
    """What this process needs is held by another process past what it may wait (state.db in an open
    transaction, the tick lock by a pass that does not end): said with its holder where that is known,
    and tried again later; a command answers by its deadline saying so."""


class NeedsPerson(Exception):
    """A failure no retry mends: said once, loudly, and not tried again in a hot loop."""


# Python's own signs of a bug: code that met a value it was not written for.
BUGS: tuple[type[BaseException], ...] = (TypeError, AttributeError, NameError, LookupError, AssertionError,
                                         NotImplementedError, ArithmeticError, RecursionError)


def needs_a_person(e: BaseException) -> bool:
    """Whether `e` is a failure no retry mends (see the module's docstring)."""
    if isinstance(e, RetryLater):
        return False
    return isinstance(e, (NeedsPerson, *BUGS)) or _invalid(e)


def _invalid(e: BaseException) -> bool:
    """pydantic's ValidationError: a value res made (a record, a plan) broke the model's constraints."""
    from pydantic import ValidationError

    return isinstance(e, ValidationError)
