"""The arms: how each runs one job attempt. What people use instead of res, and res itself, on the same
workload, back to back:
    free-for-all   every job at once, each in a scope of its own in the container, no limit
    slots-2/-3     a machine-wide, memory-blind semaphore of 2/3 slots (what `parallel -j`, pueue
                   or a flock semaphore gives), jobs as above
    cgroup-only    every job at once, each `systemd-run --scope -p MemoryMax=<declared>` (declared =
                   true peak × 1.25), no admission
    res            `res run --wait --queue --mem <true peak × 1.25> --for <time alone> --cpus <its
                   CPU share>`: res's own loop and planner, its budget pinned to W (bench/crowd_res.py),
                   reserve and headroom 0, a fresh state directory and slices per arm
    res-flat       the same with `--mem 1G` for everything (and the default --cpus)
    res-gated      agents that never call res: each runs its command line (`pytest …`, `make …`,
                   `playwright test …`: wrappers of the same jobs, named as the tools are) the way a
                   Claude Code session with `res hook` installed does: the hook first, then the command
                   as the hook rewrote it (sizes from the heavy table, then from what history learned),
                   or, refused with the busy line, the same ask again GATE_RETRY_S later
    res-learned    learned sizes (issue 25): a warm-up round, not measured, runs the whole workload once
                   with `res run --wait --queue --mem auto --cpus auto --for auto` from an empty history
                   (the policy's auto_* sizes; a job killed at its limit is started again once by res,
                   bigger), then the measured round runs it again the same way against the same state
                   directory: sizes from what the warm-up's runs of the same command in the same project
                   used. History is kept per project: a test suite's own, an agent's own for its builds
                   and e2e runs (as res-gated's). Kills res answered by starting a job again count as
                   OOM-killed attempts too (the agent saw one run); the warm-up's are reported apart
    res-overflow   the res arm with `overflow = "cluster"` (issue 28): the same requests, loop and budget
                   W, plus a private Slurm cluster booted for the arm (tests/slurmnodes.py: three slurmd,
                   each in a network namespace of its own, RealMemory --cluster-gb, default 2, 2 and
                   4 GB; their memory is their own, outside the container, and their CPUs are this
                   machine's cores). What does not fit in W now, or would wait behind the queue's head,
                   is submitted there by res and runs there. Reported beside the row: how many attempts
                   went there, the idle cluster's own start latency (sbatch → the job's process runs),
                   res's submit → the job's process runs, and the line against the res arm. Needs root,
                   Slurm's packages and W + the nodes' memory + 2 GB free on this machine
    res-cli        res-gated's res, its agents real agent CLI sessions (cli_arm.py: asked for by name)

An arm is handed its run (armrun.ArmRun: the container, the logs, the lock) as `ctx` and never imports
that module. Imports machine and workload."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import terminate

from .machine import (PY, RES_SHIM, JOB, STARTED, cluster_sizes, sbatch_latency, scope_argv, slurmnodes,
                      stop_cluster)
from .workload import MARGIN, Job

ARMS = ["free-for-all", "slots-2", "slots-3", "cgroup-only", "res", "res-flat", "res-gated", "res-learned",
        "res-overflow", "res-cli"]
# res-overflow boots a Slurm cluster (root, Slurm's packages), res-cli runs the real agent CLIs
# (tests/agentcli/install.sh): only when asked for by name
DEFAULT_ARMS = [a for a in ARMS if a not in ("res-overflow", "res-cli")]
GATE_RETRY_S = 5.0  # a refused agent does other work and asks again this much later


class Arm:
    """How one job attempt is run under this arm. `run` blocks until it is over; returns its rc."""

    def __init__(self, name: str, ctx: "ArmRun"):
        self.name, self.ctx = name, ctx

    def setup(self) -> None: ...

    def teardown(self) -> None: ...

    def extra_figures(self) -> dict:
        """The arm's own figures, added to its row."""
        return {}

    def agent_done(self, agent: int) -> None:
        """The agent has run its last job (or stopped): its session may end."""

    def launch(self, argv: list[str], log: Path, env: dict | None = None, cwd: str | None = None) -> int:
        with open(log, "ab") as f:
            p = STARTED.popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
            self.ctx.procs.add(p)  # this run's own, to stop by pid if its deadline passes
            try:
                return p.wait()
            finally:
                self.ctx.procs.discard(p)
                STARTED.done(p)

    def scope(self, job: Job, attempt: int, props: list[str]) -> list[str]:
        unit = f"{self.ctx.tag}-a{job.agent}j{job.idx}t{attempt}.scope"
        return scope_argv(self.ctx.container, unit, props)

    def run(self, job: Job, attempt: int, argv: list[str], log: Path) -> int:
        return self.launch(self.scope(job, attempt, []) + argv, log)


class Slots(Arm):
    def __init__(self, name: str, ctx: "ArmRun", n: int):
        super().__init__(name, ctx)
        self.sem = threading.Semaphore(n)

    def run(self, job, attempt, argv, log):
        with self.sem:
            return super().run(job, attempt, argv, log)


class CgroupOnly(Arm):
    def run(self, job, attempt, argv, log):
        mb = int(job.peak_gb * MARGIN * 1024)
        return self.launch(self.scope(job, attempt, [f"MemoryMax={mb}M", "MemorySwapMax=0"]) + argv, log)


class Res(Arm):
    """res with its own state directory, policy, slices (under the container) and loop."""

    def __init__(self, name: str, ctx: "ArmRun", flat: bool):
        super().__init__(name, ctx)
        self.flat = flat
        self.serve: subprocess.Popen | None = None

    def state_dir(self) -> Path:
        return self.dir / "state"

    def more_env(self) -> dict:
        return {}

    def setup(self):
        c = self.ctx
        self.dir = Path(tempfile.mkdtemp(prefix=f"res-crowd-{c.tag}-"))
        STARTED.dirs.append(self.dir)
        agents = f"{c.container[:-len('.slice')]}-res.slice"
        jobs = f"{agents[:-len('.slice')]}-jobs.slice"
        STARTED.unit_files += [agents, jobs]
        self.env = dict(os.environ)
        self.env.update({
            "RES_STATE_DIR": str(self.state_dir()),
            "RES_POLICY_FILE": str(self.dir / "policy.toml"),  # absent: the shipped defaults, less what follows
            "RES_AGENTS_SLICE": agents,
            "RES_JOBS_SLICE": jobs,
            "RES_UNIT_PREFIX": c.tag,
            "RES_USER_RESERVE_GB": "0",  # the owner's share is outside the container
            "RES_USER_RESERVE_CPUS": "0",
            "RES_SMALL_HEADROOM_GB": "0",  # budget = W exactly
            "RES_LOOP_AUTOSTART": "false",  # the loop is started here, by pid
            "RES_ADOPT_SESSIONS": "false",  # never move anyone's agent session into the crowd
            "RES_CLEAN_EVERY_MINUTES": "0",  # never clean anyone's /tmp or units
            "CROWD_RES_MEM_GB": str(c.mem_gb),
            "CROWD_RES_CGROUP": str(c.cg),
        })
        self.env.update(self.more_env())
        self.env.update(c.res_env)
        self.serve = STARTED.popen([PY, RES_SHIM, "serve"], env=self.env, cwd=str(self.dir),
                                   stdout=open(self.dir / "serve.log", "wb"), stderr=subprocess.STDOUT)
        sock = self.state_dir() / "serve.sock"
        deadline = time.monotonic() + 30
        while not sock.exists():
            if self.serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"res serve did not come up: {(self.dir / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(0.3)

    def run(self, job, attempt, argv, log):
        if self.flat:
            size = ["--mem", "1G"]
        else:
            size = ["--mem", f"{int(job.peak_gb * MARGIN * 1024)}M", "--cpus", f"{job.cpus:g}"]
        cmd = [PY, RES_SHIM, "run", "--wait", "--queue", *size, "--for", f"{max(1, round(job.time_s))}s",
               "--title", f"a{job.agent} {job.label}", "--"] + argv
        return self.launch(cmd, log, env=self.env)

    def teardown(self):
        p, self.serve = self.serve, None
        if p is not None and p.poll() is None:
            terminate(p)  # ours, by pid
            STARTED.done(p)
        # res's own stops (the pressure ladder, DESIGN §5.1): an agent never sees them (its `res run
        # --wait` returns once), only res's records do
        if self.ctx.records is None:
            self.ctx.records = res_records(self.state_dir())
        # what the loop decided, for the report: each job's wait as res recorded it
        try:
            shutil.copy(self.dir / "serve.log", self.ctx.logdir / "serve.log")
            # res's own account (state.db, the change log): what was booked, granted, released, when
            shutil.copytree(self.state_dir(), self.ctx.logdir / "state", ignore=shutil.ignore_patterns("*.sock"))
        except OSError:
            pass


# The crowd's jobs under the names agents type: what the gate sees (policies/heavy.toml).
WRAPPERS = {"pytest": 'exec "$CROWD_TEST_PY" "$CROWD_JOB" test "$@"',  # pytest STAMP DIR ARGS…
            "make": 'exec "$CROWD_PY" "$CROWD_JOB" build "$@"',  # make STAMP MB CPU_S
            "playwright": 'shift; exec "$CROWD_PY" "$CROWD_JOB" e2e "$@"'}  # playwright test STAMP MB HOLD DUTY


class Gated(Res):
    """Agents that never call res: a Claude Code session's PreToolUse hook (`res hook`) before each
    command line, then the line as it said (rewritten to `res run --wait …`, or as it was), or asked
    again later when refused. The same res (state, slices, loop) as the res arm."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)
        self.denied = 0

    def extra_figures(self) -> dict:
        return {"gate_refusals": self.denied}  # asks the hook refused (the agent asked again later)

    def setup(self):
        super().setup()
        bin_dir = self.dir / "bin"
        bin_dir.mkdir()
        for name, body in WRAPPERS.items():
            (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
            (bin_dir / name).chmod(0o755)
        claude = self.dir / "claude"  # no settings of the user's: the session's rules are its own
        claude.mkdir()
        self.env.update({"PATH": f"{bin_dir}:{self.env['PATH']}", "CROWD_JOB": JOB, "CROWD_PY": PY,
                         "CLAUDE_CONFIG_DIR": str(claude)})

    def run(self, job, attempt, argv, log):
        kind, stamp, rest = argv[2], argv[3], argv[4:]
        env = dict(self.env)
        if kind == "test":
            env["CROWD_TEST_PY"] = argv[0]
            cwd, line = rest[0], shlex.join(["pytest", stamp, rest[0], *rest[1:]])
        else:
            cwd = str(self.dir / f"a{job.agent}")  # each agent's own project
            os.makedirs(cwd, exist_ok=True)
            line = shlex.join(["make" if kind == "build" else "playwright", *([] if kind == "build" else ["test"]),
                               stamp, *rest])
        event = json.dumps({"session_id": f"crowd-a{job.agent}", "transcript_path": "/dev/null", "cwd": cwd,
                            "permission_mode": "bypassPermissions", "hook_event_name": "PreToolUse",
                            "tool_name": "Bash", "tool_input": {"command": line, "description": job.label}})
        while not STARTED.stopping.is_set():
            out = subprocess.run([PY, RES_SHIM, "hook", "--agent", "claude"], input=event, capture_output=True,
                                 text=True, env=env, cwd=cwd, timeout=60).stdout
            spec = json.loads(out)["hookSpecificOutput"] if out.strip() else {}
            if spec.get("permissionDecision") == "deny":
                with open(log, "a") as f:
                    f.write(spec.get("permissionDecisionReason", "") + "\n")
                with self.ctx.lock:
                    self.denied += 1
                time.sleep(GATE_RETRY_S)
                continue
            command = spec.get("updatedInput", {}).get("command", line)
            rc = self.launch(["bash", "-c", command], log, env=env, cwd=cwd)
            if rc == 3 and command != line and log.read_text(errors="replace").rstrip().rsplit("\n", 1)[-1].startswith("busy: "):
                with self.ctx.lock:  # queued, and withdrawn by --start-within: refused after all
                    self.denied += 1
                time.sleep(GATE_RETRY_S)
                continue
            return rc
        return -15


def project_of(job: Job) -> str:
    """The project a job's history is kept in, the same as res-gated's (where its agent runs it): a test
    suite's own (its directory's name), else its agent's own (builds and e2e runs of one project)."""
    return Path(job.argv[3]).name if job.kind == "test" else f"a{job.agent}"


def learned_keys(plan: list[list[Job]]) -> dict[str, set[str]]:
    """Kind -> the command fingerprints history files the jobs under (core/gate.line_fingerprint, as
    the loop learns them). Raises when two kinds would share one in a project: the arm would then learn
    one size for different work, which a real project's distinct commands never are."""
    from reconciler.core.gate import line_fingerprint

    keys: dict[str, set[str]] = {}
    owner: dict[tuple[str, str], str] = {}
    for j in (j for a in plan for j in a):
        fp = line_fingerprint(j.argv[:3] + [os.path.join(tempfile.gettempdir(), "stamp")] + j.argv[3:]) or ""
        if not fp or owner.setdefault((project_of(j), fp), j.kind) != j.kind:
            raise RuntimeError(f"res-learned: {j.label} would be learned as {fp!r}, like other work in its "
                               f"project: history could not tell the jobs apart")
        keys.setdefault(j.kind, set()).add(fp)
    return keys


def res_records(state: Path) -> list | None:
    """Every record in a res state directory's state.db (the live ones, then the pruned history; each
    id once), or None when it cannot be read."""
    try:
        from reconciler.config.paths import Paths
        from reconciler.recorded.store import Store

        with Store.open(Paths(state), readonly=True) as store:
            live = list(store.records().values())
            ids = {r.request.id for r in live}
            return live + [r for r in store.history() if r.request.id not in ids]
    except Exception:  # noqa: BLE001 - the figures then come from the logs
        return None


class Learned(Res):
    """`res run --wait --queue --mem auto --cpus auto --for auto` for every job, its project named as
    res-gated's agents' are (project_of). Both rounds of the arm share one state directory (ctx.state):
    each round gets its own container, slices and loop, and the loop of the measured round starts from
    the warm-up's finished runs."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)

    def state_dir(self) -> Path:
        return self.ctx.state

    def more_env(self) -> dict:
        # the policy's first guess, scaled with the machine (the smoke's 1 GB, --mem-gb): else shipped
        return {} if self.ctx.auto_mem_gb is None else {"RES_AUTO_MEM_GB": f"{self.ctx.auto_mem_gb:.3f}"}

    def setup(self):
        sock = self.state_dir() / "serve.sock"
        if sock.exists() or sock.is_symlink():
            sock.unlink()  # the warm-up's loop, stopped (by pid): not to be mistaken for this one's
        since = time.time()
        super().setup()
        # this loop's first pass publishes what history learned (gate.json, read by `res run --mem
        # auto`): the first ask must not find the last round's file, or none
        gate = self.state_dir() / "gate.json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if gate.stat().st_mtime >= since:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            self.ctx.errors.append(f"{gate} was not written within 30 s of the loop's start")

    def run(self, job, attempt, argv, log):
        cmd = [PY, RES_SHIM, "run", "--wait", "--queue", "--mem", "auto", "--cpus", "auto", "--for", "auto",
               "--project", project_of(job), "--title", f"a{job.agent} {job.label}", "--"] + argv
        return self.launch(cmd, log, env=self.env)

    def teardown(self):
        # every run settled in state.db before its loop stops: what the next round learns from (not
        # when the run was stopped at its deadline: what it waited on is stopped with the loop)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.ctx.halted.is_set():
            recs = res_records(self.state_dir())
            if recs is None or all(getattr(r.phase, "value", r.phase) in ("done", "refused", "cancelled") for r in recs):
                break
            time.sleep(0.2)
        super().teardown()


class Overflow(Res):
    """res with `overflow = "cluster"`: the res arm's requests, loop and budget (W), plus a private
    Slurm cluster of three nodes (tests/slurmnodes.py, their RealMemory `cluster_gb`) booted for the
    arm and stopped after it. A request that does not fit in W now, or would wait behind the queue's
    head, is submitted there (`sbatch`, into Slurm's queue, `--queue`) and runs there; the nodes'
    memory is their own (outside the container). Their CPUs are this machine's two cores."""

    def __init__(self, name: str, ctx: "ArmRun"):
        super().__init__(name, ctx, flat=False)
        self.base: Path | None = None
        self.slurm_env: dict = {}

    def more_env(self) -> dict:
        return {"RES_OVERFLOW": "cluster", **self.slurm_env}

    def setup(self):
        c = self.ctx
        self.base = Path(tempfile.mkdtemp(prefix=f"res-crowd-slurm-{c.tag}-"))
        STARTED.clusters.append(self.base)
        self.slurm_env = slurmnodes().start(self.base, cluster_sizes(c.cluster_gb))
        c.sbatch_s = sbatch_latency(self.slurm_env, c.sbatch_rounds, c.logdir)
        super().setup()

    def teardown(self):
        super().teardown()
        self.ctx.records = res_records(self.state_dir())  # where each ran: read before the state goes
        if self.base is not None:
            shutil.copytree(self.base / "log", self.ctx.logdir / "slurm-log", dirs_exist_ok=True)
            stop_cluster(self.base)
            STARTED.clusters.remove(self.base)
            self.base = None
