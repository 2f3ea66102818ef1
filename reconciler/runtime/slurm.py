"""Jobs on a Slurm cluster (DESIGN §6b): the second runtime, through Slurm's own command-line tools.

Slurm admits and schedules; this only submits, asks, cancels. What it pins (docs/decisions.md):

- `sbatch --parsable` (its answer: `JOBID` or `JOBID;CLUSTER`), the batch script on its stdin;
- `squeue --noheader --states=all --user=ME --format=SQUEUE_FORMAT` (fields below, `|` between
  them, the comment last), the one call a pass makes for every job of ours Slurm still knows;
- `sbatch --test-only` (`sbatch: Job N to start at TIME using …`) for a job asked for now;
- `scancel JOBID`. No `--json` (its schema changes every release; `scontrol` has none before 23.02),
  no `sacct` needed: the batch script writes the job's exit record itself, as a systemd unit does.

A job of ours is the one named `res-r-N` whose comment is `res:<state directory>`: a restarted `res`
finds its jobs by asking Slurm, so a submit cut off between sbatch and its record is found, never
made twice. Jobs are `--no-requeue`: Slurm never runs one a second time after a node failure.
"""
from __future__ import annotations

import asyncio
import math
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.models import ExitObs, JobObs, copy
from reconciler.runtime import JobSpec, RuntimeUnavailable, read_exit_record

JOB_ID = re.compile(r"^r-[0-9]+$")
SQUEUE_FIELDS = ("%i", "%j", "%T", "%r", "%S", "%e", "%N", "%P", "%k")
SQUEUE_FORMAT = "|".join(SQUEUE_FIELDS)
CALL_TIMEOUT_S = 20.0
STOP_WAIT_S = 60.0  # scancel to the job's end: Slurm's KillWait (30 s by default) and slack
RETRY_AFTER_S = 15.0  # after squeue failed, how long passes take the cluster as unreachable without asking
FRESH_S = 2.0  # an answer of squeue this recent stands for a start's "is it there already?"
NOW_SLACK_S = 5  # a test-only start this close to now is "now" (Slurm's clock is in whole seconds)

# Slurm job states (squeue %T) as the runtime protocol's unit states.
ALIVE_STATES = {"PENDING": "activating", "CONFIGURING": "activating", "REQUEUED": "activating",
                "REQUEUE_FED": "activating", "REQUEUE_HOLD": "activating", "RESIZING": "active",
                "RUNNING": "active", "SUSPENDED": "active", "STOPPED": "active", "SIGNALING": "active",
                "STAGE_OUT": "deactivating", "COMPLETING": "deactivating"}
# An ended job's Slurm state, as an exit record's `result` (what the batch script cannot know).
ENDED_RESULTS = {"COMPLETED": "", "FAILED": "", "CANCELLED": "cancelled", "TIMEOUT": "timeout",
                 "OUT_OF_MEMORY": "oom-kill", "NODE_FAIL": "node-fail", "BOOT_FAIL": "node-fail",
                 "DEADLINE": "timeout", "PREEMPTED": "preempted", "REVOKED": "cancelled", "SPECIAL_EXIT": ""}


# The protocol's error (runtime/__init__.py), its name kept here for older importers.
from reconciler.runtime import RuntimeBusy  # noqa: E402,F401


@dataclass(frozen=True)
class SlurmJob:
    """One line of squeue's answer."""

    slurm_id: str
    name: str
    state: str
    reason: str
    start: float | None
    end: float | None
    nodes: str
    partition: str
    comment: str


def parse_time(text: str) -> float | None:
    """Slurm's `2026-12-01T08:06:40` (the cluster's local time) as epoch seconds; None for N/A,
    Unknown, None."""
    text = text.strip()
    if not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$", text):
        return None
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def parse_squeue(text: str) -> list[SlurmJob]:
    """squeue's answer in SQUEUE_FORMAT, one job a line; a line that does not have every field is
    skipped (the comment, last, may hold `|` itself)."""
    out = []
    n = len(SQUEUE_FIELDS)
    for line in text.splitlines():
        parts = line.split("|", n - 1)
        if len(parts) != n or not parts[0].strip():
            continue
        sid, name, state, reason, start, end, nodes, partition, comment = (p.strip() for p in parts)
        out.append(SlurmJob(slurm_id=sid, name=name, state=state.split()[0] if state else "",
                            reason=reason, start=parse_time(start), end=parse_time(end), nodes=nodes,
                            partition=partition, comment=comment))
    return out


def parse_submitted(text: str) -> str:
    """The job id in `sbatch --parsable`'s answer (`4121` or `4121;cluster`)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    sid = first.split(";")[0].strip()
    if not sid.isdigit():
        raise RuntimeError(f"sbatch answered {first[:200]!r}, not a job id")
    return sid


_TEST_ONLY = re.compile(r"Job (\d+) to start at (\S+) using (\d+) processors on nodes (\S+) in partition (\S+)")


def parse_test_only(text: str) -> tuple[float | None, str, str] | None:
    """(start, nodes, partition) from `sbatch --test-only`'s line, or None when it says no such thing."""
    m = _TEST_ONLY.search(text)
    if not m:
        return None
    return parse_time(m.group(2)), m.group(4), m.group(5)


def parse_sinfo_sizes(text: str) -> list[tuple[int, int]]:
    """(CPUs, memory MB) of each node line of `sinfo --format=%c|%m` (`2|4096`, `4+|2000+`: the
    smallest of a group)."""
    out = []
    for line in text.splitlines():
        cpus, _, mem = line.strip().partition("|")
        try:
            out.append((int(cpus.rstrip("+")), int(mem.rstrip("+"))))
        except ValueError:
            continue
    return out


def fits_node(spec: JobSpec, cpus: int, mem_mb: int) -> bool:
    """Whether a node of this size could ever hold the job as sbatch_args asks for it."""
    return math.ceil(spec.mem_gb * 1024) <= mem_mb and max(1, math.ceil(spec.cpus)) <= cpus


def slurm_exit(job: SlurmJob) -> ExitObs:
    """How a job ended as far as Slurm alone tells (its batch script wrote no exit record: the node
    failed, or the script was killed before it could)."""
    result = ENDED_RESULTS.get(job.state, job.state.lower())
    if job.state in ("COMPLETED",):
        return ExitObs(result="success", code="exited", status="0", at=job.end or 0)
    return ExitObs(result=result or "signal", code="killed", status="KILL", at=job.end or 0,
                   oom_kills=1 if job.state == "OUT_OF_MEMORY" else 0)


def with_slurm_state(ex: ExitObs, job: SlurmJob | None) -> ExitObs:
    """The batch script's own record, with what only Slurm knows: it ended at its time limit, was
    cancelled from outside, or killed at its memory limit (Slurm's OUT_OF_MEMORY)."""
    if job is None:
        return ex
    result = ENDED_RESULTS.get(job.state, "")
    if not result or ex.result == result:
        return ex
    if result == "oom-kill" and ex.code == "exited" and ex.oom_kills == 0:
        # Slurm saw an OOM kill in the job's cgroup, yet the command exited by itself (a child was
        # killed and it went on): its own exit code stands, the kill is on record.
        return copy(ex, oom_kills=1)
    return copy(ex, result=result)


def batch_script(spec: JobSpec, exit_hook: list[str]) -> str:
    """The batch script: the command verbatim (argv quoted for sh, no expansion), its stdin closed,
    every signal Slurm sends (scancel, the time limit) passed on to it; then its exit record, written
    by exit_hook (exit_record.py, as a systemd unit's ExecStopPost) with how it ended, or by sh
    itself where that cannot run on the node."""
    cmd = " ".join(shlex.quote(a) for a in spec.cmd)
    hook = " ".join(shlex.quote(a) for a in exit_hook)
    record = shlex.quote(str(spec.exit_path))
    return f"""#!/bin/sh
# res {spec.job_id}: written by res (reconciler/runtime/slurm.py); its exit record goes to {record}
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP USR1 USR2
cd {shlex.quote(spec.cwd or "/")} || exit 200
{cmd} </dev/null &
child=$!
while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done
if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
  code=killed; status=$(kill -l "$((rc - 128))" 2>/dev/null || echo "$((rc - 128))"); result=signal
elif [ "$rc" -eq 0 ]; then code=exited; status=0; result=success
else code=exited; status=$rc; result=exit-code
fi
export SERVICE_RESULT="$result" EXIT_CODE="$code" EXIT_STATUS="$status" INVOCATION_ID="$SLURM_JOB_ID"
export RES_EXIT_RECORD={record}
if ! {hook} 2>/dev/null || [ ! -s {record} ]; then
  printf '{{"result": "%s", "code": "%s", "status": "%s", "peak_bytes": null, "oom_kills": 0, "at": %s, "invocation": "%s"}}\\n' \\
    "$result" "$code" "$status" "$(date +%s)" "$SLURM_JOB_ID" > {record}.tmp.$$ && mv -f {record}.tmp.$$ {record}
fi
exit "$rc"
"""


def sbatch_args(spec: JobSpec, name: str, comment: str, cluster, queue: bool) -> list[str]:
    mem_mb = max(1, math.ceil(spec.mem_gb * 1024))
    minutes = max(1, math.ceil(spec.est_s / 60)) if spec.est_s else 1
    args = ["--parsable", f"--job-name={name}", f"--comment={comment}", f"--mem={mem_mb}M",
            f"--cpus-per-task={max(1, math.ceil(spec.cpus))}", f"--time={minutes}", "--no-requeue",
            f"--output={spec.log_path}", "--open-mode=append", f"--chdir={spec.cwd or '/'}", "--export=ALL"]
    for key in ("partition", "account", "qos"):
        value = getattr(cluster, key, "") if cluster is not None else ""
        if value:
            args.append(f"--{key}={value}")
    return args


class SlurmRuntime:
    """The runtime protocol (runtime/__init__.py) on a Slurm cluster. `cluster`: the policy's
    [cluster] table (partition, account, qos)."""

    name = "slurm"
    address: str | None = None  # the tools find the controller (slurm.conf); res holds no address of it

    def __init__(self, state_root: Path, logs_dir: Path, cluster=None, env: dict[str, str] | None = None,
                 shared_dir: str = ""):
        """`logs_dir`: where jobs write their logs and exit records; when it is a folder of the policy's
        `shared_dir`, that directory must be there (mounted) for the cluster to be used."""
        self.state_root, self.logs_dir, self.cluster = Path(state_root), Path(logs_dir), cluster
        self.shared_dir = shared_dir
        self.comment = f"res:{self.state_root}"
        self.env = dict(os.environ if env is None else env)
        self._user = str(os.getuid())
        self._known: dict[str, SlurmJob] = {}  # job id -> its Slurm job, as last seen
        self._known_at = float("-inf")  # when (monotonic)
        # The last time squeue failed, and why: for RETRY_AFTER_S the cluster is not asked again
        # (a down slurmctld costs each ask ~10 s of client retries; the loop's passes must go on).
        self._failed: tuple[float, RuntimeUnavailable] | None = None

    # ------------------------------------------------------------------ the tools

    async def _call(self, argv: list[str], stdin: str | None = None, env: dict[str, str] | None = None,
                    what: str = "") -> tuple[int, str, str]:
        """(rc, stdout, stderr) of one Slurm tool; RuntimeUnavailable when it cannot be run."""
        argv = [self._tool(argv[0]), *argv[1:]]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env or self.env)
        except FileNotFoundError:
            raise RuntimeUnavailable(f"slurm: {os.path.basename(argv[0])} is not installed (is this a Slurm submit host? check: which {argv[0]})",
                                     absent=True) from None
        except OSError as e:
            raise RuntimeUnavailable(f"slurm: cannot run {argv[0]}: {e.strerror}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None),
                                              CALL_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeUnavailable(f"slurm: {argv[0]} did not answer in {CALL_TIMEOUT_S:g} s "
                                     "(slurmctld down or slow? check: scontrol ping)") from None
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def _tool(self, name: str) -> str:
        """A Slurm tool as found on our own PATH (not the job's)."""
        import shutil

        return shutil.which(name, path=self.env.get("PATH")) or name

    @staticmethod
    def _unreachable(tool: str, err: str) -> RuntimeUnavailable:
        line = " ".join(err.split())[:300] or "no answer"
        hint = "munge failing? check: munge -n | unmunge" if "munge" in line.lower() or "credential" in line.lower() \
            else "slurmctld down? check: scontrol ping"
        # Slurm's clients answer an unreachable controller with an error, never by half-submitting.
        return RuntimeUnavailable(f"slurm: {tool}: {line} ({hint})", not_started=True)

    async def connect(self) -> None:
        return None  # each call is its own: nothing to hold open

    async def close(self) -> None:
        return None

    def user_side(self):
        return None

    async def watch(self, callback) -> None:
        return None  # Slurm pushes nothing: the loop's sweep and the exit records' appearance tell

    def unit_name(self, job_id: str) -> str:
        if not JOB_ID.match(job_id):
            raise ValueError(f"not a job id: {job_id!r}")
        return f"res-{job_id}"

    def place(self, job_id: str) -> str | None:
        """`slurm:4121@node` for a job seen in the last answer."""
        job = self._known.get(job_id)
        if job is None:
            return None
        return f"slurm:{job.slurm_id}" + (f"@{job.nodes}" if job.nodes and not job.nodes.startswith("(") else "")

    # ------------------------------------------------------------------ ask

    async def jobs(self) -> dict[str, SlurmJob]:
        """Our jobs Slurm knows (the newest per name), by res job id."""
        if self._failed is not None and time.monotonic() - self._failed[0] < RETRY_AFTER_S:
            raise self._failed[1]
        try:
            rc, out, err = await self._call(["squeue", "--noheader", "--states=all", f"--user={self._user}",
                                             f"--format={SQUEUE_FORMAT}"])
            if rc != 0:
                raise self._unreachable("squeue", err)
        except RuntimeUnavailable as e:
            self._failed = (time.monotonic(), e)
            raise
        self._failed = None
        mine: dict[str, SlurmJob] = {}
        for job in parse_squeue(out):
            if job.comment != self.comment or not job.name.startswith("res-"):
                continue
            job_id = job.name[4:]
            if JOB_ID.match(job_id) and (job_id not in mine or int(job.slurm_id) > int(mine[job_id].slurm_id)):
                mine[job_id] = job
        self._known, self._known_at = mine, time.monotonic()
        return mine

    async def observe(self, job_ids: list[str]) -> dict[str, JobObs]:
        if self.shared_dir:
            self._make_logs()  # not there: the cluster is unobserved (nothing settled without exit records)
        jobs = await self.jobs()
        out: dict[str, JobObs] = {}
        for job_id in set(jobs) | set(job_ids):
            job = jobs.get(job_id)
            own = read_exit_record(self.exit_path(job_id))
            if job is not None and own is not None and own.invocation not in (None, job.slurm_id):
                own = None  # an earlier attempt's record
            if own is not None and own.cpu_s is not None:
                # The script reads CPU time from the unified hierarchy, where Slurm's task/cgroup (v1)
                # does not place the job: on the test cluster it read the node's whole parent (18,361 s
                # for a 6 s job), and `--cpus auto` learned 3,231 CPUs. None rather than a wrong figure.
                own = copy(own, cpu_s=None)
            if job is None:
                out[job_id] = JobObs(state="absent", exit=own)
            elif job.state in ALIVE_STATES:
                pending = job.state == "PENDING"
                out[job_id] = JobObs(state=ALIVE_STATES[job.state], exit=own, place=self.place(job_id),
                                     pending=(job.reason or "None") if pending else None,
                                     est_start=job.start if pending else None)
            else:
                ended = with_slurm_state(own, job) if own is not None else slurm_exit(job)
                out[job_id] = JobObs(state="inactive", place=self.place(job_id),
                                     exit=copy(ended, invocation=job.slurm_id))
        return out

    def _make_logs(self) -> None:
        """This state directory's folder in the shared directory, made 0700 when missing (asked every
        time the cluster is: a stat). The shared directory itself is the user's: while it is not there
        (not mounted?), the cluster is not used, with why: its jobs' exit records are there, and nothing
        may be submitted that could not write them."""
        from reconciler.config.paths import make_private_dir, own_private_dir

        why = own_private_dir(self.logs_dir)
        if why is None:
            return
        if why != "missing":
            raise RuntimeUnavailable(f"slurm: {self.logs_dir} {why}; refusing to use it", not_started=True)
        shared = self.shared_dir
        if not os.path.isdir(shared):
            raise RuntimeUnavailable(f"slurm: the shared_dir {shared} is not a directory here "
                                     f"(not mounted? check: ls -ld {shared})", not_started=True)
        why = make_private_dir(self.logs_dir)
        if why is not None:
            raise RuntimeUnavailable(f"slurm: {self.logs_dir} {why}; refusing to use it", not_started=True)

    # ------------------------------------------------------------------ submit, cancel

    def exit_path(self, job_id: str) -> Path:
        from reconciler.config.paths import exit_record_path

        return exit_record_path(self.logs_dir, job_id)

    def _exit_hook(self) -> list[str]:
        from reconciler.runtime.jobunit import EXIT_RECORD_SCRIPT

        return [sys.executable, "-I", "-S", EXIT_RECORD_SCRIPT]

    async def start(self, spec: JobSpec) -> str | None:
        """Submit (idempotent: a job of ours already there under this name and not ended is it)."""
        name = self.unit_name(spec.job_id)
        if self.shared_dir:
            self._make_logs()
        # Asked this very pass (its observation, moments ago): not asked again.
        jobs = self._known if time.monotonic() - self._known_at < FRESH_S else await self.jobs()
        there = jobs.get(spec.job_id)
        if there is not None and there.state in ALIVE_STATES:
            return there.slurm_id  # submitted before (by a pass cut off before it recorded that)
        try:
            os.unlink(spec.exit_path)  # an earlier attempt's record: the one found later is this one's
        except FileNotFoundError:
            pass
        # The job's environment is the caller's (sbatch --export=ALL); where to find the cluster is ours.
        env = {**spec.env, **{k: v for k, v in self.env.items() if k in ("SLURM_CONF", "SLURM_CLUSTERS")}}
        args = sbatch_args(spec, name, self.comment, self.cluster, spec.queue)
        if not spec.queue:
            await self._can_start_now(spec, args, env)
        rc, out, err = await self._call(["sbatch", *args], stdin=batch_script(spec, self._exit_hook()), env=env)
        if rc != 0:
            await self._refused("sbatch", err or out, spec)
        return parse_submitted(out)

    async def _refused(self, tool: str, text: str, spec: JobSpec | None = None) -> None:
        """Raise what a non-zero answer of sbatch means: the cluster unreachable, or its nodes not up
        yet (slurmctld just restarted: nothing was submitted, and it is tried again next pass), or a
        request it will never take (RuntimeError: the start fails, with Slurm's words)."""
        line = " ".join(text.split())[:300]
        if _unreachable_text(line):
            raise self._unreachable(tool, text)
        if "node configuration is not available" in line.lower() and spec is not None:
            # Slurm says this both of a request no node could ever hold and of any request while its
            # nodes are not registered (slurmctld just restarted): only the first is final.
            argv = ["sinfo", "--noheader", "--format=%c|%m"]
            if getattr(self.cluster, "partition", ""):
                argv.append(f"--partition={self.cluster.partition}")
            rc, out, _ = await self._call(argv)
            nodes = parse_sinfo_sizes(out) if rc == 0 else []
            if rc != 0 or any(fits_node(spec, cpus, mem_mb) for cpus, mem_mb in nodes):
                raise RuntimeUnavailable(f"slurm: {tool}: {line} (a node could hold it: not up yet? check: sinfo)",
                                         not_started=True)
        raise RuntimeError(f"{tool} refused it: {line}")

    async def _can_start_now(self, spec: JobSpec, args: list[str], env: dict[str, str]) -> None:
        """Raise RuntimeBusy unless Slurm would start it now (`sbatch --test-only`)."""
        test = [a for a in args if not a.startswith(("--parsable", "--output", "--open-mode"))]
        rc, out, err = await self._call(["sbatch", "--test-only", *test], stdin="#!/bin/sh\ntrue\n", env=env)
        text = (err + out)
        if rc != 0:
            await self._refused("sbatch", text, spec)
        parsed = parse_test_only(text)
        if parsed is None:
            return  # an answer we do not read: submit, and Slurm decides
        start, nodes, partition = parsed
        now = time.time()
        if start is None or start <= now + NOW_SLACK_S:
            return
        raise RuntimeBusy({"code": "busy", "resource": "cluster", "partition": partition, "nodes": nodes,
                           "est_start": start, "retry": "after", "retry_at": start})

    async def stop(self, job_id: str, kill: bool = False) -> None:
        # (`kill`: the same: a cluster job holds none of this machine's memory, so nothing here is in a
        # hurry to stop one.)
        job = (await self.jobs()).get(job_id)
        if job is None or job.state not in ALIVE_STATES:
            return
        rc, out, err = await self._call(["scancel", job.slurm_id])
        if rc != 0:
            if _unreachable_text(err):
                raise self._unreachable("scancel", err)
            raise RuntimeError(f"scancel {job.slurm_id} failed: {' '.join(err.split())[:300]}")
        # scancel only asks: wait (bounded) until Slurm says the job ended, as systemd's stop waits
        # for its stop job, so that the pass after a stop sees the end and settles it.
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            job = (await self.jobs()).get(job_id)
            if job is None or job.state not in ALIVE_STATES:
                return

    async def forget(self, job_id: str) -> None:
        try:
            os.unlink(self.exit_path(job_id))
        except FileNotFoundError:
            pass


def _unreachable_text(line: str) -> bool:
    low = line.lower()
    return any(s in low for s in ("unable to contact slurm controller", "connection refused", "munge",
                                  "socket timed out", "communication connection failure", "zero bytes were transmitted",
                                  "credential", "slurm_persist_conn_open", "could not establish"))
