"""The policy's values the core reads, typed: `Rules`, built from the loaded policy at the edge
(config/policy.py: `Policy.rules()`), never read from it by name with a default. Every value is
required: a policy without one is no policy (policies/default.toml is the one home of the defaults),
so a test states each (tests/ruleset.py builds one with overrides). Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Rules:
    # What is kept for the user (capacity.reserves), and the margin under it (capacity.capacity).
    user_reserve_gb: float
    user_reserve_cpus: float
    game_reserve_gb: float
    game_reserve_cpus: float
    small_headroom_gb: float
    # Memory pressure that holds back new work: PSI `full avg10` in percent, 0 ignores it (capacity.pressure_of).
    pressure_full_pct: float
    # Agent sessions: the slice they are kept in, their scopes' MemoryHigh, whether the loop moves
    # them there unasked, the prefix of the scopes' names (sessions.py).
    agents_slice: str
    session_mem_gb: float
    adopt_sessions: bool
    unit_prefix: str
    # `--mem/--cpus/--for auto` of a command nothing else knows (sizing.policy_default).
    auto_mem_gb: float
    auto_cpus: float
    auto_minutes: float
    # Admission and budgets (plan.py): per-job defaults of agent sessions (0: none), the log cap, the
    # session caps, the starts of one pass, where what does not fit here may go.
    max_cost_usd: float
    max_duration: int
    max_iterations: int
    max_log_gb: float
    max_concurrent_sessions: int
    daily_cost_usd: float
    max_starts_per_tick: int
    overflow: Literal["off", "cluster"]
    # How many times a cluster job whose node failed under it is submitted again (0: never).
    cluster_requeue_on_node_failure: int
    # When the next pass is due by the clock (wake.py).
    tick_s: float
    sweep_s: float
