"""The gate with the real agent CLIs (issue 24, criterion 6): Claude Code, Codex and Gemini CLI, each
with `res hook` installed in its own user settings and a real `res serve` loop on a real systemd user
manager, run sessions whose scripted model (on loopback, tests/agentcli/*_api.py) runs a real
project's test suite with `-n auto` and a memory hog. No session is told about res: the prompt says
nothing of it, the model's commands are plain ones.

The policy pins the numbers so that this is about the rules, not this machine's free memory: each
gated command books every CPU agents have (N, as res counts them) and a little memory, so gated jobs
run one at a time, and memory never binds. Per CLI:

- three sessions at once (their first tool calls are held until all three asked, so the commands
  meet at the gate): the itsdangerous 2.2.0 suite with `-n auto` (twice), the second session's also
  with `-k no_such_test` after it (pytest's exit code 5), and `python3 hog.py 300` (touches 300 MB);
- every command's tool result, as the CLI handed it to its model (read back from the request the CLI
  sent to the loopback API), holds the same output lines as the command run without the gate (here,
  with bash) and the same exit code, in that CLI's own tool-result format; it names the job
  (`r-N started`, `r-N done rc=…`);
- the ledger (state.db, read-only) has one gated job per command, that command line whole, every
  CPU booked, none killed; their [started, ended] intervals do not overlap; a command whose result
  says it was queued started only after another gated job ended (waits as the ledger says);
- then, with every CPU held by a note (`res note --cpus N … "held by the test"`), one more session
  runs the suite: the gate denies it with the busy line (the note, "until ~HH:MM", "retry after"),
  the model gets that line as the tool's result, and no job is made for it.

Skipped when a CLI is not installed (tests/agentcli/install.sh), unless CI is set (then it fails).
The project's suite comes from bench/crowd.py's set-up (a venv and the sdist under
/tmp/res-crowd-cache, downloaded from PyPI the first time).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from clihelp import PY, nproc, res, wait_for  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS, DONE, QUEUED, STARTED, meaningful, res_lines  # noqa: E402

pytestmark = pytest.mark.systemd

N = nproc()  # the CPUs res counts for agents (res_env: no CPUs reserved for the user)
HOG = """\
import sys
mb = int(sys.argv[1])
buf = bytearray(mb << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print(f"hog: touched {mb} MB")
"""
POLICY = f"""\
# the gate's acceptance test: CPUs bind (each gated command books every CPU), memory does not
gate_wait_s = 120
user_reserve_gb = 0.5
cpu_overcommit = 1  # every CPU promised once, so two gated commands cannot both hold them
small_headroom_gb = 0
[gate_heavy_add]
"pytest" = {{ mem_gb = 0.25, cpus = {N}, minutes = 0.5 }}
"python3 hog.py" = {{ mem_gb = 0.5, cpus = {N}, minutes = 0.5 }}
"""
DIRECT_TIMEOUT_S = 300

# ---------------------------------------------------------------- the project and its commands


@pytest.fixture(scope="module")
def project():
    """The commands, and each one's output and exit code run without the gate (bash, one at a time)."""
    from crowdkit.workload import TESTS, setup_suites

    suites = setup_suites([t for t in TESTS if t[0] == "itsdangerous"], lambda m: print(m, flush=True))
    s = suites["itsdangerous"]
    pytest_ = f"cd {s['dir']} && {s['python']} -m pytest -q -n auto -p no:cacheprovider tests"
    commands = {"suite": f"{pytest_} 2>&1 | tail -3", "no tests": f"{pytest_} -k no_such_test",
                "hog": "python3 hog.py 300"}
    base = Path(tempfile.mkdtemp(prefix="res-gate-direct-", dir="/var/tmp"))
    try:
        (base / "hog.py").write_text(HOG)
        direct = {}
        for name, line in commands.items():
            p = subprocess.run(["bash", "-c", line], cwd=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=DIRECT_TIMEOUT_S, stdin=subprocess.DEVNULL)
            direct[name] = (p.returncode, p.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert [direct[k][0] for k in ("suite", "no tests", "hog")] == [0, 5, 0], direct
    assert re.search(r"^\d+ passed in ", direct["suite"][1], re.M), direct["suite"]
    return {"commands": commands, "direct": direct}


# ---------------------------------------------------------------- the loop


def res_environ() -> dict[str, str]:
    """What reaches res from an agent's shell: this test's state directory, policy and names (RES_*)
    and the user manager; nothing else of this process."""
    keep = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")
    of_a_job = ("RES_ID", "RES_BY", "RES_TASK", "RES_CPUS", "RES_MEM_MB")  # were this test run as a res job
    return {k: v for k, v in os.environ.items() if (k.startswith("RES_") and k not in of_a_job) or k in keep}


@pytest.fixture
def loop(res):
    """A real `res serve` for the test's state directory (stopped by pid by the res fixture), with the
    pinned policy published in gate.json; every job left is stopped at the end."""
    (res.tmp / "policy.toml").write_text(POLICY)
    with open(res.tmp / "serve.log", "w") as log:
        serve = res.popen([PY, "-m", "reconciler.cli", "serve"], stdout=subprocess.DEVNULL, stderr=log)
    gate = res.state / "gate.json"

    def published() -> bool:
        try:
            g = json.loads(gate.read_text())
        except (OSError, ValueError):
            return False
        return g.get("wait_s") == 120 and g["table"].get("python3 hog.py", {}).get("cpus") == N

    wait_for(lambda: (res.state / "serve.sock").exists() and res("status").code == 0, "the loop answers")
    wait_for(published, "the loop publishes the pinned gate table")
    assert res.status_all()["budget"]["cpus"] == N
    try:
        yield res
    finally:
        for j in res.status_all()["jobs"]:
            if j["state"] in ("queued", "starting", "running", "exited"):
                res("release", "--stop", j["id"])
        assert serve.poll() is None, (res.tmp / "serve.log").read_text()[-3000:]


def records(res) -> dict:
    from reconciler.config.paths import Paths
    from reconciler.recorded.store import Store

    with Store.open(Paths(res.state), readonly=True) as store:
        return store.records()


# ---------------------------------------------------------------- the test


def _round(agent, base: Path, specs: list[tuple[str, list[str], Path]], held: bool) -> dict:
    """Sessions at once, each in a thread with its own loopback API and home; {name: session} once all ended."""
    barrier = threading.Barrier(len(specs)) if held else None
    sessions = {name: agent.session(base / name, commands, cwd, barrier) for name, commands, cwd in specs}
    with ExitStack() as servers, ThreadPoolExecutor(len(sessions)) as ex:
        for s in sessions.values():
            servers.enter_context(s)
        list(ex.map(lambda s: s.run(res_environ()), sessions.values()))
    for s in sessions.values():
        assert s.run_result.rc == 0 and not s.run_result.timed_out, s.context()
        assert not s.elsewhere(), (s.context(), s.elsewhere())
    return sessions


@pytest.fixture(scope="module", params=["claude", "codex", "gemini"])  # OpenCode: test_gate_opencode.py
def agent(request):
    """Each CLI, pinned and installed (else a skip, or a failure when CI is set), before anything is set up."""
    a = AGENTS[request.param]
    a.installed()
    return a


def test_agents_that_never_call_res_are_gated(agent, project, loop):
    res, cli = loop, agent.name
    cmds, direct = project["commands"], project["direct"]
    base = Path(tempfile.mkdtemp(prefix=f"res-gate-{cli}-", dir="/var/tmp"))  # short: sockets under it
    try:
        work = {}
        for name in ("s1", "s2", "s3", "s4"):
            work[name] = base / f"{name}-work"
            work[name].mkdir()
        (work["s3"] / "hog.py").write_text(HOG)

        # three sessions at once: the suite, the suite then the suite with no test selected, the hog
        sessions = _round(agent, base, [("s1", [cmds["suite"]], work["s1"]),
                                        ("s2", [cmds["suite"], cmds["no tests"]], work["s2"]),
                                        ("s3", [cmds["hog"]], work["s3"])], held=True)
        ran: list[tuple[str, str, object]] = []  # (command name, its line, its tool result)
        for sname, names in (("s1", ["suite"]), ("s2", ["suite", "no tests"]), ("s3", ["hog"])):
            results = sessions[sname].tool_results()
            assert len(results) == len(names), (sessions[sname].context(), results)
            ran += [(name, cmds[name], r) for name, r in zip(names, results)]

        jobs = {}  # job id -> (command name, line, whether its result says it was queued)
        for name, line, r in ran:
            want_rc, want_out = direct[name]
            assert not r.denied, f"{cli} {name}: denied: {r.text}"
            assert r.rc == want_rc, f"{cli} {name}: the model was told exit code {r.rc}, ungated {want_rc}: {r.raw}"
            assert meaningful(r.text) == meaningful(want_out), (
                f"{cli} {name}: output differs from the command run without the gate\n"
                f"gated: {meaningful(r.text)}\ndirect: {meaningful(want_out)}\nraw: {r.raw}")
            ours = res_lines(r.text)
            assert all(QUEUED.match(ln) or STARTED.match(ln) or DONE.match(ln) for ln in ours), f"{cli} {name}: {ours}"
            started = [m.group(1) for m in map(STARTED.match, ours) if m]
            done = [(m.group(1), int(m.group(2))) for m in map(DONE.match, ours) if m]
            assert len(started) == 1 and done == [(started[0], want_rc)], f"{cli} {name}: res's lines {ours}: {r.raw}"
            queued = [m.group(1) for m in map(QUEUED.match, ours) if m]
            assert queued in ([], started), ours
            jobs[started[0]] = (name, line, bool(queued))
        assert len(jobs) == 4, jobs

        # the ledger: one gated job per command, the whole line, every CPU booked, none killed, one at a time
        recs = records(res)
        gated = {i: rec for i, rec in recs.items() if rec.request.kind == "job"}
        assert set(gated) == set(jobs), (sorted(gated), sorted(jobs))
        for i, rec in gated.items():
            name, line, _ = jobs[i]
            req = rec.request
            assert req.gated and req.cpus == N and req.cmd[1:] == ["-c", line], (i, req)
            assert (rec.phase.value, rec.outcome, rec.rc) == ("done", "exited", direct[name][0]), \
                (i, rec.why, rec.detail)
        spans = sorted((rec.started, rec.ended, i) for i, rec in gated.items())
        for (s1, e1, a), (s2, e2, b) in zip(spans, spans[1:]):
            assert e1 <= s2, f"{a} [{s1}, {e1}] and {b} [{s2}, {e2}] overlap: both booked all {N} CPUs"
        for i, (name, _, was_queued) in jobs.items():
            if was_queued:  # it waited, as its result says: for another gated job to end
                assert any(rec.ended <= gated[i].started for j, rec in gated.items() if j != i), (i, spans)
        assert any(q for _, _, q in jobs.values()), f"the three commands never met at the gate: {spans}"

        # every CPU held by someone else: the gate refuses, with the busy line, and makes no job
        note = res("note", "--cpus", str(N), "--mem", "0.1G", "--for", "30m", "held by the test")
        assert note.code == 0, str(note)
        note_id = note.out.split()[0]
        try:
            denied = _round(agent, base, [("s4", [cmds["suite"]], work["s4"])], held=False)["s4"]
            results = denied.tool_results()
            assert len(results) == 1, (denied.context(), results)
            r = results[0]
            assert r.denied and r.rc is None, r.raw
            assert f'"held by the test" ({note_id}' in r.text and re.search(r"until ~\d\d:\d\d", r.text) \
                and re.search(r"retry after ~\d\d:\d\d", r.text) and "res: not run:" in r.text, r.raw
            assert not any(STARTED.match(ln) for ln in r.text.splitlines()), r.raw
            after = {i for i, rec in records(res).items() if rec.request.kind == "job"}
            assert after == set(jobs), f"the refusal made a job: {sorted(after - set(jobs))}"
            assert records(res)[note_id].phase.value == "running"  # held all along
        finally:
            res.ok("release", note_id)
        print(f"\n{cli}: what the model got (-s shows it):")
        for name, _, g in ran:
            print(f"  {name} (exit code {g.rc}): {json.dumps(g.raw)[:600]}")
        print(f"  denied: {json.dumps(r.raw)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
