"""`res clean`'s failed units: `reset-failed` of the failed `res-*` units on a runtime's user side
(the loop's silent clean and `res clean` both call it after the files). Apart from ops/clean.py, which
is files (scratch, litter, project patterns): units are another world, reached through the runtime.
"""
from __future__ import annotations

import re
from typing import Awaitable, Callable, Iterable

from reconciler.render.text import escaped_path as show

_UNIT = re.compile(r"^[A-Za-z0-9_.:@\\-]+\.(service|scope)$")


async def reset_failed_units(side, *, yes: bool, prefix: str) -> list[str]:
    """reset_failed on a runtime's user side (runtime.UserSide; None: a runtime without one: nothing)."""
    if side is None:
        return []
    return await reset_failed(side.failed_units, side.reset_failed_unit, yes=yes, prefix=prefix)


async def reset_failed(list_failed: Callable[[], Awaitable[Iterable[str]]],
                       reset_unit: Callable[[str], Awaitable[object]], *, yes: bool,
                       prefix: str = "res") -> list[str]:
    """`reset-failed` of the failed `<prefix>-*` units. `list_failed()` gives the names of failed units
    (over D-Bus: ListUnitsByPatterns(["failed"], [f"{prefix}-*"])); `reset_unit(name)` resets one
    (ResetFailedUnit). Only names `<prefix>-….service|scope` are touched. Never raises."""
    try:
        names = sorted({n for n in await list_failed()
                        if isinstance(n, str) and n.startswith(prefix + "-") and _UNIT.match(n)})
    except Exception as e:  # noqa: BLE001 - observation failed: act on nothing, say so in one line
        return [f"reset-failed skipped: {show(str(e)) or type(e).__name__}"]
    lines = []
    for n in names:
        if not yes:
            lines.append(f"would reset failed unit {n}")
            continue
        try:
            await reset_unit(n)
            lines.append(f"reset failed unit {n}")
        except Exception as e:  # noqa: BLE001
            lines.append(f"kept failed unit {n}: {show(str(e)) or type(e).__name__}")
    return lines
