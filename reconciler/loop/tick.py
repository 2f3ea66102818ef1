"""One reconcile pass (DESIGN §2): lock, load desired, observe, plan, apply, publish. A pass a command
asks for (the loop's, else one here) and the read-only plan are loop/oneshot.py's."""
from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time

from reconciler.apply.attach import Streamer
from reconciler.apply.executor import Executor
from reconciler.config.locks import locked_async
from reconciler.core.models import Desired, Phase, Plan, World, dump
from reconciler.loop.world import observe_user_side, observe_world
from reconciler.config.paths import Paths
from reconciler.config.zone import zone_of
from reconciler.core.errors import HeldElsewhere, needs_a_person
from reconciler.core.lifecycle import transition
from reconciler.core.plan import plan
from reconciler.render.reasons import explain, explained

log = logging.getLogger("res.tick")


def rebook(desired: Desired, records: dict, learned: dict, margin: float, memo: dict) -> None:
    """Each queued job booked from what history knows now (DESIGN §5.1: its command's p95 peak ×
    margin, once it has 3 finished runs: core/sizing.book_for), not only from what it knew when the
    job was asked for: a job asked before its command's third run ended would otherwise wait at its
    cap for good. `memo`: (project, command, margin) -> its book, kept by the caller while `learned`
    is the same."""
    from reconciler.core.capacity import rebookable, with_book
    from reconciler.core.sizing import book_for

    if not learned:
        return
    out = []
    for req in desired.requests:
        if rebookable(req, records.get(req.id)):
            key = (req.project, tuple(req.cmd), margin)
            if key not in memo:
                if len(memo) >= FINGERPRINTS_KEPT:
                    memo.clear()
                mine = learned.get(req.project)
                memo[key] = book_for(req.cmd, mine if isinstance(mine, dict) else None, margin) or (None, None)
            req = with_book(req, *memo[key])
        out.append(req)
    desired.requests = out


def gatefile_read(path) -> dict | None:
    from reconciler.config import gatefile

    return gatefile.read(str(path))


def holder_id() -> str:
    """`host/pid/nonce/start`: the process start time lets another instance on this host tell that
    the holder is gone even when its pid has been reused (DESIGN §5.4)."""
    from reconciler.core.attachments import holder_id as make
    from reconciler.observed.procs import start_time

    return make(socket.gethostname(), os.getpid(), secrets.token_hex(4), start_time(os.getpid()))


def policy_paths() -> list[str]:
    """The policy files: the shipped default and the user's (where the environment says)."""
    from reconciler.config.policy import default_policy_path, user_policy_path

    return [str(default_policy_path()), str(user_policy_path())]


def policy_files_key() -> tuple:
    """The policy files as they are now (path, mtime, size, inode): a change means reload."""
    out = []
    for path in policy_paths():
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((path, None, None, None))
    return tuple(out)


HISTORY_LEARNED = 2000  # the latest pruned records the gate and `--mem auto` learn from, besides state.db's own
FINGERPRINTS_KEPT = 10_000  # command lines whose fingerprint is remembered (then forgotten all at once)
WRITER_WAIT_S = 2.0  # how long a pass waits for a writer at work before it tracks changes next pass
# An action that failed in a way no retry mends (core/errors.py) is tried again only after this (or by
# a new loop): every pass meanwhile says it failed, as before, without trying it.
PERSON_RETRY_S = 600.0


def make_runtime(paths: Paths, policy):
    """The job runtime (systemd for now), imported only when a pass needs it."""
    from reconciler.runtime.systemd import SystemdRuntime

    return SystemdRuntime(unit_prefix=policy.unit_prefix, jobs_slice=policy.jobs_slice, logs_dir=paths.logs,
                          state_root=paths.root)


def make_cluster(paths: Paths, policy):
    """The cluster's runtime (Slurm, DESIGN §6b): an object only; nothing is asked of the cluster
    until a pass has a cluster job or request."""
    from reconciler.runtime.slurm import SlurmRuntime

    return SlurmRuntime(state_root=paths.root, logs_dir=paths.cluster_logs(policy.cluster.shared_dir),
                        cluster=policy.cluster, shared_dir=policy.cluster.shared_dir)


def cluster_wanted(desired: Desired, records: dict, policy) -> bool:
    """Whether this pass asks the cluster: a request for it not yet decided (or, with overflow on,
    any request not yet decided). Live cluster jobs are asked for whatever this says."""
    overflow = policy.overflow == "cluster"
    for req in desired.requests:
        if req.kind != "job" or req.on == "local" or not (req.on == "cluster" or overflow):
            continue
        rec = records.get(req.id)
        if rec is None or rec.phase == Phase.queued:
            return True
    return False


class Engine:
    """A reconciler instance: the store, the runtime connection and the executor, reused across passes."""

    def __init__(self, paths: Paths, policy, runtime=None):
        from reconciler.desired.writer import Writer
        from reconciler.recorded.store import Store

        self.paths, self.policy = paths, policy
        paths.ensure()
        self.store = Store.open(paths)
        self.writer = Writer(paths)
        self.runtime = runtime if runtime is not None else make_runtime(paths, policy)
        self.holder = holder_id()
        self.streamer = Streamer(self.store, policy, self.holder, paths.log)
        self.cluster = make_cluster(paths, policy)
        self.executor = Executor(paths, self.store, self.runtime, self.writer, policy, self.holder, self.streamer,
                                 cluster=self.cluster)
        self.connected = False
        self.connect_error: str | None = None
        self.manager_absent = False  # the runtime is not slow or broken: there is none to reach
        self.last_plan: Plan | None = None
        # Why the last pass could admit nothing (a broken queue file, an unobservable runtime); [] if it could.
        self.blocked: list[str] = []
        self._slice_key: str | None = None  # the inputs of the slice unit files this instance installed
        self.adopt_once = False  # the next pass adopts sessions whatever adopt_sessions says
        self.adder = None  # the loop's group commit of new requests (loop/group.py); None: each writes alone
        self.explained: dict | None = None  # the last pass's reasons, for explain() to reuse
        # What the last pass asked of the loop (core/wake.py): when the next pass is due by the
        # clock (None: not by the clock), and the processes whose end ends a note.
        self.next_at: float | None = None
        self.note_owners: frozenset[int] = frozenset()
        self.note_peaks: dict[str, float] = {}  # the most each booking in place was seen using (loop/world.py)
        # Actions whose failure needs a person (kind, id) -> (the notice that says so, when to try again).
        self.needs_person: dict[tuple[str, str], tuple[str, float]] = {}
        self.last_pass_at: float | None = None
        # What the last pass planned from, for the gate's "would this fit?" (core/whatif.py), and the
        # inputs of the gate.json it wrote (written again only when they change).
        self.last_inputs: tuple | None = None
        self._gate_key: tuple | None = None
        # What gate.json is built from that changes rarely, kept between passes: a settled run is
        # learned before its waiter is answered, so building it must cost little (bench l).
        self._gate_table: tuple | None = None  # (policy key, the heavy table as the policy makes it)
        self._gate_history: tuple[int, list] | None = None  # (history rows, the latest HISTORY_LEARNED parsed)
        self._fingerprints: dict[tuple, str | None] = {}  # a command line -> its fingerprint (core.gate)
        # What history learned (gate.json's "learned": project -> fingerprint -> entry), as last built,
        # and each queued command's book from it (DESIGN §5.1), remembered until it changes.
        self.learned: dict = ((gatefile_read(paths.gate) or {}).get("learned") or {})
        self._books: dict[tuple, tuple] = {}
        from reconciler import code_fingerprint

        self.code_id = code_fingerprint()  # the code this instance runs (`res service install` compares)
        self._policy_key = policy_files_key()
        self.policy_error: str | None = None  # the policy files changed and do not load: the last good one is used

    def reload_policy(self) -> None:
        """Pick up a changed policy file (checked by its stat each pass). A broken one keeps the last
        good policy and says so in every pass's notices until it is fixed."""
        from reconciler.config.policy import PolicyError, load_policy

        key = policy_files_key()
        if key == self._policy_key:
            return
        self._policy_key = key
        try:
            policy = load_policy()
        except PolicyError as e:
            self.policy_error = f"{' '.join(str(e).split())}; keeping the policy loaded before"
            log.error("policy not reloaded: %s", self.policy_error)
            return
        self.policy_error = None
        if policy != self.policy:
            log.warning("policy reloaded from %s", ", ".join(str(p) for p, *_ in key if p))
        self.policy = self.executor.policy = self.streamer.policy = policy

    async def connect(self) -> None:
        from reconciler.runtime import RuntimeUnavailable

        try:
            await self.runtime.connect()
            self.connected, self.connect_error, self.manager_absent = True, None, False
        except RuntimeUnavailable as e:
            if str(e) != self.connect_error:  # once per new reason, not every pass
                log.warning("%s", e)
            self.connected, self.connect_error, self.manager_absent = False, str(e), e.absent

    async def close(self) -> None:
        """Give up this instance's attachments (so the next instance takes over at once, DESIGN
        §5.4), then disconnect."""
        try:
            self.store.check_same()
            self.give_up_leases()
        except Exception as e:  # noqa: BLE001 - closing goes on; a replaced state.db keeps nothing of ours
            log.warning("closing: %s", e)
        finally:
            if self.connected:
                await self.runtime.close()
            self.store.close()

    def give_up_leases(self) -> list[str]:
        """Release the attachment of every live job this instance holds (compare-and-set on the
        holder: one taken over meanwhile is left alone). A `starting` job keeps its lease: until it
        expires nobody may decide that the start never happened."""
        now, given = time.time(), []
        try:
            records = self.store.records()
        except Exception as e:  # noqa: BLE001 - closing must not fail because the store cannot be read
            log.warning("giving up attachments: %s", e)
            return given
        for rec in records.values():
            if rec.attached_by == self.holder and rec.phase in (Phase.running, Phase.exited):
                if self.store.put(transition(rec, "hand_over", now),
                                  expect_phase=rec.phase, expect_holder=self.holder):
                    given.append(rec.id)
        return given

    async def install_slices(self) -> list[str]:
        """Write the slices' unit files where they are missing or differ, then daemon-reload, so the
        slices exist with their normal share before any property is set or job started in them."""
        from reconciler.observed.machine import meminfo
        from reconciler.render.unitfiles import slice_units
        from reconciler.runtime.unitfiles import install_unit, oomd_present, slice_units_key, user_unit_dir

        side = self.runtime.user_side()
        if side is None:
            return []
        try:
            ram, oomd = meminfo()[0], oomd_present()
            key = slice_units_key(self.policy, ram, oomd)
            if key == self._slice_key:
                return []  # installed by this instance from the same inputs
            cached = self.store.get_meta_json("slice_units", {})
            if cached.get("key") == key:
                texts = cached["texts"]
            else:
                texts = slice_units(self.policy, ram, oomd)
                self.store.set_meta_json("slice_units", {"key": key, "texts": texts})
            directory = user_unit_dir()
            changed = [name for name, text in texts.items() if install_unit(directory, name, text)]
            if changed:
                await side.daemon_reload()
                log.info("installed %s in %s", ", ".join(changed), directory)
            self._slice_key = key
            return []
        except Exception as e:  # noqa: BLE001 - jobs still run; the slices are retried next pass
            return [f"could not install the slice unit files: {' '.join(str(e).split())}"]

    async def track_changes(self, now: float, desired: Desired, records: dict) -> None:
        """Changes to the user's own files, recorded (desired/changes.py); the queue entries added
        outside res (`desired.hand_added`). Read under the writer's lock: a writer replaces queue.toml
        and then logs its change, and a pass that read between the two would take the writer's own
        entry for one added by hand. When that cannot be done now, the entries held before stay held,
        and an entry not seen by an earlier check is not started by this pass (`desired.unchecked`):
        a failure here is logged, never a pass lost, never an entry let go unseen."""
        from reconciler.config.locks import LockBusy
        from reconciler.config.policy import user_policy_path
        from reconciler.desired.changes import checked_ids, track

        try:
            async with locked_async(self.paths.writer_lock, timeout=WRITER_WAIT_S):
                desired.hand_added = sorted(track(self.paths, self.store, user_policy_path(), now))
                return
        except LockBusy:
            pass  # a writer is at work: this pass judges nothing new, the next one does
        except HeldElsewhere:
            raise  # state.db held by another process: this pass can record nothing (said once, by the loop)
        except Exception as e:  # noqa: BLE001 - bookkeeping: the pass goes on
            log.warning("tracking changes to the user's files: %s", e)
        desired.hand_added = sorted(self.store.get_meta_json("hand_added", []))
        seen = checked_ids(self.store)
        desired.unchecked = [r.id for r in desired.requests if r.id not in records and r.id not in seen]

    async def tick(self) -> Plan:
        """One pass. One that fails asks for the next as its failure's kind says (core/errors.py): one
        that may pass next time in tick_s, as a pass that could not observe does; one that needs a
        person by no clock (the loop's events and its safety net still ask), never in a hot loop."""
        try:
            return await self._tick()
        except Exception as e:  # noqa: BLE001 - re-raised: only the next wake-up is decided here
            self.next_at = None if needs_a_person(e) else time.time() + self.policy.tick_s
            raise

    async def _tick(self) -> Plan:
        if not self.connected:
            await self.connect()  # observation then says what failed, and nothing is acted on blindly
        # Files any agent may have replaced are read before the lock: a slow one never holds up others.
        self.reload_policy()
        self.streamer.refresh_pricing()
        from reconciler.config.locks import LockBusy
        from reconciler.config.deadline import remaining

        try:
            async with locked_async(self.paths.tick_lock, timeout=remaining()):
                return await self._locked_tick()
        except LockBusy:  # (only with a deadline: this process answers by then, whoever holds the lock)
            from reconciler.config.locks import describe_pid, lock_holders

            who = ", ".join(describe_pid(p) for p in lock_holders(self.paths.tick_lock)[:3]) or "another process"
            raise HeldElsewhere(f"a pass of {who} held the tick lock past this call's deadline (stopped or stuck?)") from None

    async def _locked_tick(self) -> Plan:
        self.store.check_same()  # a state.db removed or replaced under us: stop, loudly
        now = time.time()
        desired, notices = load_desired(self.paths, self.store)
        if self.policy_error:
            notices.append(self.policy_error)
        records = self.store.records()
        rebook(desired, records, self.learned, self.policy.margin, self._books)
        await self.track_changes(now, desired, records)
        if self.store.bad:  # unreadable rows: reported, and nothing admitted under their ids
            desired.held = sorted(set(desired.held) | set(self.store.bad))
            notices.extend(f"state.db: {why}; set aside (res release {job_id} drops it)"
                           for job_id, why in self.store.bad.items())
        self.streamer.stream(records, now)  # before planning: budgets see what was spent so far
        side = await self.install_slices() if self.connected else []
        unknown = [r.id for r in desired.requests if r.id not in records]
        world = await observe_world(self.runtime if self.connected else None, records, self.paths, unknown,
                                    cluster=self.cluster, ask_cluster=cluster_wanted(desired, records, self.policy),
                                    peaks=self.note_peaks)
        if not self.connected and self.connect_error:
            world.errors = [self.connect_error]  # why, not just "no runtime connected"
        if not world.ok:
            self.connected = False  # reconnect next pass
        else:
            side += await observe_user_side(self.runtime, world, self.policy)
        policy = self.policy
        if self.adopt_once:  # `res adopt`: this pass adopts even where the policy leaves it to the user
            policy, self.adopt_once = policy.model_copy(update={"adopt_sessions": True}), False
        zone = zone_of(policy)
        p = explain(plan(desired, records, world, now, policy.rules(), me=self.holder, pricing_error=self.streamer.pricing_error,
                         zone=zone, wake=True), zone, self.explained)
        self.explained = explained(p, zone)
        p.notices.extend(notices + side)
        self.blocked = ([desired.queue_error or "queue.toml cannot be read"] if not desired.queue_ok else []) + \
            ([f"could not observe jobs ({'; '.join(world.errors)})"] if not world.ok else [])
        requests = {r.id: r for r in desired.requests}
        self.executor.begin_pass(records)
        failed = 0
        # New queued entries are recorded in one state.db transaction (a crowd's requests that
        # arrived together), not one each; every other action in its own, in the plan's order.
        enqueued = [a for a in p.actions if a.kind == "enqueue"]
        if enqueued:
            with self.store.transaction():
                for action in enqueued:
                    failed += await self._apply(action, requests, now, p)
        idle = self.executor.NOTHING_TO_DO
        for action in p.actions:
            if action.kind != "enqueue" and action.kind not in idle:
                failed += await self._apply(action, requests, now, p)
        publish(self.store, world, p, now)
        for n in p.notices:
            log.warning("%s", n)
        self.last_plan, self.last_pass_at = p, now
        self.last_inputs = (desired, records, world, policy, zone)
        # A run settled this pass is learned before its waiter hears of it: the agent's next
        # `--mem auto` of the same command, a second later, is sized from it.
        settled = any(a.kind in ("settle", "retry") for a in p.actions)
        self.publish_gate(self.store.records() if settled else records)
        self._ask_next(p, records, now, soon=failed > 0 or not self.connected)
        return p

    def publish_gate(self, records: dict) -> None:
        """gate.json for the hook (config/gatefile.py), when the policy or the finished runs changed.
        Bookkeeping: a failure is logged, and the gate then reads what it read before."""
        from reconciler.core.hist import counted

        key = (self._policy_key, sum(1 for r in records.values() if counted(r)), self.store.history_count())
        if key == self._gate_key:
            return
        from reconciler.config import gatefile

        try:
            # The pruned history too: what a command needed is not forgotten a day after it ran.
            if self._gate_table is None or self._gate_table[0] != self._policy_key:
                self._gate_table = (self._policy_key, gatefile.heavy_table(self.policy))
            rows = key[2]  # the history only grows: its row count says whether it changed
            if self._gate_history is None or self._gate_history[0] != rows:
                self._gate_history = (rows, self.store.history(HISTORY_LEARNED))
            built = gatefile.build(self.policy, [*records.values(), *self._gate_history[1]],
                                   table=self._gate_table[1], fingerprint_of=self._fingerprint)
            gatefile.write(self.paths.gate, built)
            self._gate_key = key
            self.learned, self._books = built["learned"], {}
        except Exception as e:  # noqa: BLE001 - bookkeeping: the pass goes on
            log.warning("writing %s: %s", self.paths.gate, e)

    def _fingerprint(self, cmd) -> str | None:
        """core.gate.line_fingerprint, remembered: the same commands settle again and again."""
        from reconciler.core.gate import line_fingerprint

        key = tuple(cmd or ())
        if key not in self._fingerprints:
            if len(self._fingerprints) >= FINGERPRINTS_KEPT:
                self._fingerprints.clear()
            self._fingerprints[key] = line_fingerprint(list(key))
        return self._fingerprints[key]

    def would_fit(self, size: dict, now: float) -> dict:
        """The gate's question against the last pass's inputs (core/whatif.py), with the busy line."""
        from reconciler.core.whatif import would_fit
        from reconciler.render.reasons import reason_line

        if self.last_inputs is None:
            return {"fits": "unknown", "start": None, "line": None}
        desired, records, world, policy, zone = self.last_inputs
        if not desired.queue_ok or not world.ok:
            return {"fits": "unknown", "start": None, "line": "; ".join(self.blocked) or None}
        answer = would_fit(desired, records, world, now, policy.rules(), size)
        d = answer.pop("detail", None) or {}
        answer["line"] = reason_line(d, zone) if d.get("code") in ("busy", "never_fits") else None
        return answer

    async def _apply(self, action, requests: dict, now: float, p: Plan) -> int:
        """One action; 1 if it failed and is tried again next pass, else 0. Every failure is said in
        the plan's notices; one that needs a person (core/errors.py) is logged with its traceback once
        and not tried again for PERSON_RETRY_S, nor does it ask for a pass soon."""
        key = (action.kind, action.id)
        held = self.needs_person.get(key)
        if held is not None:
            if now < held[1]:
                p.notices.append(held[0])
                return 0
            del self.needs_person[key]
        try:
            await self.executor.apply(action, requests, now)
            return 0
        except HeldElsewhere:
            raise  # state.db held by another process: no action can be recorded; the pass ends here
        except Exception as e:  # noqa: BLE001 - one failed action must not stop the others; sorted below
            line = f"{action.kind} {action.id} failed: {e}"
            p.notices.append(line)
            if not needs_a_person(e):
                log.error("%s %s failed: %s", action.kind, action.id, e)
                return 1
            log.error("%s; it needs a person: not tried again for %gs", line, PERSON_RETRY_S, exc_info=e)
            self.needs_person = {k: v for k, v in self.needs_person.items() if v[1] > now}
            self.needs_person[key] = (line, now + PERSON_RETRY_S)
            return 0

    def _ask_next(self, p: Plan, records: dict, now: float, soon: bool) -> None:
        """When the next pass is due by the clock: the plan's (core/wake.py), or, `soon`, in tick_s:
        an action failed (to be tried again) or the runtime is not connected."""
        self.next_at = now + self.policy.tick_s if soon else p.next_at
        self.note_owners = frozenset(r.request.owner_pid for r in records.values()
                                     if r.request.kind == "note" and r.phase == Phase.running and r.request.owner_pid)


def load_desired(paths: Paths, store, save: bool = True) -> tuple[Desired, list[str]]:
    """Desired state, keeping the last good version of a file that does not parse (DESIGN §2 step 2,
    desired/lastgood.py). `save`: remember this version as the last good one (never in a dry run)."""
    from reconciler.desired import lastgood
    from reconciler.desired.reader import read_desired

    got = read_desired(paths)
    desired, game_error = got.desired, got.game_error
    if not desired.queue_ok:
        desired.requests = lastgood.requests(paths, store)
    if game_error:
        desired.game = lastgood.game(store) or desired.game
    notices = [f"{game_error}; keeping game mode as it was"] if game_error else []
    if save:
        # Each file's version is remembered only from a good read of that file.
        if desired.queue_ok:
            lastgood.save_queue(paths, store, got.queue_text or "")
        if not game_error:
            lastgood.save_game(store, desired.game)
    return desired, notices


def publish(store, world: World, p: Plan, now: float) -> None:
    """What `res status` shows without a lock: the world and budget as of this pass, and what it said
    of each queued entry (position, est. start, what it waits for)."""
    held = [{"id": a.id, "title": a.title, "reason": a.reason} for a in p.actions if a.kind == "hold"]
    rest = json.dumps({
        "at": now, "world": dump(world),
        "budget_mem_gb": p.budget_mem_gb, "budget_cpus": p.budget_cpus, "notices": p.notices, "held": held,
        "rung": p.rung, "rung_why": p.rung_why,
        # agent sessions' own processes the ladder stopped (the views mark them)
        "process_stops": store.get_meta_json("process_stops", []),
    })
    store.set_meta("last_tick", rest[:-1] + ', "queue": ' + _queue_json(store, p) + "}")


def _queue_json(store, p: Plan) -> str:
    """The waiting entries' details as one JSON object. An entry's text is made again only when its
    detail differs from the last pass's: a crowd's pass explains thousands of waiting entries exactly
    as the pass before did (their JSON was most of publishing). A plan's details are not changed
    after it is published."""
    before = store.memo.get("queue_json", {})
    kept: dict[str, tuple[dict, str]] = {}
    for a in p.actions:
        if a.kind in ("enqueue", "wait") and a.detail:
            old = before.get(a.id)
            kept[a.id] = old if old is not None and old[0] == a.detail else \
                (a.detail, f"{json.dumps(a.id)}: {json.dumps(a.detail)}")
    store.memo["queue_json"] = kept
    return "{" + ", ".join(text for _, text in kept.values()) + "}"
