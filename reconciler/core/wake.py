"""When the loop needs its next pass by the clock alone (DESIGN §6). Between passes it runs one
only when something it watches changes: a unit of its own ends or goes away, a request comes in over
its socket, a desired or policy file is written, an agent session starts. What can change without
any of those, it asks for here: pure, from what a pass read.

- Entries waiting for room: what is free follows the machine's own memory use, which no event tells,
  so they are looked at every `tick_s`.
- Jobs starting, running or ended but not yet settled: their logs (digests, budgets, the log cap)
  and their attachment leases are read and renewed every `tick_s`, or `sweep_s` when that is
  shorter (how soon a lapsed lease of another loop's is claimed).
- Terminal records still in queue.toml: retired by the next pass, at once.
- Notes: their expiry (an owner's end is an event: its process goes away); the gate's bookings in
  place every `tick_s`, as jobs: what their commands use is read, as a job's memory is.
- Game mode: its end, when it has one.
- Finished records: pruned PRUNE_AFTER_S after their end.
- The pressure ladder off green: memory every LADDER_TICK_S.

Nothing else happens by the clock: with none of these the loop waits for an event, or for its
safety-net interval.

A plan that acts, or could not observe jobs, asks for a pass again in `tick_s`: the records it read
are no longer what is recorded (or were not seen), and the next pass, which reads them again, tells.
The planner decides this once, with the plan (`wake_at`, Plan.next_at); the loop arms it."""
from __future__ import annotations

from reconciler.core.models import LIVE, TERMINAL, Desired, JobRecord, Phase, Plan, World
from reconciler.core.rules import Rules


LADDER_TICK_S = 0.5  # amber or red (core/ladder.py): how soon memory is looked at again


def wake_at(p: Plan, desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules,
            prune_after_s: float) -> float | None:
    """When the pass after the one that applies `p` is due by the clock; None: by no clock. On the
    ladder's amber or red, jobs use about all there is: memory is looked at again every
    LADDER_TICK_S (at most), so that a job outgrowing its book is stopped before the kernel acts."""
    if p.rung != "green":
        return now + min(policy.tick_s, LADDER_TICK_S)
    if p.actions or not world.ok:
        return now + policy.tick_s
    return next_pass_at(desired, records, now, policy, prune_after_s)


def next_pass_at(desired: Desired, records: dict[str, JobRecord], now: float, policy: Rules,
                 prune_after_s: float) -> float | None:
    """The latest time the next pass may begin without anything the clock decides being late; None:
    nothing is due by the clock."""
    soon = now + policy.tick_s
    wanted = {r.id for r in desired.requests}
    if any(r.id not in records for r in desired.requests):
        # an entry no pass has recorded yet; one whose caller's deadline is nearer, by then (one already
        # past is refused by the next pass, `soon`: never a pass at once, again and again)
        nearer = [r.answer_by for r in desired.requests
                  if r.id not in records and r.answer_by is not None and now < r.answer_by < soon]
        return min([soon, *nearer])
    times: list[float] = []
    for rec in records.values():
        if rec.phase == Phase.queued:
            return soon
        if rec.phase in LIVE:
            if rec.request.kind != "note":
                return now + min(policy.tick_s, policy.sweep_s)
            if rec.request.in_place:
                return soon
            expires = rec.expires()
            if expires is not None:
                times.append(expires)
        elif rec.phase in TERMINAL:
            if rec.id in wanted:
                return now
            if rec.ended is not None:
                times.append(rec.ended + prune_after_s)
    if desired.game.on and desired.game.until is not None:
        times.append(desired.game.until)
    return max(min(times), now) if times else None
