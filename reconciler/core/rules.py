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
    # The most agents may book at once whatever is free (0: no ceiling beyond the machine's), capacity.capacity.
    agents_mem_gb: float
    # Memory pressure that holds back new work: PSI `full avg10` in percent, 0 ignores it (capacity.pressure_of);
    # held over it for a minute (`full avg60`), the ladder's red (ladder.py).
    pressure_full_pct: float
    # What a job books and what it may use (DESIGN §5.1): the margin over the learned peak a book
    # takes, how much of the CPU budget may be promised (× the CPUs agents may use), the memory kept
    # free beyond the reserve under which nothing new starts (amber) and, at half of it, res stops the
    # job most above its book (red); an agent session's own processes outside any job over this many
    # GB may be stopped too (0: never).
    margin: float
    cpu_overcommit: float
    guard_gb: float
    ladder_session_gb: float
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
    # Not a key of its own: which of the memory reserves and the headroom were set (the user's file, a
    # RES_ variable), rather than shipped; a shipped one is scaled down on a small machine
    # (capacity.mem_reserve). Names of config/policy.RESERVE_KEYS.
    reserve_as_set: tuple[str, ...] = ()
