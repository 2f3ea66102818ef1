"""The three agent CLIs as the gate's acceptance test (test_gate_cli.py) drives them: each one's private
home with `res hook` installed in its own settings, its scripted model on loopback (the servers of
anthropic_api.py, openai_api.py, gemini_api.py, with one addition: the first tool call of a round can
be held until every session of the round has asked for it, so their commands meet), the CLI run in a
process group of its own, and the tool results the CLI handed its model, read back from the requests
it sent to the loopback API.

    agent = AGENTS["codex"]
    sess = agent.session(base / "s1", commands=["pytest -q"], cwd=work, barrier=barrier)
    with sess:                                     # its API server up
        sess.run(res_environ)                      # the CLI, to its end (or a timeout: its group killed)
        sess.tool_results()                        # [ToolResult(text, rc, denied, raw)], in call order

What each CLI hands its model (found by running the pinned versions; docs/agent-hooks.md):

    Claude Code 2.1.328  tool_result content: the command's output (stdout and stderr as written), first
                         line `Exit code N` when N != 0 (is_error); a hook's deny: `PreToolUse:Bash hook
                         error: <reason>`
    Codex 0.171.0        (its default model, code mode: the JS `exec` tool calls tools.exec_command)
                         custom_tool_call_output: `Script completed…Output:` and the JSON of the call's
                         result ({"exit_code", "output", …}); a deny: `Script error:\\nCommand blocked by
                         PreToolUse hook: <reason>. Command: <the command>`
    Gemini CLI 0.61.0    functionResponse.response.output: `Output: <output>` (`(empty)` for none), `Exit Code: N` when N != 0,
                         `Process Group PGID: …`, inside <untrusted_context>, then `[System] Tool input
                         parameters were modified by a hook before execution.` after a rewrite; a deny:
                         response.error `Tool execution blocked: <reason>`
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from clihelp import file_tree  # noqa: E402,F401  (the tests take it from here)
from anthropic_api import AnthropicAPI, Turn as ClaudeTurn, Usage as ClaudeUsage  # noqa: E402
from gemini_api import GeminiAPI, Turn as GeminiTurn, Usage as GeminiUsage  # noqa: E402
from openai_api import OpenAIServer, Reply, Usage as OpenAIUsage  # noqa: E402
from test_claude_cli import cli_env as claude_cli_env  # noqa: E402

AGENTCLI_DIR = Path(os.environ.get("RES_AGENTCLI_DIR") or "/tmp/res-agentcli")
RUN_TIMEOUT_S = 240  # one CLI session, start to end (its commands wait for one another's jobs)
BARRIER_S = 120  # how long the first tool call of a round waits for the round's other sessions

# What the hook entry says in each CLI's settings: the form `res hook install` writes (docs/agent-hooks.md).
HOOK_COMMAND = "res hook --agent {cli}"
CODEX_HOOK_TIMEOUT_S = 30
GEMINI_HOOK_TIMEOUT_MS = 30000
CLAUDE_HOOK_TIMEOUT_S = 30


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set: the agentcli tier must run there, never skip)")
    pytest.skip(why)


# ---------------------------------------------------------------- what the CLI handed its model


@dataclass
class ToolResult:
    text: str  # the command's output as the model got it (the CLI's own framing taken off)
    rc: int | None  # the exit code the CLI told the model (None: denied, nothing ran)
    denied: bool  # the hook refused it: `text` is the reason as the model got it
    raw: Any  # the tool result as sent, for messages


RES_LINE = re.compile(r"^(r-\d+ (queued|started|done|withdrawn|would)\b|res: |busy: )")
STARTED = re.compile(r"^(r-\d+) started; log \S+")
QUEUED = re.compile(r"^(r-\d+) queued, position \d+")
DONE = re.compile(r"^(r-\d+) done rc=(-?\d+)\b")


def res_lines(text: str) -> list[str]:
    """res's own lines in a tool result (`r-N started; log …`, `r-N done rc=…`, a queued line)."""
    return [ln for ln in text.splitlines() if RES_LINE.match(ln)]


def job_of(text: str) -> tuple[str | None, int | None]:
    """The res job a tool result names (`r-N started`) and its exit code (`r-N done rc=…`), or None."""
    ours = res_lines(text)
    started = [m.group(1) for m in map(STARTED.match, ours) if m]
    done = [int(m.group(2)) for m in map(DONE.match, ours) if m]
    return (started[0] if started else None), (done[0] if done else None)


@dataclass
class Seen:
    """What one session's model got back for its command."""

    kind: str  # ran, refused
    text: str  # what the model got
    rc: int | None  # the exit code the CLI recorded

    @property
    def job(self) -> tuple[str | None, int | None]:
        return job_of(self.text)


# The project the gate's sessions are asked to test: two passing tests in a git checkout.
SUITE = "def test_one():\n    assert 1 + 1 == 2\n\n\ndef test_two():\n    assert 'res'.upper() == 'RES'\n"


def gate_project(base: Path) -> Path:
    proj = base / "proj"
    (proj / "tests").mkdir(parents=True)
    (proj / "tests" / "test_two.py").write_text(SUITE)
    subprocess.run(["git", "init", "-q", str(proj)], check=True, capture_output=True)
    return proj


def gate_environ() -> dict:
    """What reaches res from the test (its state directory, policy, names, the user manager), and the
    PATH that finds `res`."""
    keep = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")
    of_a_job = ("RES_ID", "RES_BY", "RES_TASK", "RES_CPUS", "RES_MEM_MB")
    env = {k: v for k, v in os.environ.items() if (k.startswith("RES_") and k not in of_a_job) or k in keep}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    return env


@pytest.fixture
def loop(res):
    """The test's res with its loop (`res serve`) running, as an agent's machine has it."""
    from clihelp import PY, wait_for

    serve = res.popen([PY, "-m", "reconciler.cli", "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (res.state / "serve.sock").exists() and res("status").code == 0, "the loop answers")
    try:
        yield res
    finally:
        serve.terminate()


def entries_of(res) -> list[dict]:
    return res.status_all()["jobs"]


def took_part_only_as_it_may(res, name: str, expect: str, plain: Seen, gated: Seen, job_rc: int | None = None) -> None:
    """The gate's promise, checked on one session run twice, without res's hook (`plain`) and with it
    (`gated`): the model got the same, and res took the part `expect` says: "job" (the command ran as a
    res job, which ended with the session's rc, `job_rc` if given), "in place" (it ran as the session
    runs it, booked by a note the post-tool event releases) or "untouched" (no job, no note)."""
    from clihelp import wait_for

    assert gated.kind == plain.kind and gated.rc == plain.rc, (name, plain, gated)
    assert meaningful(gated.text) == meaningful(plain.text), (gated.text, plain.text)
    job, rc = gated.job
    entries = entries_of(res)
    if expect == "job":
        assert job is not None and rc == plain.rc and (job_rc is None or rc == job_rc), \
            f"{name}: not run as a res job: {gated.text}"
        jobs = [e for e in entries if e["kind"] != "note"]
        assert len(jobs) == 1 and jobs[0]["id"] == job and jobs[0]["state"] == "done", entries
        return
    assert job is None, f"{name}: a res job where the session runs it itself: {gated.text}"
    notes = [e for e in entries if e["kind"] == "note"]
    assert [e for e in entries if e["kind"] != "note"] == [], entries
    if expect == "untouched":
        assert notes == [], f"{name}: booked where a rule of the session's may be about the line: {notes}"
        return
    assert len(notes) == 1 and notes[0]["title"].endswith("(in place)"), notes
    # the post-tool event released it: nothing of the session's is still held
    wait_for(lambda: all(e["state"] != "running" for e in entries_of(res)), "the booking released", 60)


def hold_every_cpu(res) -> str:
    """Make the machine busy for a heavy `pytest` line, as the refusal tests need it: the policy books
    every CPU for one (the gate waits 5 s at most) and a note holds them all; the note's id (release it)."""
    from clihelp import nproc, wait_for

    n = nproc()
    (res.tmp / "policy.toml").write_text(f'gate_wait_s = 5\nuser_reserve_gb = 0.5\ncpu_overcommit = 1\n'
                                         f'[gate_heavy_add]\n"pytest" = {{ mem_gb = 0.25, cpus = {n}, minutes = 0.5 }}\n')
    wait_for(lambda: json.loads((res.state / "gate.json").read_text()).get("wait_s") == 5
             if (res.state / "gate.json").exists() else False, "the loop publishes the policy", 60)
    note = res("note", "--cpus", str(n), "--mem", "0.1G", "--for", "30m", "held by the test")
    assert note.code == 0, str(note)
    return note.out.split()[0]


def meaningful(text: str) -> list[str]:
    """The lines of a command's output to compare with the same command run without the gate: res's
    own lines and blank lines out, trailing blanks off, and a duration (`297 passed in 1.09s`) blanked."""
    out = []
    for ln in text.splitlines():
        ln = ln.rstrip()
        if not ln or RES_LINE.match(ln):
            continue
        out.append(re.sub(r"\bin \d+(\.\d+)?s\b", "in <t>s", ln))
    return out


# ---------------------------------------------------------------- the rounds: sessions whose commands meet


class _Held:
    """The first scripted tool call of a server waits at `barrier` (every session of the round asks
    for its first command before any is answered), so that the round's commands reach the gate at
    about the same moment whatever each CLI's start-up takes."""

    barrier: threading.Barrier | None = None
    _held = False

    def _hold(self) -> None:
        if self.barrier is None or self._held:
            return
        self._held = True
        try:
            self.barrier.wait(BARRIER_S)
        except threading.BrokenBarrierError:  # a session that never got here: the test says so later
            pass


class HeldAnthropicAPI(_Held, AnthropicAPI):
    def _next(self, body: dict[str, Any], path: str, stream: bool):
        if body.get("tools"):  # a main-loop call (background calls carry no tools)
            self._hold()
        return super()._next(body, path, stream)


class HeldOpenAIServer(_Held, OpenAIServer):
    def _next(self, body: dict[str, Any]):
        self._hold()
        return super()._next(body)


class HeldGeminiAPI(_Held, GeminiAPI):
    def _next(self, model: str, stream: bool, schema: Any = None):
        if schema is None:  # not a helper call (router, next-speaker check)
            self._hold()
        return super()._next(model, stream, schema)


# ---------------------------------------------------------------- installing the hook


def install_hook(cli: str, home: Path, env: dict[str, str]) -> None:
    """`res hook` in the session's own user settings, as a user would put it there:
    `res hook install --agent CLI --user` with the session's HOME (CLAUDE_CONFIG_DIR, CODEX_HOME).

    TODO: `res hook install` is being written (reconciler/commands/hookinstall.py); until the command
    line takes it, this writes each CLI's settings as docs/agent-hooks.md says it will. Once `res hook
    install` answers anything but argparse's "unrecognized arguments", the test runs the real command
    and must get exit 0; then drop this fallback."""
    r = subprocess.run(["res", "hook", "install", "--agent", cli, "--user"], env=env, cwd=str(home),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if not (r.returncode == 2 and "unrecognized arguments: install" in r.stderr):
        assert r.returncode == 0, f"res hook install --agent {cli} --user -> {r.returncode}: {r.stdout}{r.stderr}"
        return
    command = HOOK_COMMAND.format(cli=cli)
    if cli == "claude":
        path = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault("hooks", {}).setdefault("PreToolUse", []).append(
            {"matcher": "Bash", "hooks": [{"type": "command", "command": command, "timeout": CLAUDE_HOOK_TIMEOUT_S}]})
        path.write_text(json.dumps(data, indent=2) + "\n")
    elif cli == "codex":
        codex_home = Path(env["CODEX_HOME"])
        hooks = codex_home / "hooks.json"
        hooks.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": command, "timeout": CODEX_HOOK_TIMEOUT_S}]}]}}, indent=2) + "\n")
        # Codex 0.171.0 runs a user hook only once trusted (an untrusted one is skipped silently): the
        # trust entry in the user's config.toml, keyed by the hooks file, the event, the group and the
        # handler, holding the hash of the handler (/tmp/research/codex-hooks.md §1.3-1.5).
        key = f"{hooks}:pre_tool_use:0:0"
        with open(codex_home / "config.toml", "a") as f:
            trusted = codex_hook_hash("pre_tool_use", "Bash", command, CODEX_HOOK_TIMEOUT_S)
            f.write(f'\n[hooks.state."{key}"]\ntrusted_hash = "{trusted}"\n')
    elif cli == "gemini":
        path = home / ".gemini" / "settings.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault("hooks", {}).setdefault("BeforeTool", []).append(
            {"matcher": "^run_shell_command$", "hooks": [{"type": "command", "name": "res gate", "command": command,
                                                        "timeout": GEMINI_HOOK_TIMEOUT_MS}]})
        path.write_text(json.dumps(data, indent=2) + "\n")
    else:
        raise ValueError(cli)


def codex_hook_hash(event_label: str, matcher: str | None, command: str, timeout_s: int) -> str:
    """The `trusted_hash` Codex 0.171.0 keeps for a command hook: sha256 of the key-sorted compact JSON
    of {event_name, matcher, hooks: [the handler as Codex normalizes it]} (codex-rs/hooks discovery.rs
    command_hook_hash, config/fingerprint.rs version_for_toml; checked against the real CLI)."""
    handler = {"type": "command", "command": command, "timeout": max(1, timeout_s), "async": False}
    ident: dict[str, Any] = {"event_name": event_label, "hooks": [handler]}
    if matcher is not None:
        ident["matcher"] = matcher
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- one session of one CLI


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    timed_out: bool

    def context(self) -> str:
        return (f"rc={self.rc} timed_out={self.timed_out}\nstderr tail: {self.stderr[-1500:]}\n"
                f"stdout tail: {self.stdout[-1500:]}")


def run_group(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> Run:
    """The CLI in a process group of its own, to its end; on a timeout the group is killed (by its id:
    the CLI, its hooks and its shells; a gated job is a unit of its own, stopped by the test)."""
    p = subprocess.Popen(argv, env=env, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(p.pid)
        out, err = p.communicate(timeout=30)
    _kill_group(p.pid)  # anything of the CLI's left behind in its group
    return Run(p.returncode, out or "", err or "", timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Session:
    agent: "Agent"
    root: Path  # the session's own directory: its home (and Gemini's TMPDIR) in it
    cwd: Path  # where the CLI runs
    commands: list[str]
    barrier: threading.Barrier | None = None
    api: Any = None
    env: dict[str, str] = field(default_factory=dict)
    run_result: Run | None = None

    def __enter__(self) -> "Session":
        self.api = self.agent.start_api(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.api is not None:
            self.api.stop()

    def run(self, res_environ: dict[str, str]) -> Run:
        """The CLI to its end. `res_environ`: what reaches res (its state directory, policy, names, the
        user manager): the session's environment is the CLI's own fresh one plus these."""
        self.env = self.agent.environment(self)
        self.env.update(res_environ)
        install_hook(self.agent.name, self.home, self.env)
        self.run_result = run_group(self.agent.argv(self), self.env, self.cwd, RUN_TIMEOUT_S)
        return self.run_result

    @property
    def home(self) -> Path:
        return self.root / "home"

    def tool_results(self) -> list[ToolResult]:
        return self.agent.tool_results(self.api)

    def elsewhere(self) -> list[str]:
        """What the CLI tried to reach beyond its loopback API (the proxy's CONNECTs; Codex has no
        proxy set: it is pointed at the loopback provider only)."""
        with self.api._lock:
            return [r["path"] for r in self.api.requests if isinstance(r, dict) and r.get("method") == "CONNECT"]

    def context(self) -> str:
        run = self.run_result.context() if self.run_result else "not run"
        return f"{self.agent.name} session {self.root.name}: {run}"


PROMPT = "Please check that this project's tests pass."  # nothing about res


class Agent:
    name: str
    package: str
    version: str
    bin: str

    @property
    def path(self) -> Path:
        return AGENTCLI_DIR / self.dir_name / "node_modules" / ".bin" / self.bin

    dir_name = ""

    def installed(self) -> Path:
        """The pinned CLI, or a skip (a failure when CI is set)."""
        path = self.path
        pkg = AGENTCLI_DIR / self.dir_name / "node_modules" / self.package / "package.json"
        if not path.exists() or not pkg.exists():
            _unavailable(f"{self.package} {self.version} is not installed at {path}: run "
                         f"`bash tests/agentcli/install.sh {self.dir_name}` (RES_AGENTCLI_DIR={AGENTCLI_DIR})")
        have = json.loads(pkg.read_text()).get("version")
        if have != self.version:
            _unavailable(f"{path} is {self.package} {have}, not the pinned {self.version}: run "
                         f"`bash tests/agentcli/install.sh {self.dir_name}`")
        return path

    def session(self, root: Path, commands: list[str], cwd: Path, barrier: threading.Barrier | None = None) -> Session:
        (root / "home").mkdir(parents=True, exist_ok=True)
        return Session(self, root, cwd, list(commands), barrier)

    # each CLI: its server, its environment, its command line, its tool results
    def start_api(self, s: Session):  # pragma: no cover - abstract
        raise NotImplementedError

    def environment(self, s: Session) -> dict[str, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def argv(self, s: Session) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def tool_results(self, api) -> list[ToolResult]:  # pragma: no cover - abstract
        raise NotImplementedError


class Claude(Agent):
    name, package, version, bin, dir_name = "claude", "@anthropic-ai/claude-code", "2.1.328", "claude", "claude"
    U = ClaudeUsage(input_tokens=100, output_tokens=10)

    def start_api(self, s: Session):
        api = HeldAnthropicAPI()
        api.barrier = s.barrier
        api.script(*[ClaudeTurn(usage=self.U, text="Running it.", tool="Bash",
                                tool_input={"command": c, "description": "Run the tests"}) for c in s.commands],
                   ClaudeTurn(usage=self.U, text="Done."))
        return api.start()

    def environment(self, s: Session) -> dict[str, str]:
        return claude_cli_env(s.home, s.api)  # test_claude_cli's: fresh, offline, every directory in HOME

    def argv(self, s: Session) -> list[str]:
        # `--allowedTools Bash`: the session runs shell commands unasked (as root the CLI refuses
        # --dangerously-skip-permissions), so the gate may rewrite them (it never grants).
        return [str(self.path), "-p", PROMPT, "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"]

    def tool_results(self, api: AnthropicAPI) -> list[ToolResult]:
        with api._lock:
            bodies = [r["body"] for r in api.requests if isinstance(r.get("body"), dict) and r["body"].get("tools")]
        if not bodies:
            return []
        out = []
        for m in bodies[-1].get("messages") or []:  # the last main-loop call carries the whole conversation
            if m.get("role") != "user" or not isinstance(m.get("content"), list):
                continue
            for block in m["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append(self._result(block))
        return out

    @staticmethod
    def _result(block: dict) -> ToolResult:
        content = block.get("content")
        if isinstance(content, list):
            content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
        text = str(content or "")
        if "res: not run:" in text and text.startswith("PreToolUse:Bash hook"):
            return ToolResult(text, None, True, block)
        m = re.match(r"Exit code (\d+)\n?", text)
        if m:
            return ToolResult(text[m.end():], int(m.group(1)), False, block)
        return ToolResult(text, 0 if block.get("is_error") is not True else None, False, block)


class Codex(Agent):
    name, package, version, bin, dir_name = "codex", "@openai/codex", "0.171.0", "codex", "codex"
    U = OpenAIUsage(1000, 0, 10)

    def start_api(self, s: Session):
        api = HeldOpenAIServer([*(Reply(shell=c, usage=self.U) for c in s.commands), Reply(text="Done.", usage=self.U)],
                               repeat_last=False)
        api.barrier = s.barrier
        api.start()
        self.point_at(s.home, api)
        return api

    @staticmethod
    def point_at(home: Path, api: OpenAIServer) -> None:
        """test_codex_cli's set-up: CODEX_HOME's config.toml points the CLI at the loopback provider."""
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'model_provider = "loop"\n\n[model_providers.loop]\nname = "loop"\nbase_url = "{api.base_url}"\n'
            'wire_api = "responses"\nenv_key = "RES_LOOP_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n')

    def environment(self, s: Session) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s.home), "CODEX_HOME": str(s.home),
                "RES_LOOP_KEY": "dummy", "NO_COLOR": "1", "LANG": "C.UTF-8"}

    def argv(self, s: Session) -> list[str]:
        # `codex exec` never asks (its approval policy is `never`: the hook sees bypassPermissions);
        # without the sandbox, as test_codex_cli's tool cases: the job's client talks to the loop's socket.
        return [str(self.path), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                PROMPT]

    def tool_results(self, api: OpenAIServer) -> list[ToolResult]:
        with api._lock:
            bodies = [b for b in api.requests if isinstance(b, dict)]
        if not bodies:
            return []
        out = []
        for item in bodies[-1].get("input") or []:
            if isinstance(item, dict) and item.get("type") in ("custom_tool_call_output", "function_call_output"):
                out.append(self._result(item))
        return out

    @staticmethod
    def _result(item: dict) -> ToolResult:
        output = item.get("output")
        if isinstance(output, list):
            parts = [p.get("text", "") for p in output if isinstance(p, dict)]
        else:
            parts = [str(output or "")]
        whole = "".join(parts)
        if "Command blocked by PreToolUse hook:" in whole:
            return ToolResult(whole[whole.index("Command blocked by PreToolUse hook:"):], None, True, item)
        for part in reversed(parts):  # code mode: the JSON of tools.exec_command's result
            try:
                r = json.loads(part)
            except ValueError:
                continue
            if isinstance(r, dict) and "exit_code" in r:
                return ToolResult(str(r.get("output") or ""), r["exit_code"], False, item)
        m = re.search(r"Process exited with code (\d+)", whole)  # the function tool's text (older models)
        if m and "Output:\n" in whole:
            return ToolResult(whole.split("Output:\n", 1)[1], int(m.group(1)), False, item)
        raise AssertionError(f"a Codex tool result this test does not read: {item!r}")


class Gemini(Agent):
    name, package, version, bin, dir_name = "gemini", "@google/gemini-cli", "0.61.0", "gemini", "gemini"
    U = GeminiUsage(prompt=300, candidates=5)
    MODEL = "gemini-2.5-flash"  # a fixed model: no router call

    def start_api(self, s: Session):
        api = HeldGeminiAPI()
        api.barrier = s.barrier
        api.script(*[GeminiTurn(usage=self.U, tool="run_shell_command",
                                args={"command": c, "description": "Run the tests."}) for c in s.commands],
                   GeminiTurn(usage=self.U, text="Done."))
        return api.start()

    def environment(self, s: Session) -> dict[str, str]:
        # test_gemini_cli's run_cli: its settings (no telemetry, no updates, the API key auth, folder
        # trust off so a headless run starts) and its environment (the API on loopback, anything else
        # into the server's CONNECT log)
        gem = s.home / ".gemini"
        gem.mkdir(parents=True, exist_ok=True)
        (gem / "settings.json").write_text(json.dumps({
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True,
                        "enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        }, indent=2) + "\n")
        tmp = s.root / "tmp"
        tmp.mkdir(exist_ok=True)
        url = s.api.url
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s.home), "TMPDIR": str(tmp),
                "GEMINI_API_KEY": "loopback-key", "GOOGLE_GEMINI_BASE_URL": url,
                "HTTPS_PROXY": url, "HTTP_PROXY": url, "NO_PROXY": "127.0.0.1,localhost", "NO_COLOR": "1",
                "LANG": "C.UTF-8"}

    def argv(self, s: Session) -> list[str]:
        # yolo: the session runs shell commands unasked (headless, the shell tool exists only so)
        return [str(self.path), "-p", PROMPT, "-m", self.MODEL, "--output-format", "stream-json",
                "--approval-mode", "yolo"]

    def tool_results(self, api: GeminiAPI) -> list[ToolResult]:
        with api._lock:
            bodies = [r["body"] for r in api.requests
                      if isinstance(r.get("body"), dict) and ":streamGenerateContent" in r.get("path", "")]
        if not bodies:
            return []
        out = []
        for content in bodies[-1].get("contents") or []:
            for part in content.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    out.append(self._result(part["functionResponse"]))
        return out

    @staticmethod
    def _result(fr: dict) -> ToolResult:
        resp = fr.get("response") or {}
        if "error" in resp:
            return ToolResult(str(resp["error"]), None, "Tool execution blocked:" in str(resp["error"]), fr)
        text = str(resp.get("output") or "")
        m = re.search(r"<untrusted_context>\n(.*)\n</untrusted_context>", text, re.S)
        body = m.group(1) if m else text
        lines, rc = [], 0
        for i, ln in enumerate(body.split("\n")):
            if i == 0 and ln.startswith("Output: "):
                ln = ln[len("Output: "):]
            em = re.fullmatch(r"Exit Code: (\d+)", ln)
            if em:
                rc = int(em.group(1))
                continue
            if re.match(r"(Process Group PGID|Background PIDs|Signal|Error): ", ln):
                continue
            lines.append(ln)
        if lines == ["(empty)"]:  # the CLI's word for a command that printed nothing
            lines = []
        return ToolResult("\n".join(lines), rc, False, fr)


class OpenCode(Agent):
    """OpenCode 1.18.33 (`opencode run --format json`) against the Chat Completions API of
    openai_api.py: a custom provider (`@ai-sdk/openai-compatible`, baseURL on loopback) in the user's
    opencode.json, under XDG_CONFIG_HOME in the session's home. At start it reaches for
    registry.npmjs.org once (to put @opencode-ai/plugin beside a config directory's plugins): HTTPS_PROXY
    is the loopback server, which refuses the CONNECT at once (a proxy that does not answer costs ~75 s)."""

    name, package, version, bin, dir_name = "opencode", "opencode-ai", "1.18.33", "opencode", "opencode"
    U = OpenAIUsage(1000, 0, 10)
    MODEL = "loop/m1"

    def start_api(self, s: Session):
        api = HeldOpenAIServer([*(Reply(shell=c, usage=self.U) for c in s.commands), Reply(text="Done.", usage=self.U)],
                               repeat_last=True)
        api.barrier = s.barrier
        api.start()
        self.point_at(s.home, api)
        return api

    @staticmethod
    def config_path(home: Path) -> Path:
        return home / ".config" / "opencode" / "opencode.json"

    @classmethod
    def point_at(cls, home: Path, api: OpenAIServer, permission: Any = None) -> None:
        path = cls.config_path(home)
        path.parent.mkdir(parents=True, exist_ok=True)
        conf: dict[str, Any] = {"$schema": "https://opencode.ai/config.json", "share": "disabled", "autoupdate": False,
                                "provider": {"loop": {"npm": "@ai-sdk/openai-compatible", "name": "loop",
                                                      "options": {"baseURL": api.base_url, "apiKey": "dummy"},
                                                      "models": {"m1": {"name": "m1"}}}},
                                "model": cls.MODEL}
        if permission is not None:
            conf["permission"] = permission
        path.write_text(json.dumps(conf, indent=2) + "\n")

    def environment(self, s: Session) -> dict[str, str]:
        url = s.api.url
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s.home),
                "XDG_CONFIG_HOME": str(s.home / ".config"), "XDG_DATA_HOME": str(s.home / ".local" / "share"),
                "XDG_CACHE_HOME": str(s.home / ".cache"), "XDG_STATE_HOME": str(s.home / ".local" / "state"),
                "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "HTTPS_PROXY": url, "HTTP_PROXY": url,
                "NO_PROXY": "127.0.0.1,localhost", "NO_COLOR": "1", "LANG": "C.UTF-8"}

    def argv(self, s: Session, extra: tuple[str, ...] = ()) -> list[str]:
        return [str(self.path), "run", "--format", "json", "-m", self.MODEL, *extra, PROMPT]

    def tool_results(self, api: OpenAIServer) -> list[ToolResult]:
        """What the model got: the `tool` messages of the last chat request with tools (OpenCode hands
        the model the command's output as it is, no exit code; a refusal as the error's text)."""
        with api._lock:
            bodies = [b for b in api.requests if isinstance(b, dict) and b.get("tools")]
        if not bodies:
            return []
        return [ToolResult(str(m.get("content") or ""), None, False, m) for m in bodies[-1].get("messages") or []
                if isinstance(m, dict) and m.get("role") == "tool"]

    @staticmethod
    def events(stdout: str) -> list[dict]:
        """The tool_use events of `opencode run --format json`: state.status completed (metadata.exit: the
        exit code) or error (state.error: what the model got)."""
        out = []
        for line in stdout.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("type") == "tool_use":
                out.append(ev["part"]["state"])
        return out


class Copilot(Agent):
    """GitHub Copilot CLI 1.0.102 (`copilot -p … --output-format json`) against the Chat Completions API
    of openai_api.py, offline as its bring-your-own-key mode runs it: COPILOT_PROVIDER_BASE_URL on
    loopback, COPILOT_OFFLINE=true (no GitHub sign-in, no token), every directory of its own in the
    session's home; anything else it reached for would be a CONNECT to the loopback server. Its bash
    tool hands the model the command's output and `<shellId: N completed with exit code N>`; a hook's
    deny as `Denied by preToolUse hook: <reason>`."""

    name, package, version, bin, dir_name = "copilot", "@github/copilot", "1.0.102", "copilot", "copilot"
    U = OpenAIUsage(1000, 0, 10)
    MODEL = "loop-model"
    TRAILER = re.compile(r"\n?<shellId: \S+ completed with exit code (-?\d+)>\s*$")

    def start_api(self, s: Session):
        api = HeldOpenAIServer([*(Reply(shell=c, usage=self.U) for c in s.commands), Reply(text="Done.", usage=self.U)],
                               repeat_last=True)
        api.barrier = s.barrier
        return api.start()

    def environment(self, s: Session) -> dict[str, str]:
        url = s.api.url
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(s.home),
                "COPILOT_HOME": str(s.home / ".copilot"), "COPILOT_CACHE_HOME": str(s.home / ".cache"),
                "XDG_CACHE_HOME": str(s.home / ".cache"), "COPILOT_AUTO_UPDATE": "false",
                "COPILOT_PROVIDER_BASE_URL": s.api.base_url, "COPILOT_PROVIDER_TYPE": "openai",
                "COPILOT_PROVIDER_WIRE_API": "completions", "COPILOT_MODEL": self.MODEL, "COPILOT_OFFLINE": "true",
                "HTTPS_PROXY": url, "HTTP_PROXY": url, "NO_PROXY": "127.0.0.1,localhost", "NO_COLOR": "1",
                "LANG": "C.UTF-8"}

    def argv(self, s: Session, extra: tuple[str, ...] = ("--allow-all-tools",)) -> list[str]:
        return [str(self.path), "-C", str(s.cwd), *extra, "--output-format", "json", "--no-color", "-p", PROMPT]

    def tool_results(self, api: OpenAIServer) -> list[ToolResult]:
        """The `tool` messages of the last chat request with tools: the output with its exit code (from
        the trailer), or a deny's text."""
        with api._lock:
            bodies = [b for b in api.requests if isinstance(b, dict) and b.get("tools")]
        if not bodies:
            return []
        out = []
        for m in bodies[-1].get("messages") or []:
            if not (isinstance(m, dict) and m.get("role") == "tool"):
                continue
            text = str(m.get("content") or "")
            t = self.TRAILER.search(text)
            if t:
                out.append(ToolResult(text[:t.start()], int(t.group(1)), False, m))
            else:
                out.append(ToolResult(text, None, text.startswith("Denied by preToolUse hook:"), m))
        return out

    @staticmethod
    def events(stdout: str) -> list[dict]:
        """The tool.execution_complete events' data of `--output-format json`."""
        out = []
        for line in stdout.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("type") == "tool.execution_complete":
                out.append(ev.get("data") or {})
        return out


AGENTS: dict[str, Agent] = {a.name: a for a in (Claude(), Codex(), Gemini(), OpenCode(), Copilot())}
