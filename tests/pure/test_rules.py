"""Pure tier: the core's typed input from the policy (core/rules.py): Rules holds policy keys only,
is made from the loaded Policy at the edge (Policy.rules(), once per policy object), and the core
reads it by attribute, never by name with a default (a test's stand-in lacking a key fails loudly)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from reconciler.config.policy import Policy, rules_of
from reconciler.core.rules import Rules
from ruleset import policy, rules

CORE = Path(__file__).resolve().parents[2] / "reconciler" / "core"


def test_every_rule_is_a_policy_key():
    """…but what load_policy knows of where the values came from (whether the reserve was set), a
    property of the Policy, not a key a file could set."""
    facts = {"reserve_as_set"}
    assert {f.name for f in dataclasses.fields(Rules)} - facts <= set(Policy.model_fields)
    assert all(isinstance(getattr(Policy, name), property) and name not in Policy.model_fields for name in facts)


def test_rules_are_the_policys_values_made_once_per_policy():
    p = policy(user_reserve_gb=3, overflow="cluster", max_duration="30m")
    r = p.rules()
    assert r is p.rules() and r == rules_of(p)
    assert (r.user_reserve_gb, r.overflow, r.max_duration) == (3.0, "cluster", 1800)
    assert all(getattr(r, f.name) == getattr(p, f.name) for f in dataclasses.fields(Rules))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.tick_s = 1.0  # type: ignore[misc]


def test_the_test_helper_is_the_shipped_defaults_with_overrides():
    assert rules() == policy().rules()
    assert rules(tick_s=0.5).tick_s == 0.5 and rules(tick_s=0.5).sweep_s == rules().sweep_s


def test_the_core_reads_no_value_by_name():
    """No getattr(obj, name[, default]) on the policy's values in the core: what it reads is Rules'."""
    found = []
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in ("policy", "rules")):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
