"""The user's side of the command line: `res game`, `res hist`, `res clean`.
(`res hook` is dispatched before anything else is imported: see reconciler/entry.py.)"""
from __future__ import annotations

import os
import time

from reconciler.config.paths import Paths


def game_report(paths: Paths, policy, now: float) -> list[str]:
    """The game line and, when the reserve is not free now, the shortfall line, from what the last
    pass recorded (state.db, read-only)."""
    from reconciler.core.capacity import HOLDING
    from reconciler.desired.reader import read_game
    from reconciler.config.zone import zone_of
    from reconciler.core.models import World, parse
    from reconciler.render.game import game_lines
    from reconciler.recorded.store import Store

    game, error = read_game(paths)
    if error:
        return [f"res: {error}"]
    with Store.open(paths, readonly=True) as store:
        records = store.records()
        snap = store.get_meta_json("last_tick", {})
    world = parse(World, snap["world"]) if snap.get("world") else None
    return game_lines(policy.rules(), game, world, [r for r in records.values() if r.phase in HOLDING], now, zone_of(policy))


def cmd_game(a, paths: Paths, policy, decide) -> tuple[int, list[str]]:
    from reconciler.desired.reader import DesiredError
    from reconciler.desired.writer import Writer
    from reconciler.ops.game import set_game

    now = time.time()
    if a.action == "status":
        return 0, game_report(paths, policy, now)
    try:
        set_game(Writer(paths), paths, policy, a.action == "on", now, a.length if a.action == "on" else None)
    except DesiredError as e:
        return 1, [f"res: {e}"]
    late = []
    try:
        # A pass now applies the reserve and sets the slice; what kept it from that is said, but
        # `game on|off` never fails once written: the loop retries every pass.
        late = [f"res: {' '.join(n.split())}; the next pass retries" for n in decide() or []]
    except Exception as e:  # noqa: BLE001
        late = [f"res: the slice is set by the next pass ({' '.join(str(e).split()) or type(e).__name__})"]
    if a.action == "off":
        return 0, ["game off; agents get their share back", *late]
    return 0, game_report(paths, policy, now) + late


def cmd_hist(a, paths: Paths) -> tuple[int, list[str]]:
    from reconciler.core.hist import hist_rows
    from reconciler.render.hist import render_hist
    from reconciler.ops.requests import finished_runs
    from reconciler.recorded.store import Store

    if getattr(a, "changes", False):
        from reconciler.config.zone import system_zone
        from reconciler.render.text import fmt_clock, fmt_day
        from reconciler.desired.changes import change_line, recorded_and_pending

        with Store.open(paths, readonly=True) as store:
            rows = recorded_and_pending(paths, store)
        day = lambda at: f"{fmt_day(at, system_zone)} {fmt_clock(at, system_zone)}"  # noqa: E731
        return 0, [change_line(*row, clock=day) for row in rows[-200:]] or ["no changes recorded"]
    from reconciler.commands.base import the_policy
    from reconciler.core.gate import line_fingerprint
    from reconciler.core.hist import learned
    from reconciler.render.hist import render_learned

    with Store.open(paths, readonly=True) as store:
        records = finished_runs(store)
    policy = the_policy()
    by_command = learned(records, policy.heavy_mem_gb, policy.heavy_minutes, line_fingerprint)
    return 0, [render_hist(hist_rows(records, a.project)), "",
               "by command (what --mem/--cpus/--for auto take, and the gate books):", render_learned(by_command, a.project)]


def cmd_clean(a, paths: Paths, policy) -> tuple[int, list[str]]:
    import asyncio

    from reconciler.ops.clean import clean_here
    from reconciler.ops.failedunits import reset_failed_units

    lines = clean_here(os.getcwd(), time.time(), os.getuid(), policy.scratch_hours * 3600, yes=a.yes)

    async def units() -> list[str]:
        from reconciler.loop.tick import make_runtime

        runtime = make_runtime(paths, policy)
        try:
            return await reset_failed_units(runtime.user_side(), yes=a.yes, prefix=policy.unit_prefix)
        finally:
            await runtime.close()

    lines += asyncio.run(units())
    return 0, lines or ["nothing to clean"]
