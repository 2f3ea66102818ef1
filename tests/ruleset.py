"""A policy, or the rules the core reads of it (core/rules.py), for a test: the shipped defaults
(policies/default.toml) with the test's own values over them, validated as a policy file's values
are. Nothing comes from the environment or from the user's policy file: every key is given.

    POLICY = rules(user_reserve_gb=6, max_starts_per_tick=4)   # what plan(), capacity(), … take
    slice_units(policy(jobs_slice="agents-jobs.slice"), …)     # the shell's functions take the Policy
"""
from __future__ import annotations

import functools
import tomllib

from reconciler.config.policy import Policy, default_policy_path
from reconciler.core.rules import Rules


@functools.cache
def _shipped() -> dict:
    with open(default_policy_path(), "rb") as f:
        return tomllib.load(f)


def policy(**values) -> Policy:
    """A Policy of the shipped defaults and `values` (any policy key)."""
    return Policy(**{**_shipped(), **values})


def rules(**values) -> Rules:
    """The core's Rules of that policy."""
    return policy(**values).rules()
