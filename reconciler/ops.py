"""The operations that need a decision (run, note, release, tick): the same code runs inside
`res serve` (answering a CLI call over the socket) and in a CLI call with no loop running."""
from __future__ import annotations

from typing import Awaitable, Callable

from .models import LIVE, Phase, Plan
from .units import fmt_clock

TickFn = Callable[[], Awaitable[Plan]]
MAX_PASSES = 6  # a request deferred by the per-pass start cap is decided within a few passes


def _reason(plan: Plan | None, job_id: str, kinds: tuple[str, ...]) -> str | None:
    if plan is None:
        return None
    for a in plan.for_id(job_id):
        if a.kind in kinds:
            return a.reason
    return None


def outcome(engine, job_id: str, plan: Plan | None) -> tuple[int, str] | None:
    """(exit code, line) once the request is decided, None while it is not yet."""
    rec = engine.store.get(job_id)
    if rec is None:
        return None
    req = rec.request
    if rec.phase == Phase.refused:
        why = rec.why or "refused"
        return (3, why) if why.startswith("busy:") else (1, f"res: {why}")
    if rec.phase == Phase.starting:
        return None  # not started yet: its unit is not seen (e.g. the loop that asked for it died)
    if rec.phase in LIVE:
        if req.kind == "note":
            return 0, f"{job_id} noted: {req.mem_gb:g} GB until ~{fmt_clock(rec.expires())}; free it: res release {job_id}"
        eta = rec.eta()
        return 0, f"{job_id} started; log {engine.paths.log(job_id)}; ETA ~{fmt_clock(eta)}"
    if rec.phase == Phase.queued:
        reason = _reason(plan, job_id, ("enqueue", "wait")) or "waiting"
        return 0, f"{job_id} queued, {reason}; cancel: res release {job_id}"
    if rec.phase == Phase.done:
        return (1 if rec.why and rec.why.startswith("start failed") else 0,
                f"{job_id} done rc={rec.rc} ({rec.why})" if not (rec.why or "").startswith("start failed")
                else f"res: {job_id} {rec.why}")
    return 1, f"res: {job_id} {rec.phase.value}"


def find_submitted(engine, kind: str, fields: dict):
    """The request these very fields were submitted as, if a loop that ended before answering
    recorded it (in the queue file or the records), else None."""
    from .desired import DesiredError, read_queue

    def same(req) -> bool:
        return (req.kind == kind and req.created == fields.get("created") and req.title == fields.get("title")
                and req.cmd == list(fields.get("cmd") or []) and req.cwd == (fields.get("cwd") or ""))

    try:
        queued = read_queue(engine.paths)
    except DesiredError:
        queued = []
    recorded = [r.request for r in engine.store.records().values()]
    return next((r for r in [*queued, *recorded] if same(r)), None)


async def submit(engine, tick: TickFn, kind: str, fields: dict, resume: bool = False) -> tuple[int, str]:
    """`resume`: a loop took this request and ended before answering; decide the request it
    recorded, if it did, rather than add it a second time."""
    from .desired import DesiredError

    req = find_submitted(engine, kind, fields) if resume else None
    if req is None:
        try:
            req = engine.writer.add(fields, kind)
        except DesiredError as e:
            return 1, f"res: {e}"
    plan = None
    for _ in range(MAX_PASSES):
        plan = await tick()
        decided = outcome(engine, req.id, plan)
        if decided is not None:
            return decided
        if engine.blocked and not (plan and plan.for_id(req.id)):
            break  # the pass could not admit anything (systemd unreachable, a broken file): say why
    why = "; ".join(" ".join(n.split()) for n in engine.blocked)
    if why and not req.queue and engine.store.get(req.id) is None:
        # Asked for now, and nothing can be decided now: withdraw it rather than start it by
        # surprise whenever the world can be seen again.
        try:
            engine.writer.remove([req.id])
        except DesiredError as e:
            return 1, f"res: {req.id} not decided ({why}) and could not be withdrawn: {e}"
        if engine.store.get(req.id) is None:
            return 1, f"res: {req.id} not {'noted' if kind == 'note' else 'started'}: {why}"
    if why:
        return 0, f"{req.id} queued, not decided yet: {why}; cancel: res release {req.id}"
    return 0, f"{req.id} accepted; not decided yet (see: res status {req.id})"


async def release(engine, tick: TickFn, job_id: str, stop: bool) -> tuple[int, str]:
    from .desired import DesiredError

    rec = engine.store.get(job_id)
    if rec is not None and rec.phase in LIVE and rec.request.kind == "job" and not stop:
        return 1, f"res: {job_id} is running; --stop to kill it"
    if rec is not None and rec.phase not in LIVE and rec.phase != Phase.queued:
        try:
            engine.writer.remove([job_id])
        except DesiredError:
            pass
        return 0, f"{job_id} already {rec.phase.value}" + (f" ({rec.why})" if rec.why else "")
    try:
        removed = engine.writer.remove([job_id])
    except DesiredError as e:
        return 1, f"res: {e}"
    if rec is None and not removed:
        return 1, f"res: no such entry: {job_id}"
    for _ in range(MAX_PASSES * 2):
        await tick()
        rec = engine.store.get(job_id)
        if rec is None or rec.phase not in LIVE and rec.phase != Phase.queued:
            break
    if rec is None:
        return 0, f"{job_id} released"
    if rec.phase in LIVE or rec.phase == Phase.queued:
        return 1, f"res: {job_id} is still {rec.phase.value}; see res status {job_id}"
    return 0, f"{job_id} released ({rec.phase.value}" + (f", rc={rec.rc}" if rec.rc is not None else "") + ")"


def request_hint(engine, kind: str, fields: dict) -> str | None:
    """`res: hint: …` when the request asks for more than 2× what its kind needed before (res hist)."""
    from .hist import hint_for, suggestion_for

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
