"""Agent sessions kept in their slice: which running sessions to adopt into a
scope, which scopes' MemoryHigh to set, and the shell alias for new ones. Pure."""
from __future__ import annotations

import shlex

from reconciler.core.agents import SESSION_NAME
from reconciler.core.models import Action, World
from reconciler.core.rules import Rules
from reconciler.core.quantities import GIB


def scope_name(prefix: str, pid: int) -> str:
    return f"{prefix}-{SESSION_NAME}-{pid}.scope"


# Scopes of container engines: the session belongs to the container, never moved out of it.
CONTAINER_SCOPES = ("libpod-", "docker-", "machine-", "crun-", "podman-", "lxc-")


def movable_from(unit: str) -> bool:
    """A session is moved only out of a scope (a terminal's, a login's, systemd's own init.scope),
    never out of a service (a user's bot.service keeps its stop and limits) or a container."""
    return unit.endswith(".scope") and not unit.startswith(CONTAINER_SCOPES)


def session_actions(world: World, policy: Rules) -> list[Action]:
    """Sessions outside the agents slice, in a scope that may be left → adopt (with their children
    in the same cgroup) into a new scope; session scopes whose MemoryHigh differs from
    session_mem_gb → set (0: leave them alone). Moving needs adopt_sessions on (or `res adopt`);
    sizing a scope already in the slice does not."""
    if world.sessions is None:
        return []
    high = int(policy.session_mem_gb * GIB)
    acts = []
    for s in sorted(world.sessions, key=lambda s: s.pid):
        if not s.in_slice:
            if not s.movable or not policy.adopt_sessions:
                continue
            acts.append(Action(kind="adopt", id=scope_name(policy.unit_prefix, s.pid), pids=[s.pid, *s.children],
                               props={"MemoryHigh": high} if high else {},
                               detail={"code": "outside_slice", "pid": s.pid, "children": len(s.children),
                                       "slice": policy.agents_slice}))
            continue
        if s.scope is None:
            continue  # in the slice but not in a scope of its own (e.g. inside a job): not ours to size
        if high and s.scope_memory_high != high:
            acts.append(Action(kind="set", id=s.scope, props={"MemoryHigh": high},
                               detail={"code": "session_memory", "was": s.scope_memory_high, "to_gb": policy.session_mem_gb}))
    return acts


def shell_init_line(policy: Rules, systemd_run: str = "systemd-run") -> str:
    """The alias that starts each new session in the agents slice, in a scope of its own, with the
    session memory limit."""
    parts = [systemd_run, "--user", "--scope", "--quiet", "--collect", f"--slice={policy.agents_slice}"]
    if policy.session_mem_gb:
        parts += ["-p", f"MemoryHigh={int(policy.session_mem_gb * GIB)}"]
    parts.append(SESSION_NAME)
    return f"alias {SESSION_NAME}={shlex.quote(' '.join(shlex.quote(p) for p in parts))}"
