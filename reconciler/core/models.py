"""The state model (DESIGN §2): desired requests, recorded jobs, the observed world, and plan actions.

Plain typed objects (`dataclasses`, slots, keyword-only): the core makes, reads and copies them at the
speed of Python attributes. pydantic validates them only where they come in (the desired files,
state.db rows, the socket, `--world`, the last pass's snapshot): `parse`, `parse_json` check a
value against the constraints written on each field (`Annotated[..., Field(...)]`) and give the same
objects back; `dump`, `dump_json` are the way out. No I/O. Times are epoch seconds (float); memory is
GB (float).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from reconciler.core.digestbase import DigestState

JobId = str  # "r-12"

# Bounds of every value a hand-edited desired file (or a forged one) may carry: past them a value is a
# mistake or an attack, and is rejected at the boundary (one line naming the entry), never used.
MAX_EPOCH = 32_503_680_000.0  # the year 3000: any time res reads is before it
MAX_PID = 1 << 22  # the kernel's largest pid_max
MIN_GB = 1 / 1024  # 1 MB: a smaller --mem is a typo
MIN_CPUS = 0.01
MAX_COUNT = 10**9
MAX_TOKENS = 10**12  # a usage count (core/pricing.py)
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]+-]{0,199}$"  # core/agents.MODEL_ID
VERSION_PATTERN = r"^[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}([-+][0-9A-Za-z.-]{1,40})?$"  # core/agents.VERSION
REQUEST_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"  # --request-id
# Half a CPU unless asked: CPUs are shared by weight, and most jobs leave them idle part of the time.
DEFAULT_CPUS = 0.5

_CHECKED = ConfigDict(extra="forbid", allow_inf_nan=False)


def _typed(**constraints) -> Any:
    """A field of what the user writes (queue.toml, game.toml): its type exactly (no "1" for 1), and
    its bounds."""
    return Field(strict=True, **constraints)


def copy(obj, **changes):
    """`obj` with `changes` (a new object; the old one is left as it was)."""
    return replace(obj, **changes)


# ---------------------------------------------------------------- the boundary


@functools.cache
def _adapter(cls):
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def parse(cls, data: Any):
    """A `cls` from plain data, every constraint checked (pydantic's ValidationError otherwise)."""
    return _adapter(cls).validate_python(data)


def parse_json(cls, text: str | bytes):
    return _adapter(cls).validate_json(text)


def dump(obj) -> Any:
    """`obj` as JSON-ready data."""
    return _adapter(type(obj)).dump_python(obj, mode="json")


def dump_json(obj, indent: int | None = None) -> str:
    return _adapter(type(obj)).dump_json(obj, indent=indent).decode()


# ---------------------------------------------------------------- desired


@dataclass(slots=True, kw_only=True)
class Request:
    """One entry of desired/queue.toml: a job (`[[job]]`) or a note (`[[note]]`)."""

    __pydantic_config__ = _CHECKED

    id: Annotated[JobId, _typed(pattern=r"^r-[1-9][0-9]{0,9}$")]
    kind: Literal["job", "note"] = "job"
    title: Annotated[str, _typed(max_length=200)]
    project: Annotated[str, _typed(max_length=200)] = ""
    mem_gb: Annotated[float, _typed(ge=MIN_GB, le=65536)]
    cpus: Annotated[float, _typed(ge=MIN_CPUS, le=4096)] = DEFAULT_CPUS
    est_s: Annotated[int, _typed(gt=0, le=365 * 86400)]  # --for
    created: Annotated[float, _typed(ge=0, le=MAX_EPOCH)]
    # When the same agent first asked for the same command, where an ask of it was refused unstarted
    # (the gate's wait ran out) moments before: asked again, it keeps its place in the queue from
    # then (core/plan.first_asked, queue_order). Set by the loop only. None: its place is its own.
    since: Annotated[float | None, _typed(ge=0, le=MAX_EPOCH)] = None
    queue: Annotated[bool, _typed()] = False
    lock: Annotated[str | None, _typed(max_length=4400)] = None  # KEY@<main tree of its repository> (core/locks.py)
    force: Annotated[bool, _typed()] = False
    # Where it may run: "" here (or on the cluster when the policy's overflow says so and it does not
    # fit here now), "local" never anywhere else, "cluster" on the Slurm cluster (DESIGN §6b).
    on: Literal["", "local", "cluster"] = ""
    # Put through `res run` by the gate (`res hook`, DESIGN §5.8): its size is the gate's guess, booked
    # in the ledger but not enforced (no MemoryMax at it: the command would not have had one).
    gated: Annotated[bool, _typed()] = False
    # Sized by res (`--mem/--cpus/--for auto`, DESIGN §5.9): which of the three res chose, and where the
    # numbers came from ("12 earlier runs of make test", "table: pytest", "the policy's default").
    auto: list[Literal["mem", "cpus", "for"]] = field(default_factory=list)
    sized_from: Annotated[str | None, _typed(max_length=300)] = None
    # An auto-sized job killed at its memory limit is started again once, bigger: the limit it was
    # killed at (None: not retried).
    grown_from_gb: Annotated[float | None, _typed(ge=MIN_GB, le=65536)] = None
    # What admission counts of it (DESIGN §5.1, its *book*) when that is less than its cap (mem_gb, the
    # kernel's MemoryMax): this project's earlier runs of the same command peaked at most so much (× the
    # policy's margin), or res raised it after stopping the job above its book. None: booked at its cap.
    # `booked_from` says where it came from, for the views ("5 runs of make test", "raised after a stop").
    book_gb: Annotated[float | None, _typed(ge=MIN_GB, le=65536)] = None
    booked_from: Annotated[str | None, _typed(max_length=300)] = None
    # A cluster job whose node failed under it (Slurm's NODE_FAIL) is submitted again, as many times as
    # the policy's cluster_requeue_on_node_failure: how many times it was (None: never).
    node_requeues: Annotated[int | None, _typed(ge=1, le=100)] = None
    # jobs
    cmd: Annotated[list[str], _typed(max_length=65536)] = field(default_factory=list)
    cwd: Annotated[str, _typed(max_length=4096)] = ""
    env: Annotated[dict[str, str], _typed(max_length=4096)] = field(default_factory=dict)
    agent: Annotated[str, _typed(max_length=64)] = "none"  # "none": a plain command; else an agent session whose output is digested
    # agent sessions: what `res run` read of the session's own configuration (config/agentmodel.py):
    # the model it runs (None: not known; the dearest rates price it), where that comes from or why it
    # is not known, the agent CLI's version, and for a resumed or forked Codex thread its usage so far
    # ([input, cached input, output, cache-write input], and the prompt of its last request: how big
    # its context is) and the thread it is of (None: a fork, which starts a new thread from that total).
    model: Annotated[str | None, _typed(pattern=MODEL_PATTERN)] = None
    model_from: Annotated[str | None, _typed(pattern=r"^[^\x00-\x1f\x7f]{1,200}$")] = None
    agent_version: Annotated[str | None, _typed(pattern=VERSION_PATTERN)] = None
    usage_before: Annotated[list[Annotated[int, _typed(ge=0, le=MAX_TOKENS)]] | None,
                            _typed(min_length=4, max_length=5)] = None
    resumes: Annotated[str | None, _typed(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}$")] = None
    # per-job budgets (None: the policy's default for agent sessions; 0: none)
    max_cost_usd: Annotated[float | None, _typed(ge=0, le=1e6)] = None
    max_duration_s: Annotated[int | None, _typed(ge=0, le=365 * 86400)] = None
    max_iterations: Annotated[int | None, _typed(ge=0, le=MAX_COUNT)] = None
    # notes: the process whose exit frees the note (None: only its time or `res release` frees it)
    owner_pid: Annotated[int | None, _typed(ge=1, le=MAX_PID)] = None
    owner_name: Annotated[str | None, _typed(max_length=64)] = None  # what that process is (e.g. "claude")
    # Who asked and how to reach them (`[by …]` in status, the busy lines): a name (`claude pid 4121`,
    # a person), the task (a git branch), the job whose command asked (RES_ID), and an address to
    # message the asker at. None: not known.
    by: Annotated[str | None, _typed(max_length=200)] = None
    task: Annotated[str | None, _typed(max_length=200)] = None
    batch: Annotated[str | None, _typed(pattern=r"^r-[1-9][0-9]{0,9}$")] = None
    reply_to: Annotated[str | None, _typed(max_length=500)] = None
    # The caller's own name for this request (`--request-id`, else one `res run` made up): asking again
    # with it is the same request, never a second job (issue 40). And when the caller stops waiting
    # for an answer: a request asked for now (no --queue) that no pass decided by then is never
    # started (refused, code caller_gone).
    request_id: Annotated[str | None, _typed(pattern=REQUEST_ID_PATTERN)] = None
    answer_by: Annotated[float | None, _typed(ge=0, le=MAX_EPOCH)] = None
    # `--start-within`: not started by then (epoch), never started (refused, code start_missed): its
    # caller has moved on, told it was withdrawn, whether or not the withdrawal reached the loop.
    start_by: Annotated[float | None, _typed(ge=0, le=MAX_EPOCH)] = None

    @property
    def number(self) -> int:
        return int(self.id[2:])

    @property
    def book(self) -> float:
        """What admission counts of it (DESIGN §5.1): its book where it has one below its cap, else the
        cap. A gated job's size is the gate's guess, which is its book (it has no cap); a note books
        its size (a person is not estimated)."""
        if self.book_gb is None or self.kind == "note" or self.gated:
            return self.mem_gb
        return min(self.book_gb, self.mem_gb)

    @property
    def in_place(self) -> bool:
        """The gate's booking of a command that runs as its agent CLI's own child (commands/hookloop.py
        `admit`): a gated note, whose command res can see by its owner's processes."""
        return self.kind == "note" and self.gated

    @property
    def session(self) -> bool:
        """An agent session: counts against max_concurrent_sessions and the daily spend cap."""
        return self.kind == "job" and self.agent != "none"


FLOAT_FIELDS = ("mem_gb", "cpus", "created", "since", "grown_from_gb", "book_gb", "answer_by", "start_by")  # of Request: written as floats (`cpus = 1.0`, not `1`)


@dataclass(slots=True, kw_only=True)
class Game:
    __pydantic_config__ = _CHECKED

    on: Annotated[bool, _typed()] = False
    until: Annotated[float | None, _typed(ge=0, le=MAX_EPOCH)] = None

    def active(self, now: float) -> bool:
        return self.on and (self.until is None or now < self.until)


@dataclass(slots=True, kw_only=True)
class Desired:
    """Desired state as read this pass. `queue_ok` False: queue.toml did not parse, `requests` is the
    last good version, and nothing may be started, stopped or refused because of it."""

    __pydantic_config__ = _CHECKED

    requests: list[Request] = field(default_factory=list)
    queue_ok: bool = True
    queue_error: str | None = None
    game: Game = field(default_factory=Game)
    game_ok: bool = True  # False: game.toml did not parse; `game` is the last good version
    # Entries set aside: in queue.toml but unusable (a value out of range, a wrong type), each named
    # by one line in `set_aside`. Their ids are `held`: never started, never taken as released.
    set_aside: list[str] = field(default_factory=list)
    held: list[JobId] = field(default_factory=list)
    # Entries that appeared in queue.toml outside res (by hand, DESIGN §5.7): never started.
    hand_added: list[JobId] = field(default_factory=list)
    # Entries this pass could not check for that (the writer held its lock past the pass's wait):
    # not started by this pass; the next one checks them.
    unchecked: list[JobId] = field(default_factory=list)


# ---------------------------------------------------------------- recorded


class Phase(str, Enum):
    queued = "queued"
    starting = "starting"
    running = "running"
    # No transition records it (core/lifecycle.py): `res status`'s word for a job whose exit record is
    # there but no pass has settled it yet; a record of an older state.db that holds it is live.
    exited = "exited"
    done = "done"
    refused = "refused"
    cancelled = "cancelled"


LIVE = (Phase.starting, Phase.running, Phase.exited)
TERMINAL = (Phase.done, Phase.refused, Phase.cancelled)
ALIVE = ("active", "activating", "deactivating")  # a unit's states (JobObs.state) while it runs


# How records from before outcome codes said how a job ended (JobRecord.outcome).
_LEGACY_WHY = (("killed at its memory limit", "memory_limit"), ("could not execute", "exec_failed"),
               ("start failed", "start_failed"), ("stopped from outside res", "stopped_outside"),
               ("lost", "lost"), ("budget:", "budget"), ("released", "released"), ("killed by signal", "signal"),
               ("attachment failed", "attach_failed"), ("agent failed", "agent_failed"))


@dataclass(slots=True, kw_only=True)
class JobRecord:
    """What the reconciler knows of one request (state.db). Changed only by core/lifecycle.py."""

    __pydantic_config__ = _CHECKED

    request: Request
    phase: Phase
    unit: str | None = None
    where: Literal["local", "cluster"] = "local"  # the runtime it was started on
    log_dir: str | None = None  # where its log and exit record are, when not the state directory's logs/
    attempt: int = 0
    invocation: str | None = None  # the runtime's id of this attempt's run: its exit record must carry it
    started: float | None = None
    ended: float | None = None
    rc: int | None = None
    peak_gb: float | None = None
    cpu_s: float | None = None  # CPU time the job used (its cgroup's, at its end): what `--cpus auto` learns
    why: str | None = None
    stop_reason: str | None = None  # set by a stop action, used when the exit is settled
    stop_code: str | None = None  # its stable code: released, budget, attach_failed
    # `res release` asked for it: only then does its entry leaving queue.toml stop or cancel it
    released: bool = False
    attached_by: str | None = None  # "<host>/<pid>/<nonce>/<start>" of the reconciler that streams the job
    lease_until: float | None = None
    log_offset: int = 0  # bytes of the log digested and committed
    digest: DigestState | None = None  # what the digest knows, committed with log_offset
    attach_failures: int = 0  # attachments in a row that failed
    last_error: str | None = None
    # Why it ended, as data: {"code": …} (docs/agent-interface.md), with a refusal's whole detail.
    detail: dict | None = None
    # Each time res stopped it above its book to keep memory from running out (the pressure ladder,
    # DESIGN §5.1) and put it back at the queue's head: {"at", "used_gb", "book_gb", "to_gb"}.
    evictions: list[dict] = field(default_factory=list)
    updated: float = 0

    @property
    def id(self) -> JobId:
        return self.request.id

    def eta(self) -> float | None:
        if self.started is None:
            return None
        return self.started + self.request.est_s

    @property
    def spend_usd(self) -> float:
        return self.digest.spend_usd if self.digest else 0.0

    def lease_live(self, now: float, gone: "list[str] | tuple[str, ...]" = ()) -> bool:
        """Someone holds the attachment: a lease not yet expired, of a holder not known to be gone."""
        return (self.attached_by is not None and self.lease_until is not None and now < self.lease_until
                and self.attached_by not in gone)

    @property
    def outcome(self) -> str | None:
        """The stable code of how it ended (docs/agent-interface.md), from `detail`; for a record
        written before res recorded codes, read off its `why` (the one place that still does)."""
        if self.detail and isinstance(self.detail.get("code"), str):
            return self.detail["code"]
        if self.phase != Phase.done or self.why is None:
            return None
        for prefix, code in _LEGACY_WHY:
            if self.why.startswith(prefix):
                return code
        return "exited"

    def expires(self) -> float | None:
        """Past this a running job is overdue (DESIGN §5.1: started + 2 × estimate); a note ends at its
        own time, except the gate's booking of a command run in place (gated), held as a job is."""
        if self.started is None:
            return None
        if self.request.kind == "note" and not self.request.gated:
            return self.started + self.request.est_s
        return self.started + 2 * self.request.est_s


# ---------------------------------------------------------------- observed


@dataclass(slots=True, kw_only=True)
class ExitObs:
    """How a job's unit ended, as recorded by the unit itself (so it survives a dead reconciler)."""

    __pydantic_config__ = _CHECKED

    result: str  # systemd SERVICE_RESULT: success, exit-code, signal, oom-kill, timeout, ...
    code: str  # EXIT_CODE: exited, killed, dumped
    status: str  # EXIT_STATUS: a number, or a signal name (KILL, TERM)
    peak_gb: float | None = None
    cpu_s: float | None = None  # CPU time of the unit's cgroup at its end
    oom_kills: int = 0
    at: float = 0
    invocation: str | None = None  # the run that wrote it (systemd's INVOCATION_ID of the unit)


@dataclass(slots=True, kw_only=True)
class JobObs:
    __pydantic_config__ = _CHECKED

    state: Literal["active", "activating", "deactivating", "inactive", "failed", "absent"] = "absent"
    mem_used_gb: float = 0
    # of which page cache the kernel can reclaim (what is above its book is counted without it)
    mem_cache_gb: float = 0
    pressure_avg60: float | None = None  # memory.pressure `some avg60` (%), cgroup v2 only
    exit: ExitObs | None = None
    log_bytes: int | None = None  # the size of its log (None: not looked at)
    place: str | None = None  # where a cluster job runs: `slurm:4121@node` (None: here)
    pending: str | None = None  # a cluster job not running yet: Slurm's reason (Resources, Priority, …)
    est_start: float | None = None  # … and when Slurm expects to start it


@dataclass(slots=True, kw_only=True)
class SliceObs:
    """The agents slice as systemd and its cgroup report it. Weights and MemoryHigh are systemd's raw
    values: None when unset (systemd says UINT64_MAX: the default weight, no limit)."""

    __pydantic_config__ = _CHECKED

    name: str
    cpu_weight: int | None = None
    io_weight: int | None = None
    memory_high: int | None = None  # bytes
    mem_used_gb: float = 0  # the whole slice: sessions and jobs
    mem_file_gb: float = 0  # of which page cache the kernel can reclaim


@dataclass(slots=True, kw_only=True)
class SessionObs:
    """A running agent session: a process named `claude` with no `claude` among its ancestors."""

    __pydantic_config__ = _CHECKED

    pid: int
    in_slice: bool  # in the agents slice (anywhere below it)
    unit: str = ""  # the unit it runs in now (its cgroup's unit: a scope or a service)
    movable: bool = True  # False: it runs in a service or a container's scope, not ours to move
    scope: str | None = None  # the scope unit it is in, when that scope sits directly in the agents slice
    scope_memory_high: int | None = None  # that scope's MemoryHigh (None: unset or not observed)
    children: list[int] = field(default_factory=list)  # descendants in its own cgroup (moved with it)
    # Its own processes outside any job that use more than the policy's ladder_session_gb (looked for
    # only when that is set): each child of the session with everything under it, as one
    # {"pid", "start", "name", "gb", "pids"} (the pressure ladder may stop it, DESIGN §5.1).
    outside: list[dict] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class World:
    """The live system as the planner sees it (`res observe --json`)."""

    __pydantic_config__ = _CHECKED

    ok: bool = True  # False: jobs could not be observed; nothing destructive may be decided
    errors: list[str] = field(default_factory=list)
    # The cluster (DESIGN §6b): None when not asked this pass (no cluster job or request), else whether
    # it answered. Its jobs, when it did not, are `unobserved`: nothing is decided for them.
    cluster_ok: bool | None = None
    cluster_error: str | None = None
    unobserved: list[JobId] = field(default_factory=list)
    mem_total_gb: float
    mem_available_gb: float
    nproc: int
    jobs: dict[JobId, JobObs] = field(default_factory=dict)
    live_pids: list[int] = field(default_factory=list)  # note owners that are alive
    # Attachment holders on this host whose process is gone: their leases are void at once (DESIGN §5.4).
    gone_holders: list[str] = field(default_factory=list)
    # Queue entries state.db has no record of, whose log exists: they ran before (state.db was lost or
    # replaced), so they are never started again.
    ran_before: list[JobId] = field(default_factory=list)
    # The user's side (DESIGN §5.6). None / empty: not observed (then nothing is changed for them).
    agents_slice: SliceObs | None = None
    sessions: list[SessionObs] | None = None
    tmp_tmpfs_used_gb: float | None = None  # /tmp in use when it is a tmpfs (it is RAM)
    stray_services: list[str] = field(default_factory=list)  # transient services outside the agents slices
    # ... the job each was started from, where its unit says (RES_ESCAPED_FROM, docs/escaping.md), and
    # the memory each holds now (GB; absent: not read)
    stray_from: dict[str, str] = field(default_factory=dict)
    stray_mem_gb: dict[str, float] = field(default_factory=dict)
    # Memory pressure (PSI `full avg10`, %, DESIGN §5.9): the machine's (/proc/pressure/memory) and the
    # agents slice's own (cgroup v2 memory.pressure). None: not observed (then it blocks nothing).
    pressure_full_pct: float | None = None
    slice_pressure_full_pct: float | None = None
    # The same over the last minute (`full avg60`): pressure *held* over the line (the ladder's red).
    pressure_full_avg60_pct: float | None = None
    slice_pressure_full_avg60_pct: float | None = None
    # The gate's bookings in place (Request.in_place): what the command of each uses now (GB, its
    # processes' anonymous memory: observed.procs.in_place_use), and the most it was seen using.
    # Absent: not measured (then all of the booking counts).
    note_use_gb: dict[JobId, float] = field(default_factory=dict)
    note_peak_gb: dict[JobId, float] = field(default_factory=dict)


# ---------------------------------------------------------------- plan

# Each kind has the lifecycle event it records (core/lifecycle.ACTIONS) and its handler
# (apply/executor.Executor.HANDLERS); tests/pure/test_executor_map.py holds both to these kinds.
ActionKind = Literal[
    "enqueue",  # record a new queued entry (bookkeeping)
    "wait",  # a queued entry stays queued this pass (no change; says why and until when)
    "start",
    "grant",  # a note's reservation is recorded
    "refuse",
    "running",  # a starting job's unit is seen started (bookkeeping)
    "stop",
    "evict",  # the pressure ladder's red (DESIGN §5.1): stop a job above its book, back to the queue's head
    "settle",
    "reattach",  # claim the attachment of a live job whose holder's lease lapsed (or who gave it up)
    "requeue",
    "retry",  # an auto-sized job killed at its memory limit: back in the queue once, bigger (DESIGN §5.9)
    "expire",
    "cancel",
    "retire",  # remove a finished entry from desired/queue.toml
    "prune",
    "set",  # change properties of a unit (the agents slice for game mode, a session scope's MemoryHigh)
    "adopt",  # move a running agent session (and its descendants) into a scope in the agents slice
    "end_game",  # game mode's time is up: clear it in desired/game.toml
    "restore",  # write back a queue entry that left the file without `res release`
    "recover",  # record an entry state.db does not know but the runtime or its log does (state.db lost)
    "hold",  # an entry added to queue.toml outside res: shown, never started
]


@dataclass(slots=True)
class Action:
    """One decision of a plan. A plain object: the core makes thousands a pass from validated inputs,
    so nothing here is validated again (pydantic checks what comes in at the boundaries)."""

    kind: ActionKind
    id: JobId
    reason: str = ""  # its line, made at the edge (render.reasons.explain) from `detail`
    # for display: what the entry asked for
    title: str = ""
    mem_gb: float = 0
    cpus: float = 0
    # settle
    at: float | None = None  # when the unit ended
    rc: int | None = None
    peak_gb: float | None = None
    why: str | None = None
    # refuse: True when the request can never fit (exit 1 instead of 3)
    never: bool = False
    # set / adopt: unit properties to give; adopt: the pids to move into a new scope `id`
    props: dict[str, int] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    # The reason as data with a stable `code` (docs/agent-interface.md) and its figures.
    detail: dict | None = None
    # What admission counts of the entry where that is less than its cap (`mem_gb`): its book (DESIGN §5.1)
    book_gb: float | None = None
    # start: where the job runs, on this machine (its systemd) or the cluster (Slurm); the executor
    # starts it there. (A cluster start's detail says it too, `where`, for the plan's reader.)
    where: Literal["local", "cluster"] = "local"


_INDEXED: list = [None, -1, {}]  # Plan.for_id's index: the plan last indexed, its length, its actions by id


@dataclass(slots=True)
class Plan:
    actions: list[Action] = field(default_factory=list)
    budget_mem_gb: float = 0
    budget_cpus: float = 0
    notices: list[str] = field(default_factory=list)  # e.g. the broken-file line
    # When the next pass is due by the clock (core/wake.py), decided with the plan for the loop that
    # applies it (`plan(..., wake=True)`); None: nothing is due by the clock, or not asked.
    next_at: float | None = None
    # The pressure ladder's rung this pass (core/ladder.py: green, amber, red) and why, as data.
    rung: str = "green"
    rung_why: dict = field(default_factory=dict)

    def of(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]

    def for_id(self, job_id: JobId) -> list[Action]:
        """This plan's actions about `job_id`, from an index made once per plan (again if its actions
        changed): the loop answers a whole crowd's requests from one plan, and a scan of every action
        for each answer cost O(queued) per request (3,000 queued: 66 µs, twice per answer)."""
        if _INDEXED[0] is not self or _INDEXED[1] != len(self.actions):
            index: dict[str, list[Action]] = {}
            for a in self.actions:
                index.setdefault(a.id, []).append(a)
            _INDEXED[:] = [self, len(self.actions), index]
        return list(_INDEXED[2].get(job_id, ()))

    def as_data(self) -> dict:
        """The plan as JSON-ready data (`reconcile --dry-run --json`, the loop's answer): its decisions,
        not the loop's own wake-up, nor the executor's `where` (a cluster start's detail says it to the
        reader, as it always did: the data is what it was; a plan read back from it is only shown)."""
        data = asdict(self)
        del data["next_at"]
        for a in data["actions"]:
            del a["where"]
        return data
