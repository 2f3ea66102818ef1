"""A pass a command asks for, not the loop's own: the running loop's pass, else one here under the
same tick lock (`pass_now`, `pass_here`, `PassFailed` when the loop answers without a plan), a
one-shot reconciler instance for a command's own work (`with_engine`), and the plan read-only
(`dry_run`: `res reconcile --dry-run`, nothing locked, started or written). Apart from loop/tick.py,
which is the pass itself and the Engine that the loop keeps across passes.
"""
from __future__ import annotations

import time
from typing import Awaitable, Callable, TypeVar

from reconciler.config.paths import Paths
from reconciler.config.zone import zone_of
from reconciler.core.models import Plan, World, parse
from reconciler.core.plan import plan
from reconciler.loop.tick import (Engine, cluster_wanted, gatefile_read, load_desired, make_cluster, make_runtime,
                                  rebook)
from reconciler.loop.world import observe_user_side, observe_world
from reconciler.render.reasons import explain

T = TypeVar("T")


async def with_engine(paths: Paths, policy, fn: Callable[[Engine], Awaitable[T]]) -> T:
    """`fn(engine)` on a one-shot reconciler instance: connected first, closed after (its
    attachments given up, so a loop takes them over at once)."""
    engine = Engine(paths, policy)
    try:
        await engine.connect()
        return await fn(engine)
    finally:
        await engine.close()


def pass_here(paths: Paths, policy, adopt: bool = False) -> Plan:
    """One pass in this process, under the same tick lock as the loop's."""
    import asyncio

    async def one(engine):
        engine.adopt_once = adopt
        return await engine.tick()

    paths.ensure()
    return asyncio.run(with_engine(paths, policy, one))


class PassFailed(Exception):
    """The running loop answered without a plan (its pass failed): its line and exit code."""

    def __init__(self, line: str, code: int):
        super().__init__(line)
        self.line, self.code = line, code


def pass_now(paths: Paths, policy, adopt: bool = False, timeout: float | None = None) -> Plan:
    """A pass now: the running loop's (it answers with the plan of a pass that began after the
    request), else one here. `adopt`: that pass adopts sessions whatever adopt_sessions says.
    TimeoutError: the loop took the request and did not answer in time (`timeout`, else what is left
    of this call's deadline, else 60 s)."""
    from reconciler.loop.client import NoDaemon, ask
    from reconciler.loop.protocol import Tick
    from reconciler.config.deadline import remaining

    if timeout is None:
        timeout = remaining()
        timeout = 60.0 if timeout is None else max(timeout, 0.001)
    try:
        answer = ask(paths.socket, Tick(adopt=adopt), timeout=timeout)
    except NoDaemon:
        return pass_here(paths, policy, adopt)
    if answer.get("plan") is None:
        raise PassFailed(answer["line"], answer["code"])
    return parse(Plan, answer["plan"])


async def dry_run(paths: Paths, policy, world: World | None = None) -> tuple[Plan, World]:
    """Steps 2–4 read-only: nothing is locked, started, written or created."""
    from reconciler.recorded.store import Store

    store = Store.open(paths, readonly=True)
    try:
        desired, notices = load_desired(paths, store, save=False)
        records = store.records()
        rebook(desired, records, (gatefile_read(paths.gate) or {}).get("learned") or {}, policy.margin, {})
        try:  # what a pass would hold now: a hand edit since the last pass is shown held, not started
            from reconciler.config.policy import user_policy_path
            from reconciler.desired.changes import track

            desired.hand_added = sorted(track(paths, store, user_policy_path(), write=False))
        except Exception as e:  # noqa: BLE001 - a plan for review: shown without, and said
            notices.append(f"could not check queue.toml for hand edits ({' '.join(str(e).split())}); "
                           "entries added by hand may show as to start")
        if world is None:
            runtime = make_runtime(paths, policy)
            from reconciler.runtime import RuntimeUnavailable

            error = None
            try:
                await runtime.connect()
                connected = True
            except RuntimeUnavailable as e:
                connected, error = False, str(e)
            try:
                unknown = [r.id for r in desired.requests if r.id not in records]
                world = await observe_world(runtime if connected else None, records, paths, unknown,
                                            cluster=make_cluster(paths, policy),
                                            ask_cluster=cluster_wanted(desired, records, policy))
                if error:
                    world.errors = [error]
                elif world.ok:
                    notices += await observe_user_side(runtime, world, policy)
            finally:
                if connected:
                    await runtime.close()
        zone = zone_of(policy)
        p = explain(plan(desired, records, world, time.time(), policy.rules(), zone=zone), zone)
        p.notices.extend(notices)
        return p, world
    finally:
        store.close()
