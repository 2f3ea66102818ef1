"""One arm's run: a fresh container, the arm set up, one thread per agent running its jobs one after
another (an OOM-killed attempt, rc 137, retried up to twice, then the job failed), the sampler and
the owner's probe beside them, then the row of figures (measures.Timeline). res-learned runs twice
against one state directory (run_arm). Imports machine, workload, arms and measures; the res-cli
arm's module (cli_arm) only when that arm is asked for."""
from __future__ import annotations

import secrets
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from .arms import ARMS, Arm, CgroupOnly, Gated, Learned, Overflow, Res, Slots, project_of, res_records
from .machine import STARTED, Probe, container_peak, make_container
from .measures import Attempt, Sampler, Timeline
from .workload import Job

# What res writes into a job's log when it starts an auto-sized job again after a kill at its memory
# limit (render/lines.retry_text: "… killed at its memory limit (…); res sized it, so it starts again
# once, at 3 GB"): how res-learned counts those kills when state.db cannot be read.
RETRY_MARK = "so it starts again once"


def make_arm(name: str, ctx: "ArmRun") -> Arm:
    if name == "free-for-all":
        return Arm(name, ctx)
    if name.startswith("slots-"):
        return Slots(name, ctx, int(name.split("-")[1]))
    if name == "cgroup-only":
        return CgroupOnly(name, ctx)
    if name in ("res", "res-flat"):
        return Res(name, ctx, flat=name == "res-flat")
    if name == "res-gated":
        return Gated(name, ctx)
    if name == "res-learned":
        return Learned(name, ctx)
    if name == "res-overflow":
        return Overflow(name, ctx)
    if name == "res-cli":
        from .cli_arm import CliGated  # the real CLIs' harness (tests/agentcli): only for this arm

        return CliGated(name, ctx)
    raise SystemExit(f"crowd: unknown arm {name!r} (known: {', '.join(ARMS)})")


def container_weight(arm: str) -> int | None:
    """The container's CPUWeight: res's agents slice weight for the res arms (the share res gives
    agents against the owner's session, whose place the probe takes), systemd's default for the
    others, which run their jobs as people do, at the owner's own weight."""
    if not arm.startswith("res"):
        return None
    from reconciler.core.game import NORMAL_WEIGHT  # (game mode off)

    return NORMAL_WEIGHT


class ArmRun(Timeline):
    def __init__(self, arm_name: str, plan: list[list[Job]], mem_gb: float, workdir: Path, *, round_: str = "",
                 state: Path | None = None, auto_mem_gb: float | None = None, deadline_s: float | None = None,
                 cluster_gb: tuple = (), sbatch_rounds: int = 0, res_env: dict | None = None):
        """`round_`: res-learned's "warm-up" or "measured" (its logs apart); `state`: the res state
        directory both rounds share; `auto_mem_gb`: the policy's first guess for them (None: shipped);
        `deadline_s`: past this since the first ask, the run is stopped and said broken (a job that
        could never start must not hang the bench); `cluster_gb`, `sbatch_rounds`: res-overflow's
        nodes' memory, and how many jobs measure the idle cluster's start latency; `res_env`: RES_*
        policy values of the res arms' own (a sweep's margin and cpu_overcommit, bench/crowd_sweep.py)."""
        self.name = arm_name
        self.plan = plan
        self.mem_gb = mem_gb
        self.round, self.state, self.auto_mem_gb, self.deadline_s = round_, state, auto_mem_gb, deadline_s
        self.tag = f"cw{secrets.token_hex(3)}"
        self.container = f"{self.tag}.slice"
        self.logdir = workdir / arm_name / round_ if round_ else workdir / arm_name
        self.logdir.mkdir(parents=True)
        self.attempts: list[Attempt] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.live: dict[int, Path] = {}  # agent -> the stamp file of its attempt now asked or running
        self.procs: set[subprocess.Popen] = set()  # what this run's jobs are waited on by (Arm.launch)
        self.halted = threading.Event()
        # res-learned: (agent, job, attempt) -> (stamp file, its raw stamps, log), to tell a run res
        # started again apart; (agent, job, attempt, restart) -> (GB, CPUs, --for s) res chose
        self.raw: dict[tuple, tuple] = {}
        self.booked: dict[tuple, tuple[float, float, float]] = {}
        self.sizes: list[dict] = []
        # res-overflow: its cluster, the idle cluster's sbatch → process start (s), and res's records
        self.cluster_gb, self.sbatch_rounds = cluster_gb, sbatch_rounds
        self.sbatch_s: list[float] = []
        self.records: list | None = None
        self.res_env = dict(res_env or {})

    def agent(self, jobs: list[Job], arm: Arm, t0: float) -> None:
        try:
            self._agent(jobs, arm, t0)
        finally:
            if jobs:
                arm.agent_done(jobs[0].agent)

    def _agent(self, jobs: list[Job], arm: Arm, t0: float) -> None:
        for job in jobs:
            for attempt in range(3):
                if STARTED.stopping.is_set() or self.halted.is_set():
                    return
                stampf = self.logdir / f"a{job.agent}j{job.idx}t{attempt}.start"
                argv = job.argv[:2] + [job.argv[2], str(stampf)] + job.argv[3:]
                asked = time.monotonic()
                self.live[job.agent] = stampf
                try:
                    rc = arm.run(job, attempt, argv, self.logdir / f"a{job.agent}j{job.idx}t{attempt}.log")
                except KeyboardInterrupt:
                    return
                finally:
                    self.live.pop(job.agent, None)
                ended = time.monotonic()
                try:
                    stamps = [float(x) for x in stampf.read_text().split()]
                except (OSError, ValueError):
                    stamps = []
                started = stamps[0] if stamps else None
                # every run appends its start, and its end unless it was killed; a run res started again
                # (after a stop of its own, or a kill) follows a killed one: the last stamp is the end
                finished = stamps[-1] if len(stamps) > 1 and rc not in (-9, 137) else None
                self.raw[(job.agent, job.idx, attempt)] = (str(stampf), stamps, self.logdir / f"a{job.agent}j{job.idx}t{attempt}.log")
                with self.lock:
                    self.attempts.append(Attempt(job.agent, job.idx, job.kind, attempt, asked - t0,
                                                 None if started is None else started - t0,
                                                 None if finished is None else finished - t0, ended - t0, rc))
                    if rc not in (0, -9, 137):
                        self.errors.append(f"a{job.agent} job {job.idx} ({job.label}) attempt {attempt}: rc {rc}; "
                                           f"log {self.logdir}/a{job.agent}j{job.idx}t{attempt}.log")
                if rc not in (-9, 137):
                    break  # done (or failed for another reason than memory: not retried)

    def go(self) -> dict:
        STARTED.tags.append(self.tag)
        self.cg = make_container(self.container, self.mem_gb, container_weight(self.name))
        arm = make_arm(self.name, self)
        arm.setup()
        learned = isinstance(arm, Learned)
        sampler = Sampler(self.cg, self.live, follow=learned)
        psi0 = Sampler.psi_full()
        probe = Probe(self.logdir / "probe.txt")
        sampler.start()
        time.sleep(0.5)
        t0 = self.t0 = time.monotonic()
        self.wall0 = time.time() - t0  # a wall-clock time (res's records) minus this: seconds since t0
        threads = [threading.Thread(target=self.agent, args=(jobs, arm, t0), daemon=True) for jobs in self.plan]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
                if self.deadline_s is not None and time.monotonic() - t0 > self.deadline_s and not self.halted.is_set():
                    self.halt()
        makespan = time.monotonic() - t0
        probe_ms = probe.stop()
        sampler.halt.set()
        sampler.join(5)
        psi1 = Sampler.psi_full()
        peak = container_peak(self.cg)
        arm.teardown()
        STARTED.stop_units(self.tag)
        if learned:
            self.split_restarts(sampler.deaths)
        row = self.figures(makespan, probe_ms, sampler.samples, psi0, psi1, peak)
        row.update(arm.extra_figures())
        if learned:
            row["res_restarts"] = sum(a.restart for a in self.attempts)  # kills res answered itself
            row["sizes"] = self.sizes
        if isinstance(arm, Overflow):
            row["cluster"] = self.cluster_figures()
        return row

    def halt(self) -> None:
        """Past the deadline: no agent asks again, and what they wait on is stopped (ours, by pid)."""
        self.halted.set()
        with self.lock:
            self.errors.append(f"still running {self.deadline_s:.0f} s after the first ask (a job that could "
                               f"never start?): stopped; logs in {self.logdir}")
        procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()

    def split_restarts(self, deaths: dict) -> None:
        """res-learned: each agent's attempt that res started again after a kill at its limit becomes
        the two runs it was: the killed one (rc 137, ended when its process was first seen gone, else
        when the next run started) and the run res started again (asked then; the agent told at its
        end). Whether res did: the job's record in state.db (`grown_from_gb`), else res's line in the
        log (RETRY_MARK). The sizes res chose go to `booked` (what admission knew) and `sizes`."""
        recs = res_records(self.state) if self.state is not None else None
        deaths = {str(k): v for k, v in deaths.items()}  # the sampler's keys are the stamp files' Paths
        by_stamp: dict[str, object] = {}
        wanted = {raw[0] for raw in self.raw.values()}
        for rec in recs or []:
            for w in rec.request.cmd or []:
                if w in wanted:
                    by_stamp[w] = rec
        jobs = {(j.agent, j.idx): j for a in self.plan for j in a}
        out = []
        for a in self.attempts:
            stampf, stamps, logf = self.raw.get((a.agent, a.job, a.attempt), (None, [], None))
            rec = by_stamp.get(stampf)
            req = getattr(rec, "request", None)
            if req is not None:
                again = req.grown_from_gb is not None
            else:
                try:
                    again = RETRY_MARK in Path(logf).read_text(errors="replace")
                except (OSError, TypeError):
                    again = False
            j = jobs[(a.agent, a.job)]
            if req is not None:
                cpus = req.cpus if req.cpus is not None else 0.5
                self.booked[(a.agent, a.job, a.attempt, 0)] = (req.grown_from_gb if again else req.mem_gb, cpus, req.est_s)
                if again:
                    self.booked[(a.agent, a.job, a.attempt, 1)] = (req.mem_gb, cpus, req.est_s)
            self.sizes.append(dict(
                agent=a.agent, job=a.job, attempt=a.attempt, kind=a.kind, project=project_of(j),
                true_peak_gb=j.peak_gb, time_s=j.time_s, true_cpus=j.cpus, started_again=again,
                mem_gb=getattr(req, "mem_gb", None), cpus=getattr(req, "cpus", None), est_s=getattr(req, "est_s", None),
                grown_from_gb=getattr(req, "grown_from_gb", None), sized_from=getattr(req, "sized_from", None)))
            if not again:
                out.append(a)
                continue
            rel = [x - self.t0 for x in stamps]
            first, second = (rel[0] if rel else None), (rel[1] if len(rel) > 1 else None)
            gone = [d - self.t0 for d in deaths.get(stampf, []) if first is None or d - self.t0 >= first]
            kill = min(x for x in (gone[0] if gone else None, second, a.ended) if x is not None)
            kill = max(kill, first if first is not None else a.asked)
            out.append(replace(a, started=first, finished=None, ended=kill, rc=137))
            out.append(replace(a, asked=kill, started=second, finished=rel[2] if len(rel) > 2 else None, restart=1))
        self.attempts = out


def run_arm(name: str, plan: list[list[Job]], mem_gb: float, workdir: Path, size: dict, lb: dict, log) -> dict:
    """One arm's row. res-learned is two rounds against one state directory: the warm-up (its figures
    kept under `warmup`), then the measured one (the row)."""
    # an arm whose jobs may never start (a cluster that does not take them, a CLI session that ended,
    # a first guess that never fits) must not hang the bench
    deadline_s = max(300.0, 10 * lb["declared"])
    if name == "res-overflow":
        return ArmRun(name, plan, mem_gb, workdir, deadline_s=deadline_s,
                      cluster_gb=size["cluster_gb"], sbatch_rounds=size["sbatch_rounds"]).go()
    if name == "res-cli":
        return ArmRun(name, plan, mem_gb, workdir, deadline_s=deadline_s).go()
    if name != "res-learned":
        return ArmRun(name, plan, mem_gb, workdir).go()
    state = Path(tempfile.mkdtemp(prefix="res-crowd-learned-"))
    STARTED.dirs.append(state)
    kw = dict(state=state, auto_mem_gb=size.get("auto_mem_gb"), deadline_s=deadline_s)
    t = time.monotonic()
    warm = ArmRun(name, plan, mem_gb, workdir, round_="warm-up", **kw).go()
    log(f"   {name}, warm-up round (not measured): {warm['makespan_s']:.1f} s, {warm['oom_killed']} OOM-killed "
        f"({warm['res_restarts']} of them answered by res starting the job again), {warm['failed']} failed "
        f"(took {time.monotonic() - t:.1f} s)")
    row = ArmRun(name, plan, mem_gb, workdir, round_="measured", **kw).go()
    row["warmup"] = {k: warm[k] for k in ("makespan_s", "oom_killed", "res_restarts", "failed", "wait_p50_s",
                                          "wait_p95_s", "peak_gb", "attempts", "sizes")}
    row["errors"] = [f"warm-up: {e}" for e in warm["errors"]] + row["errors"]
    return row
