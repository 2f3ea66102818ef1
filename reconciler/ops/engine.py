"""What the operations, the loop's server and the commands' passes here use of a reconciler
instance (loop/tick.Engine), as a Protocol: the operations stand below the loop and may not import
it, yet they are handed its engine; tests hand in engines of their own.

Its home is here, with the operations that take it: what it names (the store, the writer, the
runtime) stands on the floors below, so no lower folder could hold it but apply/, which carries a
plan out and takes no engine."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from reconciler.config.paths import Paths
    from reconciler.config.policy import Policy
    from reconciler.core.models import Plan, Request
    from reconciler.desired.writer import Writer
    from reconciler.recorded.store import Store
    from reconciler.runtime import Runtime


class Adder(Protocol):
    """The loop's group commit of new requests (loop/group.GroupAdd)."""

    async def add(self, fields: dict, kind: str, who: str | None,
                  prepare: Callable[[dict], dict] | None = None) -> Request: ...

    async def written(self, limit_s: float) -> None: ...


@runtime_checkable
class Engine(Protocol):
    paths: Paths
    policy: Policy  # the policy of the last pass (reloaded when its files change)
    store: Store
    writer: Writer
    runtime: Runtime
    adder: Adder | None  # the loop's group commit of new requests; None: each writes alone
    connected: bool  # the runtime answered the last connect
    manager_absent: bool  # ... and when it did not: there is none to reach (not one slow or broken)
    blocked: list[str]  # why the last pass could admit nothing ([] if it could)
    adopt_once: bool  # the next pass adopts sessions whatever adopt_sessions says
    next_at: float | None  # when the last pass asked for the next by the clock (None: not by the clock)
    note_owners: frozenset[int]  # the processes whose end ends a note
    last_pass_at: float | None
    code_id: str  # the code this instance runs

    async def connect(self) -> None: ...

    async def close(self) -> None:
        """Give up this instance's attachments, then disconnect."""
        ...

    async def tick(self) -> Plan:
        """One pass."""
        ...

    def would_fit(self, size: dict, now: float) -> dict:
        """The gate's question against the last pass's inputs (core/whatif.py)."""
        ...
