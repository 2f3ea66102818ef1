"""What is measured of one arm's run: its attempts (each ask, start, end), the sampler (memory by
agent, the container's CPU time, the kernel's memory pressure), and every figure of its row.

Per arm: makespan and makespan ÷ the lower bound max(Σ peak·t / W, Σ cpu·t / cores, the longest
agent's own chain) (t: each job's time alone, from set-up; the same bound with the declared sizes is
printed beside it); attempts OOM-killed; jobs failed after two retries; each job's wait (ask → its
process starts, summed over its attempts) p50/p95; the hand-off (a waiting job's start − the last job
end before it); overtaken (seconds a job waited only because later-asked jobs ran: what jumping the
queue cost); idle cpu·s (the container's idle cores while a job waited); the container's peak memory
(the cgroup's own peak counter); /proc/pressure/memory `full`: its max avg10 and its total over the
run (system-wide: this machine has no per-cgroup PSI on cgroup v1); the owner's probe p50/p99 and p99
÷ the idle p99. Under the table: told (a job's end → its agent knows) and "fits but waits" (seconds in
which some waiting job fitted beside what ran, by what the arm knows). docs/crowd.md has the figures.

Timeline holds the figures as methods over what a run recorded; armrun.ArmRun is one, and runs the
arm. Imports machine and workload."""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .machine import GIB, container_usage, cpu_dirs, cpu_used_s
from .workload import MARGIN, Job

ASK_SKEW = 0.25  # s: two asks closer than this may reach an arm in either order (a client's start-up)


@dataclass
class Attempt:
    agent: int
    job: int
    kind: str
    attempt: int
    asked: float
    started: float | None  # its process started (its own stamp)
    finished: float | None  # its process ended (its own stamp; none when killed)
    ended: float  # its agent was told
    rc: int
    # 1: res started this job again itself after a kill at its memory limit (res-learned; the agent saw
    # one run: this attempt is asked when the run before it was killed, and the agent is told at its end)
    restart: int = 0

    @property
    def out(self) -> float:
        """When it stopped holding anything: its own end stamp, else (killed) when its agent knew."""
        return self.finished or self.ended

    @property
    def in_(self) -> float:
        """When it stopped waiting: its start, else (never started) when its agent gave up on it."""
        return self.started if self.started is not None else self.ended

    def runs_at(self, t: float) -> bool:
        return self.started is not None and self.started <= t < self.out

    def waits_at(self, t: float) -> bool:
        return self.asked <= t < self.in_


class Sampler(threading.Thread):
    """Every 0.25 s: the container's memory and CPU time, each running job's memory (its process's
    own cgroup, by the pid its stamp names) by agent, and the kernel's memory pressure."""

    def __init__(self, cg: Path, live: dict, follow: bool = False):
        super().__init__(daemon=True)
        self.cg, self.cpu_cgs, self.live = cg, cpu_dirs(cg), live
        self.samples, self.halt = [], threading.Event()
        self.job_cg: dict[Path, str] = {}  # stamp file -> the cgroup of its process
        # follow (res-learned): res may start a job again after a kill at its limit; the new process
        # stamps the same file and keeps the killed one's .pid: each process of a stamp file is found
        # by its command line, and when each was first seen gone is noted (the kill, to 0.25 s)
        self.follow = follow
        self.pid_of: dict[Path, int] = {}
        self.seen_pids: dict[Path, set[int]] = {}
        self.deaths: dict[Path, list[float]] = {}

    @staticmethod
    def runs_job(pid: int, stampf: Path) -> bool:
        """Whether `pid` is alive and is a crowd job process of this stamp file (crowd_job.py KIND STAMP …)."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return len(args) > 3 and args[1].endswith(b"crowd_job.py") and args[3] == os.fsencode(str(stampf))

    def find_job(self, stampf: Path, seen: set[int]) -> int | None:
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in seen and self.runs_job(int(name), stampf):
                return int(name)
        return None

    def followed_cgroup(self, stampf: Path) -> str | None:
        """The cgroup of the process now running the job of `stampf` (follow mode), or None."""
        from reconciler.observed.procs import cgroup_of

        pid = self.pid_of.get(stampf)
        if pid is not None and not self.runs_job(pid, stampf):
            self.deaths.setdefault(stampf, []).append(time.monotonic())
            del self.pid_of[stampf]
            self.job_cg.pop(stampf, None)
            pid = None
        if pid is None:
            seen = self.seen_pids.setdefault(stampf, set())
            try:
                pid = int(Path(f"{stampf}.pid").read_text())
            except (OSError, ValueError):
                return None  # not started yet: it waits
            if pid in seen or not self.runs_job(pid, stampf):
                pid = self.find_job(stampf, seen)
                if pid is None:
                    return None
            seen.add(pid)
            self.pid_of[stampf] = pid
        if stampf not in self.job_cg:
            cg = cgroup_of(pid)
            if cg is None:
                return None
            self.job_cg[stampf] = cg
        return self.job_cg[stampf]

    def cpu_used(self) -> float | None:
        for d in self.cpu_cgs:
            used = cpu_used_s(d)
            if used is not None:
                self.cpu_cgs = [d]  # found: only this one from now on
                return used
        return None

    @staticmethod
    def slurm_cgroup(pid: int) -> str | None:
        """The memory cgroup of the Slurm job `pid` runs in (…/job_N), when it runs on one of the
        crowd cluster's nodes (Debian's slurmd: /slurm_NODE/uid_U/job_N/step_batch/…), else None.
        Its systemd cgroup is no help there: that is where slurmd was started from."""
        try:
            return slurm_job_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return None

    def agent_memory(self) -> dict:
        """Agent -> bytes in use by its running job's cgroup; a job on a cluster node under "c<agent>"
        (outside the container)."""
        from reconciler.observed.cgroup import memory_used_bytes
        from reconciler.observed.procs import cgroup_of

        out = {}
        for agent, stampf in list(self.live.items()):
            cg = self.followed_cgroup(stampf) if self.follow else self.job_cg.get(stampf)
            if cg is None and self.follow:
                continue  # not started yet, or between a kill and res's start of it again
            if cg is None:
                try:
                    pid = int(Path(f"{stampf}.pid").read_text())
                except (OSError, ValueError):
                    continue  # not started yet: it waits
                slurm = self.slurm_cgroup(pid)
                cg = f"cluster:{slurm}" if slurm else cgroup_of(pid)
                if cg is None:
                    continue
                self.job_cg[stampf] = cg
            remote = cg.startswith("cluster:")
            used = memory_used_bytes(cg[len("cluster:"):] if remote else cg)
            if used is not None:
                out[f"c{agent}" if remote else agent] = used
        return out

    @staticmethod
    def psi_full() -> tuple[float, int] | None:
        try:
            for line in Path("/proc/pressure/memory").read_text().splitlines():
                if line.startswith("full"):
                    f = dict(kv.split("=") for kv in line.split()[1:])
                    return float(f["avg10"]), int(f["total"])
        except (OSError, ValueError, KeyError):
            return None
        return None

    def run(self):
        while not self.halt.is_set():
            psi = self.psi_full()
            self.samples.append((time.monotonic(), container_usage(self.cg), psi[0] if psi else None,
                                 self.cpu_used(), self.agent_memory()))
            self.halt.wait(0.25)


def slurm_job_cgroup(proc_cgroup: str) -> str | None:
    """From the text of /proc/PID/cgroup: the memory cgroup of the Slurm job the process runs in
    (…/slurm_NODE/uid_U/job_N, the job's own level), or None when it runs in no Slurm job."""
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers in ("memory", "") and "/slurm" in path and "/job_" in path:
            head, _, tail = path.partition("/job_")
            return f"{head}/job_{tail.split('/')[0]}"
    return None


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s) - 1e-9) - 1))]  # nearest rank


def res_stops(records: list) -> tuple[int, float]:
    """(how many times res stopped a job above its book, the CPU-seconds those attempts had used)."""
    n, cpu = 0, 0.0
    for rec in records:
        for stop in getattr(rec, "evictions", None) or []:
            n += 1
            cpu += float(stop.get("cpu_s") or 0.0)
    return n, cpu


class Timeline:
    """One arm's run as recorded, and its figures. Set by the run (armrun.ArmRun): `name`, `plan`,
    `mem_gb`, `attempts` (times in seconds since `t0`, when the agents start), `errors`; `raw`
    ((agent, job, attempt) -> its stamp file, its stamps, its log); res-learned's `booked` ((agent,
    job, attempt, restart) -> the GB, CPUs and --for res chose); `records` (res's state.db, the res
    arms); res-overflow's `wall0`, `cluster_gb` and `sbatch_s`."""

    name: str
    plan: list[list[Job]]
    mem_gb: float
    attempts: list[Attempt]
    errors: list[str]
    t0: float
    wall0: float
    booked: dict[tuple, tuple[float, float, float]]
    raw: dict[tuple, tuple]
    records: list | None
    cluster_gb: tuple
    sbatch_s: list[float]

    def cluster_figures(self) -> dict:
        """res-overflow: which attempts res sent to the cluster (its records' `where`, found by the
        attempt's stamp file in the command), and for those: ask → res's submit (the pass that
        decided it: the record's start) → the job's process started on a node (its own stamp)."""
        by_stamp = {}
        for rec in self.records or []:
            for w in rec.request.cmd or []:
                if w.endswith(".start"):
                    by_stamp[w] = rec
        sent = []
        for a in self.attempts:
            stampf = self.raw.get((a.agent, a.job, a.attempt), (None,))[0]
            rec = by_stamp.get(stampf)
            if rec is None or rec.where != "cluster":
                continue
            submit = None if rec.started is None else rec.started - self.wall0 - self.t0
            sent.append(dict(agent=a.agent, job=a.job, attempt=a.attempt, kind=a.kind, asked=a.asked, submitted=submit,
                             started=a.started, finished=a.finished, rc=a.rc))
        to_start = [x["started"] - x["submitted"] for x in sent if None not in (x["started"], x["submitted"])]
        to_submit = [x["submitted"] - x["asked"] for x in sent if x["submitted"] is not None]
        told = [a.ended - a.finished for a in self.attempts if a.finished is not None and
                any((x["agent"], x["job"], x["attempt"]) == (a.agent, a.job, a.attempt) for x in sent)]
        return dict(nodes_gb=list(self.cluster_gb), records_read=self.records is not None, sent=sent,
                    attempts=len(self.attempts), sbatch_s=self.sbatch_s,
                    sbatch_p50_s=pct(self.sbatch_s, 0.5), sbatch_max_s=max(self.sbatch_s, default=None),
                    submit_to_start_p50_s=pct(to_start, 0.5), submit_to_start_max_s=max(to_start, default=None),
                    ask_to_submit_p50_s=pct(to_submit, 0.5), ask_to_submit_max_s=max(to_submit, default=None),
                    told_p50_s=pct(told, 0.5), told_max_s=max(told, default=None))

    def _intervals(self, more=()):
        """(t0, t1, running, waiting) between consecutive events (asks, starts, ends, and `more`)."""
        events = sorted({t for a in self.attempts for t in (a.asked, a.started, a.out) if t is not None} | set(more))
        for t0, t1 in zip(events, events[1:]):
            mid = (t0 + t1) / 2
            yield t0, t1, [a for a in self.attempts if a.runs_at(mid)], [a for a in self.attempts if a.waits_at(mid)]

    def _fits(self):
        """fits(running, attempt): whether the arm would start `attempt` beside `running`, by what it
        knows: res, the sizes it was told (against W and the cores); slots, their count. None for the
        arms that never hold a job back."""
        if self.name.startswith("slots-"):
            n = int(self.name.split("-")[1])
            return lambda running, a: len(running) < n
        if self.name not in ("res", "res-flat", "res-learned"):
            return None
        jobs = {(j.agent, j.idx): j for a in self.plan for j in a}
        flat = self.name == "res-flat"
        cores = len(os.sched_getaffinity(0))
        if self.name == "res-learned":  # the sizes res chose (state.db), run by run
            if any((a.agent, a.job, a.attempt, a.restart) not in self.booked for a in self.attempts):
                return None

            def size(a):
                return self.booked[(a.agent, a.job, a.attempt, a.restart)][:2]
        else:
            def size(a):
                j = jobs[(a.agent, a.job)]
                return (1.0, 0.5) if flat else (int(j.peak_gb * MARGIN * 1024) / 1024, j.cpus)

        def fits(running, a):
            return (size(a)[0] <= self.mem_gb - sum(size(r)[0] for r in running) + 1e-6 and
                    size(a)[1] <= cores - sum(size(r)[1] for r in running) + 1e-6)
        return fits

    def fits_but_waits(self) -> float | None:
        """Seconds during which some job waited although, by what the arm knows (res: the declared
        sizes and CPUs of what ran; slots: their count), it fitted beside what ran."""
        fits = self._fits()
        if fits is None:
            return None
        return sum(t1 - t0 for t0, t1, running, waiting in self._intervals() if any(fits(running, a) for a in waiting))

    def overtaken(self) -> tuple[float, float] | None:
        """(seconds, of them past an estimate): summed over waiting jobs, the time a job waited only
        because jobs asked after it were running (without them it would have fitted, by what the arm
        knows): what jumping the queue cost those it jumped. The second figure is the part during
        which every such later job had run past its own --for (time alone): estimate error, not the
        backfill rule."""
        fits = self._fits()
        if fits is None:
            return None
        told = {(j.agent, j.idx): max(1, round(j.time_s)) for a in self.plan for j in a}

        def est(a):  # its --for: what the arm told res (res-learned: what res chose)
            if self.name == "res-learned":
                return self.booked[(a.agent, a.job, a.attempt, a.restart)][2]
            return told[(a.agent, a.job)]
        total = past = 0.0
        overran = [a.started + est(a) for a in self.attempts if a.started is not None]
        for t0, t1, running, waiting in self._intervals(overran):
            mid = (t0 + t1) / 2
            for w in waiting:
                # asked later by more than a client's start-up: asks closer than that reach the
                # arm in either order (the harness stamps an ask before `res run` even starts)
                later = [r for r in running if r.asked > w.asked + ASK_SKEW]
                if later and not fits(running, w) and fits([r for r in running if r not in later], w):
                    total += t1 - t0
                    if all(mid > r.started + est(r) for r in later):
                        past += t1 - t0
        return total, past

    def idle_cpu_waiting(self, samples: list) -> float | None:
        """CPU-seconds the container's cores were idle while some job waited (from its CPU counter)."""
        cores = len(os.sched_getaffinity(0))
        total, seen = 0.0, False
        for (ta, _, _, ca, _), (tb, _, _, cb, _) in zip(samples, samples[1:]):
            if ca is None or cb is None:
                continue
            seen = True
            mid = (ta + tb) / 2 - self.t0
            if any(a.waits_at(mid) for a in self.attempts):
                total += max(0.0, cores * (tb - ta) - (cb - ca))
        return total if seen else None

    def figures(self, makespan, probe_ms, samples, psi0, psi1, peak) -> dict:
        by_job: dict[tuple, list[Attempt]] = {}
        for a in self.attempts:
            by_job.setdefault((a.agent, a.job), []).append(a)
        waits = [sum(max(0.0, a.in_ - a.asked) for a in atts)
                 for atts in by_job.values()]
        oom = sum(1 for a in self.attempts if a.rc in (-9, 137))
        failed = sum(1 for atts in by_job.values() if atts[-1].rc != 0)
        lost = sum(1 for a in self.plan for j in a) - len(by_job)
        # hand-off: for an attempt that waited while another ended, from the last such end to its start
        ends = sorted(a.out for a in self.attempts)
        handoff = []
        for a in self.attempts:
            if a.started is None or a.started - a.asked < 0.3:
                continue
            before = [e for e in ends if a.asked < e <= a.started]
            if before:
                handoff.append(a.started - before[-1])
        fits_waiting = self.fits_but_waits()
        overtaken = self.overtaken()
        # told: from a job's own end to its agent knowing
        told = [a.ended - a.finished for a in self.attempts if a.finished is not None]
        stops = res_stops(self.records) if self.records is not None else None
        work = sum(j.cpu_s for agent in self.plan for j in agent)
        return dict(
            arm=self.name, makespan_s=makespan, oom_killed=oom, failed=failed + lost,
            # res's own stops of jobs above their book, and the CPU-seconds of the attempts it stopped
            # ÷ all the jobs' CPU-seconds (work lost to them); None: not a res arm
            res_stops=None if stops is None else stops[0],
            lost_pct=None if stops is None or not work else 100 * stops[1] / work,
            wait_p50_s=pct(waits, 0.5), wait_p95_s=pct(waits, 0.95),
            peak_gb=None if peak is None else peak / GIB,
            psi_full_max_avg10=max((s[2] for s in samples if s[2] is not None), default=None),
            psi_full_total_ms=None if not (psi0 and psi1) else (psi1[1] - psi0[1]) / 1000,
            fits_but_waits_s=fits_waiting,
            overtaken_s=None if overtaken is None else overtaken[0],
            overtaken_past_estimate_s=None if overtaken is None else overtaken[1],
            idle_cpu_waiting_s=self.idle_cpu_waiting(samples),
            handoff_p50_s=pct(handoff, 0.5), handoff_max_s=max(handoff, default=None), handoff_n=len(handoff),
            told_p50_s=pct(told, 0.5), told_p95_s=pct(told, 0.95),
            probe_p50_ms=pct(probe_ms, 0.5), probe_p99_ms=pct(probe_ms, 0.99), probe_n=len(probe_ms),
            errors=self.errors,
            attempts=[asdict(a) for a in self.attempts],
            samples=[(round(t - self.t0, 3), u, {str(k): v for k, v in agents.items()})
                     for t, u, _, _, agents in samples],
        )
