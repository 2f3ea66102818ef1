"""Pure tier: game mode's slice values, the diff line and the shortfall line, with literals."""
from reconciler.core.capacity import capacity
from reconciler.core.game import slice_target
from reconciler.core.models import Game, JobObs, JobRecord, Phase, Request, World, copy
from reconciler.core.quantities import GIB, UTC
from reconciler.render.text import fmt_clock
from reconciler.render.game import on_line, shortfall_line, slice_diff
from ruleset import rules

NOW = 1_780_000_000.0
POLICY = rules(user_reserve_gb=6, user_reserve_cpus=0, game_reserve_gb=12, game_reserve_cpus=0,
               small_headroom_gb=2)


def test_game_on_yields_cpu_and_io_and_keeps_memory_without_squeezing_agents():
    on = Game(on=True, until=NOW + 3600)
    assert slice_target(POLICY, on, NOW, 32.0, 4.0) == {"CPUWeight": 5, "IOWeight": 5, "MemoryHigh": 20 * GIB}
    # agents already use more than RAM − game reserve: never squeezed below what they use
    assert slice_target(POLICY, on, NOW, 32.0, 23.5)["MemoryHigh"] == int(23.5 * GIB)


def test_game_off_or_expired_gives_the_normal_share_back():
    expired = Game(on=True, until=NOW - 1)
    for game in (Game(), expired):
        assert slice_target(POLICY, game, NOW, 32.0, 4.0) == {"CPUWeight": 20, "IOWeight": 20, "MemoryHigh": 26 * GIB}


def test_slice_diff_names_what_changes():
    assert slice_diff({"CPUWeight": 20, "IOWeight": 20, "MemoryHigh": 18 * GIB},
                      {"CPUWeight": 5, "IOWeight": 5, "MemoryHigh": 12 * GIB}) == \
        "MemoryHigh 18.0 GB → 12.0 GB, CPUWeight 20 → 5, IOWeight 20 → 5"
    same = {"CPUWeight": 5, "IOWeight": 5, "MemoryHigh": 12 * GIB}
    assert slice_diff(dict(same), same) is None


def test_on_line():
    assert on_line(NOW + 4 * 3600, NOW, UTC) == f"game on until {fmt_clock(NOW + 4 * 3600, UTC)} (4h); CPU/IO now yours"


def test_shortfall_names_the_holders_and_when_the_reserve_is_free():
    req = Request(id="r-4", title="dotnet e2e", mem_gb=8.0, est_s=3600, created=NOW, cmd=["x"])
    rec = JobRecord(request=req, phase=Phase.running, started=NOW - 600)
    world = World(mem_total_gb=32, mem_available_gb=20.0, nproc=16, jobs={"r-4": JobObs(state="active", mem_used_gb=2.0)})
    on = Game(on=True, until=NOW + 3600)
    # 17 available − 12 game reserve − 2 headroom − (8 − 2) unused of r-4 = −3
    cap = capacity(POLICY, on, copy(world, **{"mem_available_gb": 17.0}), [rec], NOW)
    eta = fmt_clock(NOW - 600 + 3600, UTC)
    assert shortfall_line(cap, NOW, UTC) == (f'reserve short by 3.0 GB: held by "dotnet e2e" (r-4) until ~{eta}; '
                                        f"full reserve expected free ~{eta}")
    assert shortfall_line(capacity(POLICY, on, copy(world, **{"mem_available_gb": 30.0}), [rec], NOW), NOW, UTC) is None
