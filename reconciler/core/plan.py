"""plan(desired, recorded, observed, now, policy) -> Plan: every decision of DESIGN §5.3, pure.

No I/O, no clock, no randomness: all it needs is in its arguments, so `res reconcile --dry-run
--world FILE` reproduces any decision.
"""
from __future__ import annotations

import signal

from reconciler.core.attachments import holder_name
from reconciler.core.spend import running_spend_usd, spend_is_estimated, unknown_format
from reconciler.core.hist import mem_flag, suggest_mem_gb
from reconciler.core.admission import admit, entry_tag, spent_today
from reconciler.core.capacity import HOLDING, capacity
from reconciler.core.models import ALIVE, TERMINAL, Action, Desired, ExitObs, JobRecord, Phase, Plan, Request, World
from reconciler.core.rules import Rules
from reconciler.core.game import game_actions
from reconciler.core.ladder import EVICTED, ladder_actions, raised_book, rung
from reconciler.core.sessions import session_actions
from reconciler.core.quantities import GIB, UTC, Zone
from reconciler.core.wake import wake_at

PRUNE_AFTER_S = 24 * 3600
OUTSIDE_STOP = ("TERM", "INT", "HUP")  # the signals of a stop request (systemctl stop, kill, ^C)
ATTACH_FAILURES_MAX = 3  # attachments in a row that fail before the job is failed and stopped


def plan(desired: Desired, records: dict[str, JobRecord], world: World, now: float, policy: Rules,
         me: str | None = None, pricing_error: str | None = None, zone: Zone = UTC, wake: bool = False) -> Plan:
    """`me`: the attachment holder id of the reconciler that will apply the plan (None: a dry run,
    which claims nothing). `pricing_error`: the pricing table could not be read; no agent session
    may start (a broken table is never a silently weaker cap). `zone`: where the day of
    daily_cost_usd begins. `wake`: also decide when the pass after this one is due by the clock
    (`Plan.next_at`, core/wake.py, from the policy's tick_s and sweep_s): the loop's plans.

    Each action carries its reason as data (`detail`, with a stable `code`); its text is made at the
    edge (render.reasons.explain)."""
    out = Plan()
    if not desired.queue_ok:
        out.notices.append(f"{desired.queue_error}; starting and stopping nothing because of it")
    if not world.ok:
        out.notices.append("could not observe jobs (" + "; ".join(world.errors) + "); acting on none of them")
    if world.cluster_ok is False and world.unobserved:
        out.notices.append(f"could not observe the cluster ({world.cluster_error}); "
                           f"{', '.join(sorted(world.unobserved))} left as they are until it answers")
    out.notices.extend(f"{line}; set aside: not started, nothing stopped for it" for line in desired.set_aside)
    # Held entries are in the file but unusable: not taken as released, never admitted.
    wanted = {r.id for r in desired.requests} | set(desired.held)
    ended: set[str] = set()  # records that stop holding resources in this plan

    for rec in sorted(records.values(), key=lambda r: r.request.number):
        for action in _lifecycle(rec, desired, wanted, world, now, policy, me):
            out.actions.append(action)
            if action.kind in ("settle", "expire", "requeue", "retry"):
                ended.add(rec.id)

    holding = [r for r in records.values() if r.phase in HOLDING and r.id not in ended]
    cap = capacity(policy, desired.game, world, holding, now)
    out.budget_mem_gb, out.budget_cpus = cap.mem_gb, cap.cpus
    out.rung, out.rung_why = rung(policy, world, cap)

    def may_act(rec: JobRecord) -> bool:  # as _lifecycle: what this reconciler holds, or may claim
        return (rec.id not in ended and rec.id not in world.unobserved
                and not (rec.lease_live(now, world.gone_holders) and rec.attached_by != me))

    out.actions.extend(ladder_actions(records, world, cap, policy, may_act))
    if desired.queue_ok and world.ok:
        spent = spent_today(records, now, zone)
        out.actions.extend(admit(desired, records, cap, now, policy, spent, pricing_error, world))
    # The user's side: game mode on the agents slice, sessions kept in it (each only if observed).
    out.actions.extend(game_actions(desired, world, now, policy))
    out.actions.extend(session_actions(world, policy))
    if wake:
        out.next_at = wake_at(out, desired, records, world, now, policy, PRUNE_AFTER_S)
    return out


# ---------------------------------------------------------------- running, ended, released


def _lifecycle(rec: JobRecord, desired: Desired, wanted: set[str], world: World, now: float, policy: Rules,
               me: str | None) -> list[Action]:
    """What a recorded job or note needs this pass (DESIGN §5.3's table, row by row)."""
    req = rec.request
    if rec.phase == Phase.queued and (not desired.queue_ok or rec.id in wanted):
        return []  # waits in the queue: admission decides it (the common case: thousands a pass)
    gone = desired.queue_ok and rec.id not in wanted  # its entry left queue.toml
    tag = entry_tag(req)
    if rec.phase in TERMINAL:
        return _finished(rec, desired.queue_ok and not gone, now, tag)
    if rec.phase == Phase.queued:  # gone from queue.toml (one still in it returned above)
        if not rec.released:
            return [_restore(rec, tag)]
        # (a queued note too: the gate's booking in place, withdrawn when the gate's wait ran out)
        return [Action(kind="cancel", id=rec.id, detail={"code": "cancelled"}, **tag)]
    if req.kind == "note":
        return _note(rec, gone, world, now, tag) if rec.phase == Phase.running else []
    # starting / running / exited: only what could be observed is acted on, and only by the
    # reconciler that holds the job's attachment (or may claim it: no live lease of another). A
    # cluster job while the cluster does not answer: nothing (local work goes on).
    if not world.ok or rec.id in world.unobserved or (rec.lease_live(now, world.gone_holders) and rec.attached_by != me):
        return []
    return _live_job(rec, gone, world, now, policy, me, tag)


def _finished(rec: JobRecord, in_file: bool, now: float, tag: dict) -> list[Action]:
    if in_file:
        return [Action(kind="retire", id=rec.id, detail={"code": "retire", "phase": rec.phase.value}, **tag)]
    if rec.ended is not None and now - rec.ended > PRUNE_AFTER_S:
        return [Action(kind="prune", id=rec.id, detail={"code": "prune"}, **tag)]
    return []


def _note(rec: JobRecord, gone: bool, world: World, now: float, tag: dict) -> list[Action]:
    """A granted note ends when its owner does, at its expiry, or when it is released. A booking in
    place ends with the most its command was seen using (its record's peak)."""
    peak = world.note_peak_gb.get(rec.id)
    seen = {} if peak is None else {"peak_gb": peak}
    owner = rec.request.owner_pid
    if owner is not None and world.ok and owner not in world.live_pids:
        return [Action(kind="expire", id=rec.id, detail={"code": "owner_gone", "pid": owner, **seen}, **tag)]
    expires = rec.expires()
    if expires is not None and now >= expires:
        return [Action(kind="expire", id=rec.id, detail={"code": "expired", "at": expires, **seen}, **tag)]
    if gone:
        if not rec.released:
            return [_restore(rec, tag)]
        return [Action(kind="expire", id=rec.id, detail={"code": "released", **seen}, **tag)]
    return []


def _live_job(rec: JobRecord, gone: bool, world: World, now: float, policy: Rules, me: str | None, tag: dict) -> list[Action]:
    obs = world.jobs.get(rec.id)
    alive = obs is not None and obs.state in ALIVE
    # An exit record counts only once the unit has ended (its own stop step writes it last), and only
    # if it is this run's: a job, or a neighbour, cannot end a running job by writing one.
    ex = obs.exit if obs is not None and not alive else None
    foreign = ex is not None and rec.invocation is not None and ex.invocation != rec.invocation
    if foreign:
        ex = None
    if rec.phase == Phase.starting and ex is None:  # (one that started and already ended is settled below)
        return _starting(rec, alive, world, now, tag)
    acts = []
    if me is not None and rec.attached_by != me:
        acts.append(Action(kind="reattach", id=rec.id, detail=_lapsed(rec, now, world.gone_holders), **tag))
    if ex is not None:
        rc, peak, outcome = settle_outcome(rec, ex)
        took = ex.at - rec.started if rec.started and ex.at else None
        if outcome["code"] == EVICTED and not (ex.code == "exited" and rc == 0):
            acts.append(_evicted_retry(rec, peak, rc, ex.at or None, took, tag, ex.oom_kills, ex.cpu_s))
            return acts
        if outcome["code"] == "memory_limit" and may_retry(rec.request):
            grown = suggest_mem_gb(rec.request.mem_gb, killed=True)
            acts.append(Action(kind="retry", id=rec.id, peak_gb=peak, at=ex.at or None, rc=rc,
                               detail={"code": "retry", "killed_at_gb": rec.request.mem_gb, "mem_gb": grown,
                                       "peak_gb": peak, "took_s": took}, **tag))
            return acts
        if outcome["code"] == "node_failure" and may_requeue(rec, policy):
            # The same entry again, a new attempt: Slurm does not place it on a node that is down.
            acts.append(Action(kind="retry", id=rec.id, peak_gb=peak, at=ex.at or None, rc=rc,
                               detail={"code": "retry", "cause": "node_failure", "place": obs.place,
                                       "requeue": (rec.request.node_requeues or 0) + 1,
                                       "of": policy.cluster_requeue_on_node_failure, "took_s": took}, **tag))
            return acts
        acts.append(Action(kind="settle", id=rec.id, rc=rc, peak_gb=peak, at=ex.at or None,
                           detail={**outcome, "rc": rc, "peak_gb": peak, "took_s": took,
                                   **({"cpu_s": ex.cpu_s} if ex.cpu_s is not None else {})}, **tag))
    elif not alive and rec.stop_reason is not None:
        # res stopped it (`res release --stop`, a budget, …) and its unit went without an exit record
        # of its own: it ended as asked, its exit code unknown. Said so, not "lost".
        acts.append(Action(kind="settle", id=rec.id, rc=None, peak_gb=None,
                           detail={"code": rec.stop_code or "stopped", "stop_reason": rec.stop_reason,
                                   "no_exit_record": "foreign_exit" if foreign else "vanished"}, **tag))
    elif not alive:
        acts.append(Action(kind="settle", id=rec.id, rc=None, peak_gb=None,
                           detail={"code": "lost", "lost": "foreign_exit" if foreign else "vanished"}, **tag))
    elif rec.stop_reason is None:
        if gone:
            acts.append(Action(kind="stop", id=rec.id, detail={"code": "released"}, **tag) if rec.released
                        else _restore(rec, tag))
        elif (trip := budget_trip(rec, policy, now, obs.log_bytes if obs is not None else None)) is not None:
            acts.append(Action(kind="stop", id=rec.id, detail=trip, **tag))
    return acts


def _evicted_retry(rec: JobRecord, peak: float | None, rc: int | None, at: float | None, took: float | None,
                   tag: dict, oom_kills: int = 0, cpu_s: float | None = None) -> Action:
    """A job the ladder stopped above its book (DESIGN §5.1) goes back to the head of the queue, the
    same entry, a new attempt, with its book raised (core/ladder.raised_book)."""
    req = rec.request
    stops = len(rec.evictions) + 1
    used = (rec.detail or {}).get("used_gb")  # what the ladder saw it use when it stopped it
    book, source = raised_book(req.book, max(peak or 0.0, used or 0.0), None if req.gated else req.mem_gb, stops)
    to_gb = book if book is not None else req.mem_gb
    return Action(kind="retry", id=rec.id, peak_gb=peak, at=at, rc=rc,
                  detail={"code": "retry", "cause": EVICTED, "stops": stops, "used_gb": used, "book_gb": req.book, "to_gb": to_gb,
                          "at_cap": book is None and not req.gated, "booked_from": source, "peak_gb": peak,
                          "took_s": took, "oom_kills": oom_kills, "cpu_s": cpu_s}, **tag)


def may_retry(req: Request) -> bool:
    """An auto-sized job killed at its memory limit is started again once, bigger (DESIGN §5.9): res
    guessed, so res tries again; a size the caller gave is the caller's (its line suggests one), a
    gated job has no limit to be killed at, and an agent session would run its whole turn again."""
    return ("mem" in req.auto and req.grown_from_gb is None and req.kind == "job" and not req.gated
            and req.agent == "none")


def may_requeue(rec: JobRecord, policy: Rules) -> bool:
    """A cluster job whose node failed under it is submitted again, up to the policy's
    cluster_requeue_on_node_failure times: what failed was the node, not the job. Never an agent
    session (its whole turn would run, and be paid for, again)."""
    req = rec.request
    return (rec.where == "cluster" and req.kind == "job" and req.agent == "none"
            and (req.node_requeues or 0) < policy.cluster_requeue_on_node_failure)


def _starting(rec: JobRecord, alive: bool, world: World, now: float, tag: dict) -> list[Action]:
    """`starting` is on record, the unit not yet seen ended: seen alive, or its starter is gone."""
    if alive:
        return [Action(kind="running", id=rec.id, detail={"code": "started"}, **tag)]
    if rec.attached_by in world.gone_holders:
        return [Action(kind="requeue", id=rec.id, detail={"code": "holder_gone", "holder": holder_name(rec.attached_by)},
                       **tag)]
    if rec.lease_until is not None and now > rec.lease_until:
        return [Action(kind="requeue", id=rec.id, detail={"code": "lease_lapsed"}, **tag)]
    return []


def _restore(rec: JobRecord, tag: dict) -> Action:
    """An entry that left queue.toml without `res release` (the file deleted or laid down again, an
    edit by hand): not the user's word to stop it. It is written back, and the job goes on."""
    stop = rec.request.kind == "job" and rec.phase != Phase.queued
    return Action(kind="restore", id=rec.id, detail={"code": "restore", "stop": stop}, **tag)


def _lapsed(rec: JobRecord, now: float, gone: list[str]) -> dict:
    if rec.attached_by is None:
        return {"code": "unheld"}
    holder = holder_name(rec.attached_by)
    if rec.attached_by in gone:
        return {"code": "holder_gone", "holder": holder}
    ago = now - rec.lease_until if rec.lease_until else None
    return {"code": "lease_lapsed", "holder": holder, "ago_s": ago}


def effective_limits(req: Request, policy: Rules) -> tuple[float, int, int]:
    """(max cost USD, max duration s, max iterations) of a job; 0 = no limit. A job's own flags win;
    agent sessions get the policy's defaults."""
    session = req.session

    def pick(own, default):
        return own if own is not None else (default if session else 0)

    return (pick(req.max_cost_usd, policy.max_cost_usd), pick(req.max_duration_s, policy.max_duration),
            pick(req.max_iterations, policy.max_iterations))


def budget_trip(rec: JobRecord, policy: Rules | None, now: float, log_bytes: int | None = None) -> dict | None:
    """The reason (a detail) a job is over one of its budgets (DESIGN §5.5), or None. Codes:
    `attach_failed`, `log_limit`, `budget` (with `budget`: cost, duration or iterations)."""
    if rec.attach_failures >= ATTACH_FAILURES_MAX:
        return {"code": "attach_failed", "failures": rec.attach_failures, "error": rec.last_error}
    if policy is None:  # settle_outcome's question: the attachment's verdict alone
        return None
    limit_gb = policy.max_log_gb
    if limit_gb and log_bytes is not None and log_bytes > limit_gb * GIB:
        return {"code": "log_limit", "limit_gb": limit_gb, "written_gb": log_bytes / GIB}
    max_cost, max_duration, max_iterations = effective_limits(rec.request, policy)
    spend = running_spend_usd(rec.digest)
    if max_cost and spend > max_cost:
        d = rec.digest
        return {"code": "budget", "budget": "cost", "used": spend, "limit": max_cost,
                "estimated": spend_is_estimated(d), "messages": d.messages if d is not None else 0,
                "reported": d.spend_usd if d is not None and d.result_seen else None}
    if max_duration and rec.started is not None and now - rec.started > max_duration:
        return {"code": "budget", "budget": "duration", "used": now - rec.started, "limit": max_duration}
    iterations = rec.digest.iterations if rec.digest else 0
    if max_iterations and iterations > max_iterations:
        return {"code": "budget", "budget": "iterations", "used": iterations, "limit": max_iterations}
    return None


def settle_outcome(rec: JobRecord, ex: ExitObs) -> tuple[int | None, float | None, dict]:
    """(rc, peak GB, outcome) of an ended job, from the exit record its unit wrote. The outcome's
    codes (stable, docs/agent-interface.md): the stop's own (`released`, `budget`, `attach_failed`,
    … with its text as recorded when it was stopped), `memory_limit`, `exec_failed`, `exited`,
    `stopped_outside`, `signal`."""
    req = rec.request
    peak = round(ex.peak_gb, 3) if ex.peak_gb is not None else None
    if ex.code == "exited":
        rc = int(ex.status) if ex.status.lstrip("-").isdigit() else None
    else:
        try:
            rc = 128 + signal.Signals["SIG" + ex.status].value
        except KeyError:
            rc = None
    oom = ex.result == "oom-kill" or (ex.oom_kills > 0 and ex.code != "exited")
    # Processes of it killed at the limit (test workers, compiler jobs) and it failed: its memory was
    # the trouble, even though its main process exited by itself (`pytest -n 16` in 256 MB: rc 3).
    workers_killed = not oom and ex.oom_kills > 0 and ex.code == "exited" and rc not in (0, None)
    if rec.stop_reason:
        outcome = {"code": rec.stop_code or "stopped", "stop_reason": rec.stop_reason}
    elif rec.attach_failures >= ATTACH_FAILURES_MAX:
        outcome = budget_trip(rec, None, 0)
    elif oom or workers_killed:
        outcome = {"code": "memory_limit", "mem_gb": req.mem_gb, "peak_gb": peak, "try_mem": mem_flag(suggest_mem_gb(req.mem_gb, killed=True))}
        if workers_killed:
            outcome.update(rc=rc, oom_kills=ex.oom_kills)
    elif ex.result == "timeout":  # a cluster's time limit (Slurm's TIMEOUT): --for, in whole minutes
        outcome = {"code": "time_limit", "limit_s": -(-req.est_s // 60) * 60}
    elif ex.result == "node-fail":
        outcome = {"code": "node_failure"}
    elif ex.code == "exited" and rc == 203:
        outcome = {"code": "exec_failed"}
    elif ex.code == "exited":
        outcome = {"code": "exited", "rc": rc}
    elif ex.status in OUTSIDE_STOP:
        # res asked for no stop (no stop_reason): someone else did, e.g. `systemctl --user stop`.
        outcome = {"code": "stopped_outside", "signal": ex.status}
    else:
        outcome = {"code": "signal", "signal": ex.status}
    return rc, peak, outcome


def agent_outcome(rec: JobRecord, outcome: dict) -> dict:
    """The outcome with an agent session's own verdict, once its output is read to the end: a failure
    it reported (a result event, or an error signal without one) is the reason, unless we stopped it
    ourselves or the kernel killed it at its memory limit. An outcome the digest took from the exit
    code alone says nothing the exit's own outcome (exit code, signal, stopped from outside) does not
    say better."""
    d = rec.digest
    verdict = _agent_verdict(rec, outcome)
    if rec.request.session and d is not None and (d.model_note or d.set_aside):
        # how the spend was counted, said whatever else decided: never a silent guess
        notes = {"dearest_rates": d.model_note} if d.model_note else {}
        if d.set_aside:
            notes.update(set_aside=d.set_aside, set_aside_note=d.set_aside_note)
        verdict = {**verdict, **notes}
    return verdict


def _agent_verdict(rec: JobRecord, outcome: dict) -> dict:
    d = rec.digest
    if rec.request.session and unknown_format(d):  # said, whatever else decided
        return {**outcome, "unknown_format": True, "lines": d.lines}
    if not rec.request.session or d is None or d.outcome != "failure" or rec.stop_reason \
            or outcome.get("code") == "memory_limit":
        return outcome
    if not d.result_seen and not d.failure_signal:
        return outcome
    return {"code": "agent_failed", "failure": d.failure_reason}
