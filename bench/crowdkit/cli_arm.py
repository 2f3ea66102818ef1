"""The `res-cli` arm of bench/crowd.py (issue 37 item 4): the crowd's agents as real agent CLI sessions.

    python3 bench/crowd.py --mix memory --agents 6 --arms res-gated,res-cli

Each agent is one long-lived headless session of a real CLI (Claude Code, Codex, Gemini CLI in turn:
agent a runs CLIS[a % 3]; the pinned versions of tests/agentcli/install.sh), in the permission mode
most people run them in: the default one, with allow rules for the crowd's test and build commands
(`pytest`, `make`, `playwright test`), and `res hook install --agent X --user` in its own home:

    Claude Code  -p, default mode, --allowedTools "Bash(pytest:*)" "Bash(make:*)" "Bash(playwright test:*)":
                 the gate rewrites the line to `res run --wait …` with the CLI's own allow (a res job)
    Codex        exec (its read-only sandbox), prefix_rule(… decision = "allow") for each in
                 $CODEX_HOME/rules/default.rules: the line runs as the CLI's child, booked in place
    Gemini CLI   -p, default mode, tools.allowed run_shell_command(pytest|make|playwright test):
                 booked in place

Its model is a loopback server of tests/agentcli (anthropic_api, openai_api, gemini_api) driven by the
agent's thread of bench/crowd.py: each of the agent's jobs becomes the model's next tool call, typed
as the tool it is (the same wrappers as res-gated: `pytest STAMP DIR ARGS`, `make STAMP MB CPU_S`,
`playwright test STAMP MB HOLD DUTY`), and the CLI's next request brings its result back: the exit
code and output as the model got them. A result refused with res's busy line (a deny, or a rewritten
job withdrawn by --start-within) is asked again GATE_RETRY_S later, as res-gated does, with other work
(a light `git status --short`, allowed too) in between; an OOM kill
(137) is retried by the agent like every arm's. A careful model's way with long commands: Claude
Code's Bash `timeout` at its 10-minute maximum; Codex's exec cell told not to yield and the command's
session polled with write_stdin to its end.

The sessions start (and reach their first model call) before the arm's clock starts; they end after
it. Their own memory (~200 MB each) is beside the simulated workstation, as res-gated's agents are;
their jobs are inside it: a res job in res's slices under the container, a command booked in place
moved into a scope of the container by its wrapper (first thing, when it is not there yet), so that W
bounds both and the kernel's OOM killer would be the container's.

Per arm, beyond crowd.py's row (`cli`): per CLI the jobs, how they ran (a res job: `r-N started`
in the output; else in place), refusals asked again, approval errors (any other refusal the model got:
must be 0), results whose output or exit code differ from the same job run directly (each test suite
once before the arm, outside the container; builds and e2e runs print nothing and exit 0): must be 0.
"""
from __future__ import annotations

import json
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from .arms import GATE_RETRY_S, WRAPPERS, Gated
from .machine import JOB, PY, REPO, STARTED, scope_argv

sys.path.insert(0, str(REPO / "tests" / "agentcli"))
sys.path.insert(0, str(REPO / "tests"))
from anthropic_api import AnthropicAPI, Turn as ClaudeTurn  # noqa: E402
from gate_harness import AGENTS, ToolResult, meaningful, res_lines  # noqa: E402
from gemini_api import GeminiAPI, Turn as GeminiTurn  # noqa: E402
from openai_api import OpenAIServer, Reply  # noqa: E402

CLIS = ("claude", "codex", "gemini")
PROMPT = "Please run this project's checks."  # nothing about res
TOOLS = ("pytest", "make", "playwright test")  # the allow rules: what the crowd's jobs are typed as
# What the agent does while refused work waits (the busy line says "… or work on something else"): a
# light command its rules allow too. Asking for the same calls over and over is what a model must not
# do: Gemini CLI ends a session whose last calls repeat a cycle of up to 5 calls 5 times ("Loop
# detected, stopping execution").
OTHER_WORK = "git status --short"
ALLOWED = (*TOOLS, "git status")
CLAUDE_TIMEOUT_MS = 600000  # the Bash tool's longest timeout
READY_S = 180  # a session's start-up to its first model call (six CLIs starting on two cores)
END_S = 60  # a session's last model call to its exit
BUSY = re.compile(r"res: not run: |^busy: ", re.M)  # the gate's deny; a rewritten job withdrawn unstarted
APPROVAL = re.compile(r"requires approval|approval required|Tool execution blocked")  # the CLIs' own refusals


class Driver:
    """What one session's model does next. The agent's thread hands it a command line (`ask`), the CLI's
    next main-loop request brings that command's result back (`answer`, from the API's handler thread,
    which then waits for the next command: None ends the session with a text turn)."""

    def __init__(self) -> None:
        self._commands: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self.seen = 0  # tool results the CLI has sent so far
        self._asked: str | None = None  # the tool call answered and its result not back yet
        self._ended = False  # the session's last turn was answered
        self.finished = False  # the agent said it is done (its last turn is queued)
        self.ready = threading.Event()  # the CLI made its first model call

    def answer(self, count: int, last: ToolResult | None) -> str | None:
        if count > self.seen:
            self.seen, self._asked = count, None
            self._results.put(last)
        elif self._asked is not None:
            return self._asked  # the same request again (a client's retry): the same call
        elif self._ended:
            return None  # the last turn, asked for again
        self.ready.set()
        cmd = self._asked = self._commands.get()
        self._ended = cmd is None
        return cmd

    def ask(self, line: str | None) -> None:
        if line is None:
            self.finished = True
        self._commands.put(line)

    def finish(self) -> None:
        if not self.finished:
            self.ask(None)

    def result(self, stop=lambda: False, alive=lambda: True) -> ToolResult | None:
        """The next result; None once `stop()` (the run stopping or past its deadline), ENDED when the
        session's CLI has exited."""
        while not stop():
            try:
                return self._results.get(timeout=0.5)
            except queue.Empty:
                if not alive() and self._results.empty():
                    return ENDED
        return None


ENDED = ToolResult("(the CLI session ended)", None, False, None)


def _unread(raw) -> ToolResult:
    return ToolResult(json.dumps(raw)[:4000], None, False, raw)


class DrivenClaude(AnthropicAPI):
    def __init__(self, driver: Driver):
        super().__init__()
        self.driver = driver

    def _next(self, body, path, stream):
        if body.get("tools"):  # a main-loop call (background calls carry no tools)
            results = AGENTS["claude"].tool_results(self)  # (this request is logged already)
            cmd = self.driver.answer(len(results), results[-1] if results else None)
            u = AGENTS["claude"].U
            turn = (ClaudeTurn(usage=u, text="Done.") if cmd is None else
                    ClaudeTurn(usage=u, text="Running it.", tool="Bash",
                               tool_input={"command": cmd, "description": "Run a check", "timeout": CLAUDE_TIMEOUT_MS}))
            with self._lock:
                self._script = [turn]
        return super()._next(body, path, stream)


class DrivenCodex(OpenAIServer):
    def __init__(self, driver: Driver):
        super().__init__([])
        self.driver = driver

    def _next(self, body):
        with self._lock:
            self.requests.append(body)
        outputs = [i for i in (body.get("input") or []) if isinstance(i, dict)
                   and i.get("type") in ("custom_tool_call_output", "function_call_output")]
        last = None
        if outputs:
            try:
                last = AGENTS["codex"]._result(outputs[-1])
            except AssertionError:
                last = _unread(outputs[-1])
        cmd = self.driver.answer(len(outputs), last)
        u = AGENTS["codex"].U
        return Reply(text="Done.", usage=u) if cmd is None else Reply(shell=cmd, usage=u, wait=True)


class DrivenGemini(GeminiAPI):
    def __init__(self, driver: Driver):
        super().__init__()
        self.driver = driver

    def _next(self, model, stream, schema=None):
        if schema is None:  # not a helper call (the next-speaker check)
            results = AGENTS["gemini"].tool_results(self)  # (this request is logged already)
            cmd = self.driver.answer(len(results), results[-1] if results else None)
            u = AGENTS["gemini"].U
            turn = (GeminiTurn(usage=u, text="Done.") if cmd is None else
                    GeminiTurn(usage=u, tool="run_shell_command", args={"command": cmd, "description": "Run a check."}))
            with self._lock:
                self._script = [turn]
        return super()._next(model, stream, schema)


class Session:
    """One agent's CLI session: its home, its model, its process group."""

    def __init__(self, cli: str, root: Path, cwd: Path):
        self.cli, self.root, self.cwd = cli, root, cwd
        self.driver = Driver()
        self.agent = AGENTS[cli]
        self.api = {"claude": DrivenClaude, "codex": DrivenCodex, "gemini": DrivenGemini}[cli](self.driver).start()
        self.proc: subprocess.Popen | None = None
        self.h = self.agent.session(root, [], cwd)
        self.h.api = self.api
        if cli == "codex":
            self.agent.point_at(self.h.home, self.api)

    def start(self, environ: dict, bin_dir: Path, log: Path) -> None:
        """The CLI's own fresh environment plus `environ` (what reaches res and the wrappers), its rules,
        the gate put in as a user does, then the CLI in a process group of its own."""
        env = self.agent.environment(self.h)
        env.update(environ)
        home = Path(env["HOME"])
        if self.cli == "claude":
            argv = [str(self.agent.installed()), "-p", PROMPT, "--output-format", "stream-json", "--verbose",
                    "--allowedTools", *[f"Bash({t}:*)" for t in ALLOWED]]
        elif self.cli == "codex":
            rules = Path(env["CODEX_HOME"]) / "rules"
            rules.mkdir(parents=True, exist_ok=True)
            (rules / "default.rules").write_text("".join(
                f'prefix_rule(pattern = {json.dumps(t.split())}, decision = "allow")\n' for t in ALLOWED))
            # Codex runs commands in a login shell, whose /etc/profile sets PATH anew: the user's own
            # tools are found through their profile, as on their machine
            (home / ".bash_profile").write_text(f'export PATH={shlex.quote(env["PATH"])}\n')
            argv = [str(self.agent.installed()), "exec", "--json", "--skip-git-repo-check", PROMPT]
        else:
            settings = home / ".gemini" / "settings.json"
            data = json.loads(settings.read_text())
            data.setdefault("tools", {})["allowed"] = [f"run_shell_command({t})" for t in ALLOWED]
            settings.write_text(json.dumps(data, indent=2) + "\n")
            argv = [str(self.agent.installed()), "-p", PROMPT, "-m", self.agent.MODEL, "--output-format", "stream-json"]
        r = subprocess.run(["res", "hook", "install", "--agent", self.cli, "--user"], env=env, cwd=str(self.cwd),
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"res hook install --agent {self.cli} --user: {r.returncode} {r.stdout}{r.stderr}")
        out = open(log, "wb")
        self.proc = STARTED.popen(argv, env=env, cwd=str(self.cwd), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def end(self) -> None:
        """The model's last turn (if not said yet), then the CLI's exit (or its group stopped: ours, by its id)."""
        self.driver.finish()
        p = self.proc
        if p is not None:
            try:
                p.wait(END_S)
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 15)
                    p.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, 9)
                    except ProcessLookupError:
                        pass
            STARTED.done(p)
        self.api.stop()


def in_container_wrapper(body: str, container: str, tag: str) -> str:
    """A wrapper that first moves what it runs into the container, when it is not there already (a
    command booked in place runs as its CLI's child, outside it; a res job is in res's slices under it)."""
    scope = shlex.join(scope_argv(container, "UNIT", []))
    scope = scope.replace("--unit=UNIT", f'"--unit={tag}-ip$$.scope"')
    return (f'case "$(cat /proc/self/cgroup)" in *"/{container}/"*) ;;\n'
            f'  *) exec {scope} "$0" "$@" ;;\nesac\n{body}\n')


class CliGated(Gated):
    """res-cli: the res-gated arm's res (state, slices, loop, wrappers), its agents real CLI sessions."""

    def setup(self):
        super().setup()
        c = self.ctx
        bin_dir = self.dir / "bin"
        for name, body in WRAPPERS.items():
            (bin_dir / name).write_text("#!/bin/bash\n" + in_container_wrapper(body, c.container, c.tag))
        tests = [j for a in c.plan for j in a if j.kind == "test"]
        self.test_py = tests[0].argv[0] if tests else PY
        self.direct = self.direct_outputs(tests)
        self.stats = {cli: dict(sessions=0, jobs=0, as_job=0, in_place=0, refusals=0, approval_errors=0,
                                differs=0) for cli in CLIS}
        self.mismatches: list[str] = []
        self.sessions: dict[int, Session] = {}
        keep = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME")
        environ = {k: v for k, v in self.env.items() if k.startswith(("RES_", "CROWD_")) or k in keep}
        res_dir = str(Path(sys.executable).parent)
        environ.update({"PATH": f"{bin_dir}:{res_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        "CROWD_TEST_PY": self.test_py})
        logs = c.logdir / "sessions"
        logs.mkdir(exist_ok=True)
        for a in range(len(c.plan)):
            cli = CLIS[a % len(CLIS)]
            cwd = self.dir / f"a{a}"  # each agent's own project
            cwd.mkdir(exist_ok=True)
            subprocess.run(["git", "init", "-q", str(cwd)], check=True, capture_output=True)
            s = Session(cli, self.dir / f"session-a{a}", cwd)
            self.sessions[a] = s
            self.stats[cli]["sessions"] += 1
            s.start(environ, bin_dir, logs / f"a{a}-{cli}.log")
        deadline = time.monotonic() + READY_S
        for a, s in self.sessions.items():
            if not s.driver.ready.wait(max(0.1, deadline - time.monotonic())):
                raise RuntimeError(f"agent {a}'s {s.cli} session made no model call in {READY_S} s; "
                                   f"log {logs}/a{a}-{s.cli}.log")

    def direct_outputs(self, tests) -> dict[tuple, list[str]]:
        """Each test suite the plan runs, once, directly (outside res and the container): the output
        lines a result must show."""
        out = {}
        for j in tests:
            key = tuple(j.argv[3:])
            if key not in out:
                r = subprocess.run([j.argv[0], JOB, "test", os.devnull, *j.argv[3:]], capture_output=True, text=True,
                                   timeout=600)
                out[key] = (meaningful(r.stdout + r.stderr), r.returncode)
        return out

    def run(self, job, attempt, argv, log):
        s = self.sessions[job.agent]
        st = self.stats[s.cli]
        kind, stamp, rest = argv[2], argv[3], argv[4:]
        if kind == "test":
            line = shlex.join(["pytest", stamp, *rest])
            want = self.direct.get(tuple(rest), ([], 0))
        else:
            line = shlex.join(["make" if kind == "build" else "playwright", *([] if kind == "build" else ["test"]),
                               stamp, *rest])
            want = ([], 0)
        alive = lambda: s.proc is not None and s.proc.poll() is None  # noqa: E731
        stop = lambda: STARTED.stopping.is_set() or self.ctx.halted.is_set()  # noqa: E731
        while not stop():
            s.driver.ask(line)
            r = s.driver.result(stop, alive)
            if r is None:
                return -15
            if r is ENDED:
                with self.ctx.lock:
                    self.ctx.errors.append(f"a{job.agent} {s.cli} {job.label}: the session ended (rc {s.proc.returncode}) "
                                           f"before its result came back; log {self.ctx.logdir}/sessions/")
                return 125
            with open(log, "a") as f:
                f.write(r.text if r.text.endswith("\n") or not r.text else r.text + "\n")
            busy = bool(BUSY.search(r.text)) and (r.denied or r.rc in (3, None))
            with self.ctx.lock:
                if busy:
                    st["refusals"] += 1
                    self.denied += 1
                elif r.rc is None or r.denied or (r.rc != 0 and APPROVAL.search(r.text)):
                    st["approval_errors"] += 1
                    self.mismatches.append(f"a{job.agent} {s.cli} {job.label}: refused: {r.text[:300]!r}")
                    self.ctx.errors.append(self.mismatches[-1])
            if busy:  # other work meanwhile, then the same ask again
                s.driver.ask(OTHER_WORK)
                w = s.driver.result(stop, alive)
                if w in (None, ENDED):
                    continue
                if w.rc != 0:  # its rules allow it: anything but a plain run is the CLI refusing it
                    with self.ctx.lock:
                        st["approval_errors"] += 1
                        self.mismatches.append(f"a{job.agent} {s.cli} {OTHER_WORK}: rc {w.rc}: {w.text[:300]!r}")
                        self.ctx.errors.append(self.mismatches[-1])
                time.sleep(GATE_RETRY_S)
                continue
            if r.rc is None:
                return 126
            ours = res_lines(r.text)
            with self.ctx.lock:
                st["jobs"] += 1
                st["as_job" if any(ln.startswith("r-") and " started" in ln for ln in ours) else "in_place"] += 1
                if r.rc not in (137, -9) and (meaningful(r.text) != want[0] or r.rc != want[1]):
                    st["differs"] += 1
                    self.mismatches.append(f"a{job.agent} {s.cli} {job.label}: rc {r.rc} (direct {want[1]}); "
                                           f"got {meaningful(r.text)[-3:]!r}, direct {want[0][-3:]!r}")
                    self.ctx.errors.append(self.mismatches[-1])
            return r.rc
        return -15

    def agent_done(self, agent: int) -> None:
        """Its model's last turn now: a CLI kept waiting on its model until every agent is done would
        time the request out (Gemini CLI hangs up)."""
        s = self.sessions.get(agent)
        if s is not None:
            s.driver.ask(None)

    def teardown(self):
        for s in self.sessions.values():
            s.end()
        super().teardown()

    def extra_figures(self) -> dict:
        return {**super().extra_figures(), "cli": dict(per_cli=self.stats, mismatches=self.mismatches[:20])}


TARGET = 1.15  # issue 37: the real sessions' makespan within this × res-gated's on the same workload


def notes(r: dict, gated: dict | None) -> list[str]:
    """res-cli's lines under the table: per CLI how its jobs ran, what its model was refused, and the
    makespan against res-gated's."""
    per = r["cli"]["per_cli"]
    out = [f"{r['arm']}: " + "; ".join(
        f"{cli} ×{st['sessions']}: {st['jobs']} jobs ({st['as_job']} as res jobs, {st['in_place']} in place), "
        f"{st['refusals']} busy refusals asked again, {st['approval_errors']} approval errors, "
        f"{st['differs']} results unlike the job run directly" for cli, st in per.items() if st["sessions"])]
    out += [f"   {m}" for m in r["cli"]["mismatches"][:5]]
    if gated is not None and gated.get("makespan_s"):
        ratio = r["makespan_s"] / gated["makespan_s"]
        out.append(f"{r['arm']}: makespan {r['makespan_s']:.1f} s = {ratio:.2f}× res-gated's {gated['makespan_s']:.1f} s "
                   f"(target ≤ {TARGET:g}×: {'met' if ratio <= TARGET else 'missed'})")
    return out
