"""Carry out a plan's actions (DESIGN §2 step 5). Each action is idempotent and written to state.db
in its own transaction with a compare-and-set on the phase it expects, so a pass cut off anywhere
can be run again safely.

Every action kind has its handler in `Executor.HANDLERS` (tests/pure/test_executor_map.py holds it to
ActionKind); a record is changed only by the lifecycle event the plan's action names
(core/lifecycle.planned), and after a start by the event the lifecycle gives the runtime's answer
(core/lifecycle.after_start)."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import stat
import time

from reconciler.config.environ import resolve_program
from reconciler.core.lifecycle import after_start, planned
from reconciler.core.models import Action, JobRecord, Phase, Request, copy
from reconciler.core.plan import agent_outcome
from reconciler.config.paths import Paths
from reconciler.runtime import JobSpec, Runtime, RuntimeBusy, RuntimeUnavailable, UnitExists

log = logging.getLogger("res.executor")


class Executor:
    def __init__(self, paths: Paths, store, runtime: Runtime | None, writer, policy, holder: str, streamer=None,
                 cluster: Runtime | None = None):
        self.paths, self.store, self.runtime, self.writer, self.policy, self.holder = paths, store, runtime, writer, policy, holder
        self.cluster = cluster  # the cluster's runtime (Slurm), for jobs whose record says they run there
        self.streamer = streamer  # reads a job's output into its digest (attach.Streamer)
        self._records: dict[str, JobRecord] = {}
        self._lost: set[str] = set()

    def begin_pass(self, records: dict[str, JobRecord]) -> None:
        """Before a pass's actions: `records` is the pass's view, updated as attachments are claimed."""
        self._records = records
        self._lost = set()  # jobs whose attachment another instance took: act on nothing else of theirs

    async def apply(self, action: Action, requests: dict[str, Request], now: float) -> None:
        if action.id in self._lost:
            return
        await self.HANDLERS[action.kind](self, action, requests.get(action.id), self._records.get(action.id), now)

    async def _reattach(self, a, req, rec, now):
        """Claim the attachment of a live job nobody holds (or whose holder's lease lapsed): a
        compare-and-set on the holder the plan saw, so two instances never both hold it. The pass's
        later actions for the job see the claimed record."""
        claimed = planned(rec, a, now, holder=self.holder, lease_s=self.policy.attach_lease_s)
        if self.store.put(claimed, expect_phase=rec.phase, expect_holder=rec.attached_by):
            self._records[a.id] = claimed
        else:
            self._lost.add(a.id)

    # -------------------------------------------------------------- bookkeeping

    async def _nothing(self, a, req, rec, now):
        """A kind that asks for nothing to be done: a queued entry that stays queued (its position
        and ETA are published with the pass), an entry added by hand that is only shown."""

    async def _enqueue(self, a, req, rec, now):
        self.store.put(planned(None, a, now, request=req), expect_phase=None)

    async def _grant(self, a, req, rec, now):
        if self._refused_late(req, rec, now):  # a note asked for now whose caller stopped waiting
            return
        self.store.put(planned(rec, a, now, request=req), expect_phase=rec.phase if rec else None)

    async def _refuse(self, a, req, rec, now):
        self.store.put(planned(rec, a, now, request=req, why=a.reason, detail=a.detail),
                       expect_phase=rec.phase if rec else None)

    async def _running(self, a, req, rec, now):
        self.store.put(planned(rec, a, now), expect_phase=Phase.starting)

    async def _cancel(self, a, req, rec, now):
        self.store.put(planned(rec, a, now), expect_phase=Phase.queued)

    async def _expire(self, a, req, rec, now):
        if self.store.put(planned(rec, a, now, why=a.reason, detail=a.detail), expect_phase=Phase.running):
            await asyncio.to_thread(self.writer.remove, [rec.id])

    async def _recover(self, a, req, rec, now):
        """An entry state.db lost: its unit is taken back as running (the next pass attaches to it,
        or settles it from its exit record), or, when only its log is left, it is settled as lost."""
        if a.detail["code"] == "unit":
            new = planned(None, a, now, request=req, unit=self.runtime.unit_name(req.id))
        else:
            new = planned(None, a, now, request=req, detail={"code": "lost"},
                          why="lost: state.db had no record of it, but it ran before (its log is there); not started again")
        from reconciler.recorded.store import ABSENT

        self.store.put(new, expect_phase=ABSENT)
        log.warning("recover %s: %s", a.id, a.reason)

    async def _restore(self, a, req, rec, now):
        await asyncio.to_thread(self.writer.restore, [rec.request])
        log.warning("restore %s: %s", a.id, a.reason)

    async def _retire(self, a, req, rec, now):
        await asyncio.to_thread(self.writer.remove, [a.id])

    async def _prune(self, a, req, rec, now):
        self.store.prune(ids=[a.id])

    async def _requeue(self, a, req, rec, now):
        # Its log is not moved aside: the next start is the same attempt again.
        self.store.put(planned(rec, a, now), expect_phase=Phase.starting)

    # -------------------------------------------------------------- the user's side (DESIGN §5.6)

    async def _set(self, a, req, rec, now):
        await self._side().set_unit_properties(a.id, a.props)
        log.info("set %s: %s", a.id, a.reason)

    async def _adopt(self, a, req, rec, now):
        """Move a session and its children into a new scope in the agents slice. Only what is still
        where the pass saw it goes: pids that ended, or children that left the session's cgroup
        since (one missing pid would fail the whole move); a session already in the slice (another
        reconciler moved it) is left alone."""
        from reconciler.observed.procs import alive, cgroup_of

        description = f"res: agent session pid {a.pids[0]}"
        name = a.id
        for attempt in range(3):
            home = cgroup_of(a.pids[0])
            if home is None or not alive(a.pids[0]) or self._in_agents_slice(a.pids[0]):
                return  # the session ended, or it is where it should be
            pids = [a.pids[0]] + [p for p in a.pids[1:] if alive(p) and cgroup_of(p) == home]
            try:
                await self._side().start_scope(name, self.policy.agents_slice, pids, description, a.props)
                break
            except UnitExists:
                if name != a.id:
                    raise
                # The name is still held by the scope of an earlier session with the same pid (its
                # children live on there): a name of its own, or this would fail every pass.
                name = a.id.removesuffix(".scope") + f"-{int(now)}.scope"
            except RuntimeError as e:
                if attempt == 2 or "does not exist" not in str(e):
                    raise  # else a child ended between the check and the call: again without it
        a.id = name  # what was done, for the pass's report
        log.info("adopt %s: %s", a.id, a.reason)

    def _side(self):
        """The runtime's user side: a plan has `set`/`adopt` actions only where the world showed one."""
        side = self.runtime.user_side() if self.runtime is not None else None
        if side is None:
            raise RuntimeError(f"the {getattr(self.runtime, 'name', 'job')} runtime has no user side (slices, scopes)")
        return side

    def _in_agents_slice(self, pid: int) -> bool:
        from reconciler.observed.cgroup import slice_cgroup
        from reconciler.observed.procs import cgroup_of

        base = slice_cgroup(self._side().manager_cgroup, self.policy.agents_slice).rstrip("/")
        return (cgroup_of(pid) or "").startswith(base + "/")

    async def _end_game(self, a, req, rec, now):
        await asyncio.to_thread(self.writer.set_game, False, None, if_until=a.at)

    # -------------------------------------------------------------- units

    def _runtime(self, where: str) -> Runtime:
        if where == "cluster":
            if self.cluster is None:
                raise RuntimeUnavailable("no cluster runtime")
            return self.cluster
        return self.runtime

    async def _start(self, a, req, rec, now):
        where = a.where  # the plan's: this machine's systemd, or the cluster
        runtime = self._runtime(where)
        # A cluster job's log is where the cluster runtime's nodes write (the policy's shared directory).
        log_dir = str(runtime.logs_dir) if where == "cluster" and runtime.logs_dir != self.paths.logs else None
        starting = planned(rec, a, now, request=req, unit=runtime.unit_name(req.id), holder=self.holder,
                           lease_s=self.policy.attach_lease_s, where=where, log_dir=log_dir)
        attempt = starting.attempt
        from reconciler.recorded.store import ABSENT

        if self._refused_late(req, rec, now):  # planned before its caller's deadline or its start_by
            return
        # `starting` (with its lease) is on disk before the unit is asked for (DESIGN §5.3).
        if not self.store.put(starting, expect_phase=rec.phase if rec else None):
            return
        if rec is None and self._caller_gone(req):
            # Written as its caller's deadline passed: the caller was (or is being) told it will not
            # start, so it does not. Decided by when `starting` was on disk: before the deadline, the
            # one who answers at the deadline sees it starting.
            gone = {"code": "caller_gone", "answer_by": req.answer_by}
            self.store.put(after_start(starting, "busy", now, why=self._said(gone), detail=gone),
                           expect_phase=Phase.starting)
            return
        # Test-only fault injection (the fault tier, like RES_FAULT_INGEST): "kill" dies here, with
        # `starting` on disk and no unit asked for, the window a requeue after the lease covers.
        if os.environ.get("RES_FAULT_AFTER_STARTING") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        # The caller's environment as recorded; the runtime passes none of it that looks secret
        # (environ.is_secret, applied in runtime.jobunit.job_environment).
        env = job_env(req)
        if where == "local":  # its systemd-run marks what it starts with the job (docs/escaping.md)
            env = self._marked(env)
        spec = JobSpec(
            job_id=req.id, cmd=_program_resolved(req), cwd=req.cwd, env=env, mem_gb=req.mem_gb, cpus=req.cpus,
            log_path=self.paths.log(req.id, log_dir), exit_path=self.paths.exit_record(req.id, log_dir),
            description=f"res {req.id}: {' '.join(req.title.split())[:120]}", cpu_quota=self.policy.cpu_quota,
            est_s=req.est_s, queue=req.queue, enforce_mem=not req.gated,
        )
        try:
            # A job started again bigger after a kill (DESIGN §5.9) writes on in the same log: the one
            # who waits for it reads one job's output.
            keep = req.grown_from_gb is not None or req.node_requeues is not None or bool(rec and rec.evictions)
            self._fresh_log(self.paths.log(req.id, log_dir), attempt, keep=keep)
            invocation = await runtime.start(spec)
        except RuntimeUnavailable as e:
            log.warning("start of %s: %s", req.id, e)
            if e.not_started:  # certainly not started: back in the queue, tried again next pass
                self.store.put(after_start(starting, "not_started", now), expect_phase=Phase.starting)
                _drop_if_empty(self.paths.log(req.id, log_dir))  # a follower must not take it for a start
            # Else unknown whether it started (after_start "unknown": no event): it stays `starting`;
            # the next pass sees the unit or requeues.
            return
        except RuntimeBusy as e:  # asked for now, and the cluster would not start it now
            from reconciler.config.zone import zone_of
            from reconciler.render.reasons import reason_line

            why = reason_line(e.detail, zone_of(self.policy))
            self.store.put(after_start(starting, "busy", now, why=why, detail=e.detail), expect_phase=Phase.starting)
            return
        except Exception as e:  # noqa: BLE001 - any other failure of the start, the runtime's refusal
            # or a bug under it, settles the job at once with why: the one who asked reads it there,
            # and nothing is started again and again.
            why = "start failed: " + " ".join(str(e).split())
            self.store.put(after_start(starting, "failed", now, why=why, detail={"code": "start_failed"}),
                           expect_phase=Phase.starting)
            await self._forget(req.id, where)
            return
        self.store.put(after_start(starting, "started", now, invocation=invocation), expect_phase=Phase.starting)

    def _marked(self, env: dict[str, str]) -> dict[str, str]:
        """The job's environment with res's systemd-run first on its PATH (apply/escape.py); as it was
        where that file cannot be written (the job starts all the same, unmarked)."""
        from reconciler.apply import escape

        try:
            escape.ensure(self.paths.job_bin)
        except OSError as e:
            log.warning("could not write %s: %s", self.paths.job_bin / escape.NAME, e)
            return env
        return escape.first_on_path(env, self.paths.job_bin)

    def _said(self, detail: dict) -> str:
        from reconciler.config.zone import zone_of
        from reconciler.render.reasons import reason_line

        return reason_line(detail, zone_of(self.policy))

    def _refused_late(self, req, rec, now: float) -> bool:
        """Refused here, at the moment it would start or be granted, if it may no longer
        (core.admission.too_late, at this moment): True when it was."""
        from reconciler.core.admission import too_late
        from reconciler.recorded.store import ABSENT

        late = too_late(req, rec is not None, time.time())
        if late is None:
            return False
        self.store.put(planned(rec, Action(kind="refuse", id=req.id, detail=late), now, request=req,
                               why=self._said(late), detail=late), expect_phase=rec.phase if rec else ABSENT)
        return True

    @staticmethod
    def _caller_gone(req) -> bool:
        """Its caller stopped waiting for an answer by now (core.admission.caller_gone at this moment)."""
        from reconciler.core.admission import caller_gone

        return caller_gone(req, time.time())

    async def _stop(self, a, req, rec, now):
        # The reason goes on record first, so the settle that follows the exit uses it.
        if rec.stop_reason is None:
            rec = planned(rec, a, now, reason=a.reason, code=(a.detail or {}).get("code"))
            self.store.put(rec, expect_phase=rec.phase)
        await self._runtime(rec.where).stop(rec.id)

    async def _evict(self, a, req, rec, now):
        """The ladder's red (DESIGN §5.1): the job most above its book is killed at once, before the
        kernel's OOM killer picks one of its own (memory is nearly gone: no time for a polite stop).
        The reason goes on record first (code `evicted`): its end is then taken for a new attempt
        (core/plan._evicted_retry), not for its outcome. An agent session's own process outside any
        job (policy ladder_session_gb) is killed with everything under it, if it is still the one seen."""
        process = (a.detail or {}).get("process")
        if process is not None:
            await asyncio.to_thread(self._kill_process, a, process, now)
            return
        if rec.stop_reason is None:
            rec = planned(rec, a, now, reason=a.reason, code=(a.detail or {}).get("code"), detail=a.detail)
            if not self.store.put(rec, expect_phase=rec.phase, expect_holder=rec.attached_by):
                return
        log.warning("evict %s: %s", a.id, a.reason)
        await self._runtime(rec.where).stop(rec.id, kill=True)

    def _kill_process(self, a, p: dict, now: float) -> None:
        from reconciler.observed.procs import descendants, processes, start_time

        pid = int(p["pid"])
        if start_time(pid) != p.get("start"):
            return  # it ended, or the pid is another process's now: nothing of the session's to stop
        tree = [pid] + descendants(processes(), pid)
        for victim in tree:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.warning("evict %s: %s", a.id, a.reason)
        line = f"stopped {a.title} ({len(tree)} process{'es' if len(tree) != 1 else ''}) of agent session pid {p.get('session')}: {a.reason}"
        self.store.add_changes([(now, "processes", "res", self.holder, line[:500])])
        stops = self.store.get_meta_json("process_stops", [])
        stops.append({"at": now, "pid": pid, "name": p.get("name"), "gb": p.get("gb"), "session": p.get("session")})
        self.store.set_meta_json("process_stops", stops[-200:])

    async def _settle(self, a, req, rec, now):
        """Once: the rest of the log into the digest, then rc, peak, why and spend in one write, a
        compare-and-set on this instance's hold."""
        why, outcome = a.why, a.detail or {"code": "exited"}
        if self.streamer is not None:
            read = self.streamer.final(rec, a.rc, now)
            if read is None:
                return  # the read failed and was recorded; a later pass settles it
            rec = read
            verdict = agent_outcome(rec, outcome)
            if verdict is not outcome:
                from reconciler.render.reasons import outcome_why

                why, outcome = outcome_why(verdict), verdict
        done = planned(rec, a, now, rc=a.rc, peak_gb=a.peak_gb, why=why, detail={"code": outcome["code"]},
                       at=a.at, cpu_s=(a.detail or {}).get("cpu_s"))
        if self.store.put(done, expect_phase=rec.phase, expect_holder=rec.attached_by):
            await self._forget(rec.id, rec.where)

    async def _retry(self, a, req, rec, now):
        """An auto-sized job killed at its memory limit goes back in the queue once, at the size the
        plan chose (DESIGN §5.9); a cluster job whose node failed, at its own size (its count of
        requeues on the entry). The queue entry first, then the record: both edits are idempotent,
        and a reconciler that dies between them decides the same retry again."""
        d = a.detail or {}
        eviction = None
        if d.get("cause") == "node_failure":  # its cluster node failed: the same size, submitted again
            changes = {"node_requeues": int(d["requeue"]), "queue": True}
        elif d.get("cause") == "evicted":  # stopped by the ladder: its book raised, back at the head
            if rec.request.gated:  # a gated job's book is its size (the gate's guess): no cap to stay under
                changes = {"mem_gb": float(d["to_gb"]), "queue": True}
            else:
                book = None if d.get("at_cap") else float(d["to_gb"])
                changes = {"book_gb": book, "booked_from": d.get("booked_from"), "queue": True}
            eviction = {"at": a.at or now, "used_gb": d.get("used_gb"), "book_gb": d.get("book_gb"),
                        "to_gb": d.get("to_gb"), "peak_gb": a.peak_gb, "oom_kills": d.get("oom_kills", 0),
                        "cpu_s": d.get("cpu_s")}  # (the stopped attempt's: work lost to the stop)
        else:
            changes = {"mem_gb": float(d["mem_gb"]), "grown_from_gb": rec.request.mem_gb, "queue": True}
        await asyncio.to_thread(self.writer.update, rec.id, changes, **({"op": "evict", "why": a.reason} if eviction else {}))
        again = planned(rec, a, now, request=copy(rec.request, **changes), peak_gb=a.peak_gb, detail=d, eviction=eviction)
        if not self.store.put(again, expect_phase=rec.phase, expect_holder=rec.attached_by):
            return
        from reconciler.render.lines import retry_line

        _append_line(self.paths.log(rec.id, rec.log_dir), f"res: {retry_line(rec.id, d)}")
        await self._forget(rec.id, rec.where)

    async def _forget(self, job_id: str, where: str = "local") -> None:
        try:
            await self._runtime(where).forget(job_id)
        except Exception as e:  # noqa: BLE001 - only housekeeping; the record is already settled
            log.warning("forget %s: %s", job_id, e)

    def _fresh_log(self, path: Path, attempt: int, keep: bool = False) -> None:
        """A new attempt of an id moves the old attempt's log aside (unless `keep`); the log is created
        0600. A log that is not a regular file of ours (a symlink planted there) fails the start, in
        one line."""
        job_id = path.name[:-len(".log")]
        if attempt > 1 and path.exists() and not keep:
            os.replace(path, path.with_name(f"{job_id}.attempt{attempt - 1}.log"))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as e:
            if e.errno == errno.ENOENT and path.parent != self.paths.logs:
                # the shared directory's folder is gone (unmounted since this pass looked): it waits
                raise RuntimeUnavailable(f"its log's folder {path.parent} is not there", not_started=True) from None
            what = "is a symlink; refusing to write through it" if e.errno == errno.ELOOP else e.strerror
            raise RuntimeError(f"its log {path} {what}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RuntimeError(f"its log {path} is not a regular file")
        finally:
            os.close(fd)

    # Every action kind's handler (tests/pure/test_executor_map.py: exactly ActionKind's kinds). A
    # kind that asks for nothing is here too, as `_nothing`: no kind is skipped unseen.
    HANDLERS = {
        "enqueue": _enqueue, "wait": _nothing, "start": _start, "grant": _grant, "refuse": _refuse,
        "running": _running, "stop": _stop, "evict": _evict, "settle": _settle, "reattach": _reattach, "requeue": _requeue,
        "retry": _retry, "expire": _expire, "cancel": _cancel, "retire": _retire, "prune": _prune, "set": _set,
        "adopt": _adopt, "end_game": _end_game, "restore": _restore, "recover": _recover, "hold": _nothing,
    }
    # Kinds the pass does not even hand to `apply` (those of `_nothing`): thousands of waiting entries
    # a pass under a crowd.
    NOTHING_TO_DO = frozenset(kind for kind, handler in HANDLERS.items() if handler.__name__ == "_nothing")


def _append_line(path: Path, line: str) -> None:
    """One line of res's own at the end of a job's log (never through a symlink); bookkeeping: a log
    that cannot take it is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, (line + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _drop_if_empty(path) -> None:
    try:
        if os.lstat(path).st_size == 0:
            os.unlink(path)
    except OSError:
        pass


def job_env(req: Request) -> dict[str, str]:
    """The caller's environment as recorded, the job's share in the variables tools read (core/share.py:
    never one the caller set), and who the job is: RES_ID (a `res run` its command makes
    is recorded as part of it: `batch r-N`), RES_BY and RES_TASK (its requests are asked by the same
    one, for the same task)."""
    from reconciler.core.share import share_env

    env = {**req.env, **share_env(req.cpus, req.mem_gb, req.env, mem_enforced=not req.gated), "RES_ID": req.id}
    for name, value in (("RES_BY", req.by), ("RES_TASK", req.task)):
        if value:
            env[name] = value
        else:
            env.pop(name, None)  # the caller's, overridden by a flag: not the job's
    return env


def _program_resolved(req: Request) -> list[str]:
    """The command with argv[0] as `res run` resolves it; an entry written another way (by hand, by
    an older res) is resolved here on the caller's recorded PATH, never on the runtime's own."""
    cmd = list(req.cmd)
    if cmd and not os.path.isabs(cmd[0]):
        cmd[0] = resolve_program(cmd[0], req.cwd or "/", req.env.get("PATH", "")) or cmd[0]
    return cmd


