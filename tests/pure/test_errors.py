"""Pure tier: failures sorted into the two kinds the loop treats differently (core/errors.py):
retry-later (the world was not ready) and needs-a-person (no retry mends it)."""
from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from reconciler.config.locks import LockBusy
from reconciler.core.errors import NeedsPerson, RetryLater, needs_a_person
from reconciler.core.lifecycle import IllegalTransition
from reconciler.core.models import Phase, Request, parse
from reconciler.runtime import RuntimeBusy, RuntimeUnavailable, UnitExists


def _invalid() -> ValidationError:
    try:
        parse(Request, {"id": "x"})
    except ValidationError as e:
        return e
    raise AssertionError("parsed")


@pytest.mark.parametrize("error", [
    RuntimeUnavailable("no bus"), RuntimeBusy({"code": "busy"}), LockBusy("held"), asyncio.TimeoutError(),
    TimeoutError("D-Bus call timed out"), OSError(5, "EIO"), ConnectionResetError(), RuntimeError("org.freedesktop…"),
    UnitExists("res-x.scope"), ValueError("not a number"),
], ids=lambda e: type(e).__name__)
def test_what_the_world_raises_is_tried_again(error):
    assert not needs_a_person(error)


@pytest.mark.parametrize("error", [
    IllegalTransition(Phase.done, "settle"), IllegalTransition(None, "stop"), NeedsPerson("corrupt"), TypeError("x"),
    AttributeError("x"), KeyError("mem_gb"), IndexError(0), AssertionError(), ZeroDivisionError(), _invalid(),
], ids=lambda e: type(e).__name__)
def test_a_wrong_turn_or_a_bug_needs_a_person(error):
    assert needs_a_person(error)


def test_the_runtimes_errors_are_retry_later_and_an_illegal_transition_still_a_value_error():
    assert issubclass(RuntimeUnavailable, RetryLater) and issubclass(RuntimeBusy, RetryLater)
    assert issubclass(IllegalTransition, ValueError) and issubclass(IllegalTransition, NeedsPerson)
