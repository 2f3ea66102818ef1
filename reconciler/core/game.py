"""Game mode (DESIGN §5.6): the agents slice's target values, its actions, and the reserve's shortfall. Pure."""
from __future__ import annotations

from reconciler.core.capacity import Capacity, freed_by, reserves
from reconciler.core.models import Action, Desired, Game, World
from reconciler.core.rules import Rules
from reconciler.core.quantities import GIB

GAME_WEIGHT = 5
NORMAL_WEIGHT = 20
# MemoryHigh is rounded up to this, so a slice whose use grows past the game target is not re-set
# on every pass for a few pages more.
MEMORY_HIGH_STEP = 256 * 1024 * 1024
UNSET = 1 << 63  # systemd reports an unset weight or limit as UINT64_MAX; anything this big is "unset"


def slice_target(policy: Rules, game: Game, now: float, ram_gb: float, slice_used_gb: float) -> dict[str, int]:
    """What the agents slice should be set to: game on yields CPU/IO and keeps memory for the user
    without squeezing what agents already use; off (or expired) gives the normal share back."""
    reserve_gb, _, on = reserves(policy, game, now, 1, ram_gb)
    if on:
        high = max(ram_gb - reserve_gb, slice_used_gb)
        weight = GAME_WEIGHT
    else:
        high = ram_gb - reserve_gb
        weight = NORMAL_WEIGHT
    steps = -(-int(max(high, 0) * GIB) // MEMORY_HIGH_STEP)  # ceiling
    return {"CPUWeight": weight, "IOWeight": weight, "MemoryHigh": max(steps, 1) * MEMORY_HIGH_STEP}


def slice_changes(current: dict[str, int | None], target: dict[str, int]) -> dict[str, list]:
    """{key: [current, target]} for each property that differs ({} when none does)."""
    return {key: [current.get(key), target[key]] for key in ("MemoryHigh", "CPUWeight", "IOWeight")
            if key in target and current.get(key) != target[key]}


def game_actions(desired: Desired, world: World, now: float, policy: Rules) -> list[Action]:
    """Game mode's time is up → clear it in game.toml; the agents slice differs from what game mode
    (on or off) wants → set it. Nothing when the slice could not be observed."""
    game = desired.game
    acts = []
    if desired.game_ok and game.on and game.until is not None and now >= game.until:
        acts.append(Action(kind="end_game", id="game.toml", at=game.until, detail={"code": "game_ended", "at": game.until}))
    s = world.agents_slice
    if s is None:
        return acts
    target = slice_target(policy, game, now, world.mem_total_gb, s.mem_used_gb)
    changes = slice_changes({"CPUWeight": s.cpu_weight, "IOWeight": s.io_weight, "MemoryHigh": s.memory_high}, target)
    if changes:
        on = game.active(now)
        acts.append(Action(kind="set", id=s.name, props=target, detail={
            "code": "game_slice", "changes": changes, "game": "on" if on else "off", "until": game.until if on else None}))
    return acts


def reserve_shortfall(cap: Capacity, now: float) -> dict | None:
    """With the game reserve in force: how much of it agents still hold, who, and when it is expected
    free (jobs are never stopped or squeezed for it). None when the reserve is free now."""
    short = -cap.mem_gb
    if short <= 1e-9:
        return None
    holders, when = freed_by(cap, 0.0, 0.0, now)
    return {"short_gb": short, "holders": holders, "free_at": when}
