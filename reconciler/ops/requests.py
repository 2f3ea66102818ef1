"""The operations that need a decision (run, note, release, tick): the same code runs inside
`res serve` (answering a CLI call over the socket) and in a CLI call with no loop running."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Awaitable, Callable

from reconciler.core.lifecycle import transition
from reconciler.core.models import LIVE, Phase, Plan
from reconciler.render.text import fmt_clock, fmt_gb

TickFn = Callable[[], Awaitable[Plan]]
MAX_PASSES = 6  # a request deferred by the per-pass start cap is decided within a few passes

if TYPE_CHECKING:
    from reconciler.ops.engine import Engine


def _detail(plan: Plan | None, job_id: str, kinds: tuple[str, ...]) -> dict | None:
    if plan is None:
        return None
    for a in plan.for_id(job_id):
        if a.kind in kinds:
            return a.detail
    return None


def outcome(engine: Engine, job_id: str, plan: Plan | None) -> tuple[int, str, dict] | None:
    """(exit code, line, the entry as data) once the request is decided, None while it is not yet."""
    from reconciler.ops.status import entry_json
    from reconciler.config.zone import zone_of
    from reconciler.render.reasons import queued_line

    rec = engine.store.get(job_id)
    if rec is None:
        return None
    req = rec.request
    if rec.phase == Phase.starting:
        return None  # not started yet: its unit is not seen (e.g. the loop that asked for it died)
    detail = _detail(plan, job_id, ("enqueue", "wait")) if rec.phase == Phase.queued else None
    if rec.phase == Phase.queued and detail is None and plan is not None and plan.for_id(job_id):
        return None  # requeued by this very pass (its starter died): the next pass decides it
    data = entry_json(rec, engine.paths, detail)
    zone = zone_of(engine.policy)
    if rec.phase == Phase.refused:
        why = rec.why or "refused"
        code = (rec.detail or {}).get("code")
        if code == "same_request" and (rec.detail or {}).get("as") not in (None, job_id):
            return outcome(engine, rec.detail["as"], plan)  # the entry that holds the request id answers
        if code == "caller_gone":
            return 1, f"res: {job_id} {why}", data
        return (3, why, data) if code in ("busy", "start_missed") else (1, f"res: {why}", data)
    if rec.phase in LIVE:
        if req.kind == "note":
            return 0, f"{job_id} noted: {fmt_gb(req.mem_gb)} until ~{fmt_clock(rec.expires(), zone)}{_owner(req)}; free it: res release {job_id}", data
        if rec.where == "cluster":
            partition = engine.policy.cluster.partition
            return 0, (f"{job_id} submitted to slurm job {rec.invocation or '?'}" + (f" (partition {partition})" if partition else "")
                       + f"; log {engine.paths.log(job_id, rec.log_dir)}; ETA ~{fmt_clock(rec.eta(), zone)}"), data
        return 0, f"{job_id} started{sized_words(req)}; log {engine.paths.log(job_id, rec.log_dir)}; ETA ~{fmt_clock(rec.eta(), zone)}", data
    if rec.phase == Phase.queued:
        reason = queued_line(detail, zone) if detail else "waiting"
        return 0, f"{job_id} queued, {reason}; cancel: res release {job_id}{sized_words(req)}", data
    if rec.phase == Phase.done:
        from reconciler.render.status import done_line

        if (rec.detail or {}).get("code") == "start_failed":
            return 1, f"res: {job_id} {rec.why}", data
        return 0, done_line(rec), data
    return 1, f"res: {job_id} {rec.phase.value}", data


def sized_words(req) -> str:
    """`; 1.4 GB, 1 cpu, 5 min from 12 earlier runs of make test`: what res chose of the size, and from
    what (empty when the caller gave every number)."""
    if not req.auto:
        return ""
    from reconciler.render.text import fmt_span

    said = {"mem": fmt_gb(req.mem_gb), "cpus": f"{req.cpus:g} cpu{'s' if req.cpus != 1 else ''}", "for": fmt_span(req.est_s)}
    return "; " + ", ".join(said[n] for n in ("mem", "cpus", "for") if n in req.auto) + f" from {req.sized_from or 'the policy'}"


def _owner(req) -> str:
    """What frees a note besides its time and `res release`."""
    if req.owner_pid is None:
        return ""
    return f", while pid {req.owner_pid}" + (f" ({req.owner_name})" if req.owner_name else "") + " runs"


def find_submitted(engine: Engine, kind: str, fields: dict):
    """The request these very fields were submitted as, if a loop that ended before answering
    recorded it (in the queue file or the records), else None. By its request id where it has one."""
    rid = fields.get("request_id")
    if isinstance(rid, str):
        return same_request(engine, rid)

    def same(req) -> bool:
        return (req.kind == kind and req.created == fields.get("created") and req.title == fields.get("title")
                and req.cmd == list(fields.get("cmd") or []) and req.cwd == (fields.get("cwd") or ""))

    queued, recorded = _known_requests(engine)
    return next((r for r in [*queued, *recorded] if same(r)), None)


def _known_requests(engine: Engine) -> tuple[list, list]:
    from reconciler.desired.reader import DesiredError, read_queue

    try:
        queued = read_queue(engine.paths)
    except DesiredError:
        queued = []
    return queued, [r.request for r in engine.store.records().values()]


def same_request(engine: Engine, rid: str):
    """The entry a request id already names, which asking again with it gets instead of a second job
    (issue 40): one whose job waits, runs or ran (core.admission.taken_request_ids). None: a new attempt
    (an earlier one was refused, withdrawn, or its caller gave up before any pass decided it). One
    written and not yet decided (asked twice at once) is not looked for here: the planner starts one
    of the two and answers the other with it (`same_request`)."""
    from reconciler.core.admission import taken_request_ids

    records = engine.store.with_request_id(rid)
    taken = taken_request_ids(records).get(rid)
    return records[taken].request if taken is not None else None


async def _as(engine: Engine, who: str | None, edit):
    """Run a writer edit on behalf of `who` (the caller's process chain; None: this process), on a
    worker thread: the writer's lock wait and its file work never stop the loop answering others."""
    import asyncio
    import copy

    writer = copy.copy(engine.writer)  # its own `who`: edits on other threads keep theirs
    writer.who = who
    return await asyncio.to_thread(edit, writer)


def scoped_lock(fields: dict, policy) -> dict:
    """The request's lock as it is recorded: `--lock KEY`, or the lock its title takes unasked (the
    policy's lock_title_words), within the main tree of its cwd's repository (core/locks.py)."""
    from reconciler.core.locks import lock_scope, scoped, title_lock

    key = fields.get("lock") or title_lock(str(fields.get("title") or ""), policy.lock_title_words)
    if not key:
        return fields
    if scoped(key):  # no cwd to look at
        return {**fields, "lock": key}
    from reconciler.config.gitrepo import main_tree

    return {**fields, "lock": lock_scope(key, main_tree(fields.get("cwd") or "/"))}


def placed(engine: Engine, fields: dict) -> dict:
    """The fields with `since` where the same agent's ask of the same command was refused for want of
    room moments ago (core/admission.first_asked, against the records the last pass read); a caller's own
    `since` is never taken: only the loop says where an ask stands."""
    from reconciler.core.admission import first_asked

    out = {k: v for k, v in fields.items() if k != "since"}
    inputs = engine.last_inputs
    owner, by, cmd = out.get("owner_pid"), out.get("by"), out.get("cmd")
    owner, by = owner if type(owner) is int else None, by if isinstance(by, str) else None
    if inputs is None or not isinstance(cmd, list):
        return out
    since = first_asked(owner, by, str(out.get("project") or ""), cmd, inputs[1], time.time())
    if since is not None:
        out["since"] = since
    return out


def learned_for(engine: Engine, project: str) -> dict | None:
    """What history learned of this project's commands, as the loop last published it (gate.json)."""
    from reconciler.config import gatefile

    learned = ((gatefile.read(str(engine.paths.gate)) or {}).get("learned") or {}).get(project or "")
    return learned if isinstance(learned, dict) else None


def auto_sized(fields: dict, learned: dict | None, policy) -> dict:
    """The fields with the sizes asked for as `auto` filled in (core/sizing.py: this project's history
    of the command, else the gate's table, else the policy's auto_* keys), and where they came from
    (`sized_from`)."""
    auto = fields.get("auto")
    if not auto:
        return fields
    from reconciler.config import gatefile
    from reconciler.core.gate import make_table
    from reconciler.core.sizing import policy_default, size_for

    table = make_table(gatefile.shipped_table_data(), policy.gate_heavy_add, policy.gate_heavy_remove)
    size = size_for(list(fields.get("cmd") or []), learned, table, policy_default(policy.rules()))
    chosen = {"mem": ("mem_gb", size.mem_gb), "cpus": ("cpus", min(size.cpus, float(os.cpu_count() or 1))),
              "for": ("est_s", size.est_s)}
    return {**fields, **dict(chosen[name] for name in auto if name in chosen), "sized_from": size.source}


def booked(fields: dict, learned: dict | None, policy) -> dict:
    """The fields with the job's book (DESIGN §5.1, core/sizing.book_for) where history has one below
    its cap: this project's runs of the same command peaked at most so much, × the policy's margin. A
    gated job's size is already the gate's guess from the same history: it is its book."""
    if fields.get("gated") or fields.get("book_gb") is not None or learned is None:
        return fields
    from reconciler.core.sizing import book_for

    book = book_for(list(fields.get("cmd") or []), learned, policy.margin)
    mem = fields.get("mem_gb")
    if book is None or not isinstance(mem, (int, float)) or book.gb >= mem:
        return fields
    return {**fields, "book_gb": book.gb, "booked_from": book.source}


# A one-shot `res run` (no loop) with a request still undecided after MAX_PASSES passes runs one more
# every this often, until its caller's deadline.
PASS_AGAIN_S = 0.2


async def submit(engine: Engine, tick: TickFn, kind: str, fields: dict, resume: bool = False,
                 on_accept=None, who: str | None = None, deadline: float | None = None) -> tuple[int, str, dict | None]:
    """Write the request and decide it, answering by its caller's deadline (`deadline`, else its
    fields' `answer_by`; epoch seconds): a request asked for now that no pass decided by then is said
    not to start, and never does (core.admission.caller_gone); a --queue request not decided by then is
    said to be queued, and waits. Asked again with the same request id, the entry it already names
    is answered, never a second job (same_request). `resume`: a loop took this request and ended
    before answering; decide the request it recorded, if it did. `on_accept(id)`: told the id as soon
    as the request is written (a caller that gives up waiting then knows what it left behind)."""
    from reconciler.core.errors import HeldElsewhere
    from reconciler.desired.reader import DesiredError
    from reconciler.recorded.errors import StoreBusy

    policy = engine.policy
    if deadline is None and isinstance(fields.get("answer_by"), (int, float)):
        deadline = float(fields["answer_by"])

    def prepare(given: dict) -> dict:  # on a worker thread: it stats the caller's cwd, reads gate.json
        given = placed(engine, given)
        if kind != "job":
            return given
        # (history is read where it can size or book the job: a gated job has its size from it already)
        wanted = given.get("auto") or (given.get("cmd") and not given.get("gated"))
        learned = learned_for(engine, given.get("project") or "") if wanted else None
        return scoped_lock(booked(auto_sized(given, learned, policy), learned, policy), policy)

    rid = fields.get("request_id") if isinstance(fields.get("request_id"), str) else None
    try:
        req = same_request(engine, rid) if rid is not None else (find_submitted(engine, kind, fields) if resume else None)
    except StoreBusy as e:  # nothing can be looked up, nothing decided: said, nothing written
        return 1, f"res: not {'noted' if kind == 'note' else 'started'}, nothing written: {e}", None
    if req is None:
        try:
            adder = engine.adder  # the loop's group commit; None: this call writes alone
            req = await (adder.add(fields, kind, who, prepare) if adder is not None
                         else _as(engine, who, lambda w: w.add(prepare(fields), kind)))
        except DesiredError as e:
            return 1, f"res: {e}", None
    if on_accept is not None:
        on_accept(req.id)
    plan, busy, passes = None, None, 0
    while True:
        try:
            plan = await tick()
            busy = None
        except HeldElsewhere as e:  # another process holds state.db (or the tick lock): no pass can decide it now
            busy, plan = e, None
        passes += 1
        try:
            decided = outcome(engine, req.id, plan)
        except StoreBusy as e:
            busy, decided = e, None
        if decided is not None:
            return decided
        if busy is not None or (engine.blocked and not (plan and plan.for_id(req.id))):
            break  # the pass could not admit anything (state.db held, systemd unreachable, a broken file)
        if passes >= MAX_PASSES and (deadline is None or req.queue):
            break
        if deadline is not None and time.time() >= deadline:
            break
        if passes >= MAX_PASSES:
            import asyncio

            await asyncio.sleep(PASS_AGAIN_S)
    why = str(busy) if busy is not None else "; ".join(" ".join(n.split()) for n in engine.blocked)
    return await undecided(engine, req, kind, why)


async def undecided(engine: Engine, req, kind: str, why: str) -> tuple[int, str, dict | None]:
    """The answer for a request no pass decided in time (`why`: what kept the passes from it, if
    known). Asked for now: withdrawn where it can be, and never started either way (its deadline
    passes, core.admission.caller_gone); with --queue: it waits, and its caller is told so."""
    from reconciler.desired.reader import DesiredError
    from reconciler.recorded.errors import StoreBusy

    try:
        rec = engine.store.get(req.id)
    except StoreBusy:
        rec = None  # nobody could have written its start either
    if rec is not None:
        if rec.phase == Phase.starting:
            from reconciler.ops.status import entry_json

            return 0, (f"{req.id} starting (its unit is being started); log {engine.paths.log(req.id, rec.log_dir)}; "
                       f"see res status {req.id}"), entry_json(rec, engine.paths)
        decided = outcome(engine, req.id, None)
        if decided is not None:
            return decided
    what = "noted" if kind == "note" else "started"
    if not req.queue and rec is None:
        # Asked for now, and nothing decided it: withdrawn rather than started by surprise whenever
        # the world can be seen again (its deadline keeps it from starting even where this fails).
        because = why or "no pass decided it in time"
        try:
            await _as(engine, None, lambda w: w.remove([req.id]))
        except DesiredError as e:
            from reconciler.core.admission import caller_gone

            if not caller_gone(req, time.time()):  # neither withdrawn nor past its deadline: it may start
                return 1, (f"res: {req.id} not decided ({because}) and could not be withdrawn: {e}; it may still "
                           f"start (res release {req.id} withdraws it)"), None
        return 1, f"res: {req.id} not {what}: {because}; withdrawn: it never starts (ask again)", \
            {"id": req.id, "kind": kind, "state": "withdrawn", "reason": {"code": "undecided", "why": because}}
    if req.queue and rec is None and hasattr(req, "request_id"):
        # Told it is queued: on record as such now (what the pass would have written had it run), so
        # that asking again with its request id is answered with this entry, not a second one.
        from reconciler.recorded.errors import StoreError
        from reconciler.recorded.store import ABSENT

        try:
            engine.store.put(transition(None, "enqueue", time.time(), request=req), expect_phase=ABSENT)
        except StoreError:
            pass  # state.db held: asked again meanwhile, the planner still starts only one of them
    pending = {"id": req.id, "kind": kind, "state": "queued", "reason": {"code": "undecided", "why": why or None}}
    if why:
        return 0, f"{req.id} queued, not decided yet: {why}; cancel: res release {req.id}", pending
    return 0, f"{req.id} accepted; not decided yet (see: res status {req.id})", pending


async def release_request(engine: Engine, tick: TickFn, request_id: str, who: str | None = None) -> tuple[int, str, dict | None]:
    """Release what a request id holds (`res hook` after a command admitted in place ran): its latest
    entry, if it still holds anything; a job is never stopped this way. Asked again, or for an id
    nothing holds: nothing to do, said as such (exit 0): a post-tool event may come twice or alone."""
    held = [rec for rec in engine.store.with_request_id(request_id).values()
            if rec.phase in (Phase.queued, *LIVE)]
    if not held:
        return 0, f"nothing held under request {request_id}", None
    latest = max(held, key=lambda rec: rec.request.number)
    return await release(engine, tick, latest.id, False, who=who)


async def release(engine: Engine, tick: TickFn, job_id: str, stop: bool, who: str | None = None) -> tuple[int, str, dict | None]:
    from reconciler.desired.reader import DesiredError
    from reconciler.ops.status import entry_json

    from reconciler.recorded.errors import StoreError

    def answer(code: int, line: str, rec) -> tuple[int, str, dict | None]:
        return code, line, (entry_json(rec, engine.paths) if rec is not None else None)

    engine.store.check_same()  # a state.db removed under the loop: said (StoreReplaced), nothing done
    try:
        rec = engine.store.get(job_id)
        if rec is None and engine.paths.log(job_id).is_file() and _in_queue(engine, job_id):
            # In queue.toml, not in state.db, and it ran before (its log is there: state.db was lost):
            # a pass first takes it back as what it is (its unit running, say), so that what is
            # stopped is the job. (An entry no pass decided yet is withdrawn as before: never started.)
            await tick()
            engine.store.check_same()
            rec = engine.store.get(job_id)
    except StoreError as e:
        # A row that cannot be read: releasing it drops it (its unit, if any, is left alone).
        try:
            await _as(engine, who, lambda w: w.remove([job_id]))
        except DesiredError:
            pass
        engine.store.delete(job_id)
        engine.store.bad.pop(job_id, None)
        return 0, f"{job_id} dropped: its record could not be read ({e})", {"id": job_id, "state": "dropped",
                                                                             "reason": {"code": "dropped"}}
    if rec is not None and rec.phase in LIVE and rec.request.kind == "job" and not stop:
        return answer(1, f"res: {job_id} is running; --stop to kill it", rec)
    if rec is not None and rec.phase not in LIVE and rec.phase != Phase.queued:
        try:
            await _as(engine, who, lambda w: w.remove([job_id]))
        except DesiredError:
            pass
        return answer(0, f"{job_id} already {rec.phase.value}" + (f" ({rec.why})" if rec.why else ""), rec)
    if rec is not None and (rec.phase in LIVE or rec.phase == Phase.queued) and not rec.released:
        # The user's word, on record before the entry goes: only a released entry's leaving the
        # file stops or cancels it (a file deleted or cut by hand does not).
        marked = transition(rec, "release", time.time())
        if engine.store.put(marked, expect_phase=rec.phase):
            rec = marked
    try:
        removed = await _as(engine, who, lambda w: w.remove([job_id]))
    except DesiredError as e:
        return answer(1, f"res: {e}", rec)
    if rec is None and not removed:
        return await _release_unit(engine, job_id, stop)
    from reconciler.core.errors import HeldElsewhere

    for _ in range(MAX_PASSES * 2):
        try:
            await tick()
        except HeldElsewhere as e:  # its release is on record and its entry gone: the first pass that can acts
            return answer(1, f"res: {job_id} released, not yet {'stopped' if stop else 'done'}: {e}; the first pass "
                             "that can write state.db carries it out", rec)
        engine.store.check_same()  # removed under the loop meanwhile: not "released", said as it is
        rec = engine.store.get(job_id)
        if rec is None or rec.phase not in LIVE and rec.phase != Phase.queued:
            break
    if rec is None:
        return 0, f"{job_id} released", {"id": job_id, "state": "released", "reason": {"code": "released"}}
    if rec.phase in LIVE or rec.phase == Phase.queued:
        return answer(1, f"res: {job_id} is still {rec.phase.value}; see res status {job_id}", rec)
    return answer(0, f"{job_id} released ({rec.phase.value}" + (f", rc={rec.rc}" if rec.rc is not None else "") + ")", rec)


def _in_queue(engine: Engine, job_id: str) -> bool:
    from reconciler.desired.reader import DesiredError, read_queue

    try:
        return any(r.id == job_id for r in read_queue(engine.paths))
    except DesiredError:
        return False


async def _release_unit(engine: Engine, job_id: str, stop: bool) -> tuple[int, str, dict | None]:
    """An id neither state.db nor queue.toml knows, whose unit may still run (state.db was lost after
    its entry left the file): `--stop` stops the unit; without it, the line says it runs."""
    runtime = engine.runtime
    if not getattr(engine, "connected", False):
        return 1, f"res: no such entry: {job_id}", None
    try:
        obs = (await runtime.observe([job_id])).get(job_id)
    except Exception:  # noqa: BLE001 - nothing to tell from: as before
        obs = None
    from reconciler.core.models import ALIVE

    if obs is None or obs.state not in ALIVE:
        return 1, f"res: no such entry: {job_id}", None
    unit = runtime.unit_name(job_id)
    if not stop:
        return 1, (f"res: {job_id} has no record (state.db lost it) but its unit {unit} runs; "
                   f"--stop to stop it"), None
    await runtime.stop(job_id)
    return 0, (f"{job_id} stopped: state.db had no record of it (lost?), its unit {unit} was running; "
               "stopped as asked"), {"id": job_id, "state": "released", "reason": {"code": "released"}}


def request_hint(engine: Engine, kind: str, fields: dict) -> str | None:
    """`hint: …` when the request asks for more than 2× what its kind needed before (res hist)."""
    from reconciler.core.hist import suggestion_for
    from reconciler.render.hist import hint_for

    try:
        records = finished_runs(engine.store)
        return hint_for(float(fields["mem_gb"]), float(fields["est_s"]),
                        suggestion_for(records, fields.get("project", ""), fields.get("title", "")))
    except Exception:  # noqa: BLE001 - a hint is never worth failing a request for
        return None


def finished_runs(store) -> list:
    """What `res hist` and the request hint learn from: finished records (filtered in SQL), then
    the pruned history."""
    return list(store.records([Phase.done]).values()) + store.history()
