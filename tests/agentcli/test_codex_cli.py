"""The real Codex CLI (`@openai/codex`, installed by tests/agentcli/install.sh under
$RES_AGENTCLI_DIR/codex) run offline against the OpenAI Responses API served on loopback
(tests/agentcli/openai_api.py): a custom model provider in a temporary CODEX_HOME, every model answer
scripted with the usage it reports. What is checked is what res makes of the CLI's own output and
configuration:

- the model `res run` reads for a session (config/agentmodel.py: -m, -c model=, the project's and the
  user's config.toml, the profile file, else the release's default) is the model the CLI asks the API
  for;
- res's digest of the CLI's output: the final spend is the pricing table's price of the usage the
  server reported, at that model; a resumed or forked thread (whose `turn.completed` usage is the
  thread's running total) counts each invocation once; a turn the API refused costs $0.00; the
  prompt-length tier is chosen per request;
- the running spend is never below 0.8x of what the server had billed when each line was written,
  and equals the spend once the usage is reported.

Skipped, with the reason, when the CLI is not installed, unless CI is set (then it fails).
`python3 tests/agentcli/test_codex_cli.py --save-fixtures` writes the outputs of the cases to
tests/fixtures/codex/cli/ (with billed.json: what the server billed per request), which the pure tier
replays (tests/pure/test_digest_codex.py)."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from openai_api import OpenAIServer, Reply, Usage  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from reconciler.config.agentmodel import codex_session  # noqa: E402
from reconciler.core.agents import codex_default_model  # noqa: E402
from reconciler.core.codex import CodexDigest  # noqa: E402
from reconciler.core.digest import make_digest  # noqa: E402
from reconciler.core.spend import running_spend_usd  # noqa: E402
from reconciler.core.pricing import load_pricing  # noqa: E402

TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
AGENTCLI = Path(os.environ.get("RES_AGENTCLI_DIR") or "/tmp/res-agentcli")
CODEX = AGENTCLI / "codex" / "node_modules" / ".bin" / "codex"
FIXTURES = ROOT / "tests" / "fixtures" / "codex" / "cli"
TIMEOUT = 90


def installed() -> Path:
    if CODEX.exists():
        return CODEX
    why = f"the Codex CLI is not installed at {CODEX} (bash tests/agentcli/install.sh codex)"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def version_of(codex: Path) -> str:
    pkg = Path(os.path.realpath(codex)).parents[1] / "package.json"
    return json.loads(pkg.read_text())["version"]


class Session:
    """A temporary CODEX_HOME whose config.toml points the CLI at the loopback API, and a work
    directory (a git repository, so the project can be trusted)."""

    def __init__(self, api: OpenAIServer, codex: Path, config: str = "", files: dict[str, str] | None = None):
        self.api, self.codex = api, codex
        self.home = Path(tempfile.mkdtemp(prefix="res-codex-home-", dir="/var/tmp"))  # /tmp: no PATH aliases
        self.work = Path(tempfile.mkdtemp(prefix="res-codex-work-", dir="/var/tmp"))
        for d in (self.home, self.work):
            atexit.register(shutil.rmtree, d, True)
        subprocess.run(["git", "init", "-q", str(self.work)], check=True)
        (self.home / "config.toml").write_text(
            'model_provider = "loop"\n' + config.replace("WORK", str(self.work))
            + f'\n[model_providers.loop]\nname = "loop"\nbase_url = "{api.base_url}"\nwire_api = "responses"\n'
            'env_key = "RES_LOOP_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n')
        for name, text in (files or {}).items():
            path = (self.work if name.startswith(".codex/") else self.home) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
                    "CODEX_HOME": str(self.home), "RES_LOOP_KEY": "dummy", "NO_COLOR": "1"}

    def cmd(self, *args: str) -> list[str]:
        return [str(self.codex), "exec", "--json", "--skip-git-repo-check", *args]

    def run(self, cmd: list[str]) -> tuple[dict, str, int, list[dict]]:
        """(what res run reads of the session, the CLI's stdout, its exit code, the requests it sent)."""
        fields = codex_session(cmd, str(self.work), self.env)
        first = len(self.api.requests)
        p = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=TIMEOUT,
                           stdin=subprocess.DEVNULL)
        return fields, p.stdout, p.returncode, self.api.requests[first:]


def digest_of(fields: dict, stdout: str, rc: int):
    d = make_digest("codex", TABLE, model=fields.get("model"))
    assert isinstance(d, CodexDigest)
    d.session(usage_before=fields.get("usage_before"), resumes=fields.get("resumes"),
              model_note=None if fields.get("model") else fields.get("model_from"))
    running = []
    for line in stdout.split("\n")[:-1]:
        d.push(line)
        running.append((line, running_spend_usd(d.state), d.state.result_seen))
    d.finish(rc)
    return d, running


def price(model: str, usages: list[Usage]) -> float:
    """What the server billed: each request at the table's rates, its own prompt deciding the tier."""
    return sum(TABLE.cost_tokens(model, u.input_tokens - u.cached_tokens - u.cache_write_tokens, u.output_tokens,
                                 u.cache_write_tokens, u.cached_tokens) for u in usages)


# ---------------------------------------------------------------- the cases

U1 = Usage(18_000, 2_000, 300, 100)
U2 = Usage(21_000, 17_500, 120, 40)
CASES: dict[str, dict] = {
    "text": dict(replies=[Reply(text="Hello from the loopback API.", usage=U1)], args=["say hello"]),
    "tool": dict(replies=[Reply(shell="echo tool-output-here", usage=U1), Reply(text="It printed tool-output-here.", usage=U2)],
                 args=["--dangerously-bypass-approvals-and-sandbox", "run echo"]),
    # a fresh thread's first call on GPT-6 writes its prompt to the cache (billed at 1.25x input)
    "cache-write": dict(replies=[Reply(text="Cached.", usage=Usage(17_000, 0, 200, 50, cache_write_tokens=15_000))],
                        args=["-m", "gpt-6-astra", "say cached"]),
    "refused-400": dict(replies=[Reply(status=400, error="Invalid request: the model refused the input")], args=["say no"]),
    "refused-429": dict(replies=[Reply(status=429, error="Rate limit reached for requests")], args=["say no"]),
    "failed-after-tool": dict(replies=[Reply(shell="echo partial", usage=U1), Reply(status=500, error="server exploded")],
                              args=["--dangerously-bypass-approvals-and-sandbox", "run echo then fail"], billed=1),
    # gpt-5.5's long tier is above 272K a request: two requests of 200K (400K in all) are not long, one of
    # 400K is. (A prompt that big in a fresh thread shows nothing of its size in the stream: no estimate
    # before the usage sees it, `unseen`.)
    "long-two-requests": dict(replies=[Reply(shell="echo long", usage=Usage(200_000, 150_000, 500, 100)),
                                       Reply(text="Done.", usage=Usage(200_000, 190_000, 100, 20))],
                              args=["-m", "gpt-5.5", "--dangerously-bypass-approvals-and-sandbox", "long"], unseen=True),
    "long-one-request": dict(replies=[Reply(text="Done.", usage=Usage(400_000, 340_000, 600, 120))],
                             args=["-m", "gpt-5.5", "long"], unseen=True),
}


def run_case(codex: Path, name: str) -> dict:
    case = CASES[name]
    with OpenAIServer(list(case["replies"]), repeat_last=False) as api:
        s = Session(api, codex)
        fields, stdout, rc, requests = s.run(s.cmd(*case["args"]))
    billed = [r.usage for r in case["replies"][: case.get("billed", len(requests))] if r.status == 200]
    return dict(fields=fields, stdout=stdout, rc=rc, models=[r.get("model") for r in requests], billed=billed,
                unseen=case.get("unseen", False))


def run_thread(codex: Path) -> list[dict]:
    """A thread: a fresh run, `exec resume` twice, then `exec fork` of it: each invocation's
    output, and what the server billed for it."""
    usages = [Usage(18_000, 2_000, 300, 100), Usage(19_000, 17_000, 200, 60), Usage(20_500, 18_500, 150, 30),
              Usage(21_000, 19_000, 250, 80)]
    out = []
    with OpenAIServer([Reply(text=f"answer {i}", usage=u) for i, u in enumerate(usages)], repeat_last=False) as api:
        s = Session(api, codex)
        fields, stdout, rc, req = s.run(s.cmd("first question"))
        out.append(dict(name="thread-1-fresh", fields=fields, stdout=stdout, rc=rc, billed=[usages[0]],
                        models=[r.get("model") for r in req]))
        tid = json.loads(stdout.split("\n")[0])["thread_id"]
        for i, (sub, args) in enumerate([("resume", [tid, "second question"]), ("resume", [tid, "third question"]),
                                         ("fork", [tid, "a forked question"])], start=1):
            fields, stdout, rc, req = s.run(s.cmd(sub, *args))
            out.append(dict(name=f"thread-{i + 1}-{sub}", fields=fields, stdout=stdout, rc=rc, billed=[usages[i]],
                            models=[r.get("model") for r in req]))
    return out


# ---------------------------------------------------------------- the checks


def check(result: dict) -> None:
    model = result["fields"].get("model")
    assert result["models"] and all(m == model for m in result["models"]), (model, result["models"])
    d, running = digest_of(result["fields"], result["stdout"], result["rc"])
    want = price(model, result["billed"]) if result["billed"] else 0.0
    if result["rc"] == 0:
        assert d.state.outcome == "success"
        assert d.state.spend_usd == pytest.approx(want, abs=1e-6), (d.state.spend_usd, want)
        for line, spend, reported in running:
            if reported:
                assert spend == pytest.approx(d.state.spend_usd, abs=1e-9), line
        before = [spend for line, spend, reported in running if not reported]
        if not result.get("unseen"):
            assert before and before[-1] >= 0.8 * want, (before[-1], want)  # everything was billed by then
    else:
        assert d.state.outcome == "failure"
        assert d.state.spend_usd >= 0.8 * want, (d.state.spend_usd, want)
        if not result["billed"]:
            assert d.state.spend_usd == 0.0  # refused: billed nothing, costs nothing


@pytest.fixture(scope="module")
def codex() -> Path:
    return installed()


@pytest.mark.parametrize("name", sorted(CASES))
def test_res_reads_the_real_cli_as_the_server_billed_it(codex, name):
    check(run_case(codex, name))


def test_each_invocation_of_a_resumed_or_forked_thread_counts_once(codex):
    runs = run_thread(codex)
    for r in runs:
        check(r)
    resumed = [r for r in runs if "resume" in r["name"]]
    assert all(r["fields"].get("resumes") and r["fields"].get("usage_before") for r in resumed)
    forked = runs[-1]
    assert forked["fields"].get("usage_before") and not forked["fields"].get("resumes")


def test_the_default_model_of_the_installed_release_is_the_one_res_knows(codex):
    result = run_case(codex, "text")
    version = version_of(codex)
    assert result["fields"]["agent_version"] == version
    assert result["models"] == [codex_default_model(version)], (version, result["models"])


@pytest.mark.parametrize("config, files, args, want", [
    ('model = "gpt-5.5"\n', {}, [], "gpt-5.5"),
    ('model = "gpt-5.5"\n', {}, ["-m", "gpt-6-luna"], "gpt-6-luna"),
    ('model = "gpt-5.5"\n', {}, ["-c", 'model="gpt-6-sol"'], "gpt-6-sol"),
    ('model = "gpt-5.5"\n', {}, ["--config=model=gpt-6-sol", "-m", "gpt-6.1-terra"], "gpt-6.1-terra"),
    ('model = "gpt-5.5"\n', {"p.config.toml": 'model = "gpt-6-astra"\n'}, ["--profile", "p"], "gpt-6-astra"),
    ('model = "gpt-5.5"\n', {"p.config.toml": 'model_reasoning_effort = "low"\n'}, ["-p", "p"], "gpt-5.5"),
    ('model = "gpt-5.5"\n[projects."WORK"]\ntrust_level = "trusted"\n', {".codex/config.toml": 'model = "gpt-6.2-astra"\n'},
     [], "gpt-6.2-astra"),
    ('model = "gpt-5.5"\n', {".codex/config.toml": 'model = "gpt-6.2-astra"\n'}, [], "gpt-5.5"),  # not trusted
    ('model = "gpt-5.5"\n[projects."WORK"]\ntrust_level = "trusted"\n', {".codex/config.toml": 'model = "gpt-6.2-astra"\n'},
     ["-c", "model=gpt-6-sol"], "gpt-6-sol"),
], ids=["config.toml", "-m", "-c", "-m over -c", "profile file", "profile without model", "trusted project",
        "untrusted project", "-c over project"])
def test_the_model_res_reads_is_the_model_the_cli_asks_for(codex, config, files, args, want):
    with OpenAIServer([Reply(text="ok", usage=Usage(1000, 0, 10))]) as api:
        s = Session(api, codex, config=config, files=files)
        fields, stdout, rc, requests = s.run(s.cmd(*args, "which model"))
    assert rc == 0, stdout
    assert [r.get("model") for r in requests] == [want] and fields.get("model") == want, (fields, requests)


# ---------------------------------------------------------------- fixtures for the pure tier


def save_fixtures() -> None:
    codex = CODEX
    if not codex.exists():
        sys.exit(f"no Codex CLI at {codex}")
    version = version_of(codex)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    billed_path = FIXTURES / "billed.json"
    billed = json.loads(billed_path.read_text()) if billed_path.exists() else {}
    results = [dict(run_case(codex, name), name=name) for name in sorted(CASES)] + run_thread(codex)
    for r in results:
        check(r)
        file = f"codex-{version}-{r['name']}.jsonl"
        (FIXTURES / file).write_text(r["stdout"])
        fields = {k: v for k, v in r["fields"].items() if k in ("model", "model_from", "agent_version", "usage_before")}
        if "resumes" in r["fields"]:
            fields["resumes"] = r["fields"]["resumes"]
        billed[file] = dict(rc=r["rc"], requested=r["models"], request_fields=fields,
                            billed=[asdict(u) for u in r["billed"]])
        print(file, r["rc"], r["models"])
    billed_path.write_text(json.dumps(billed, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--save-fixtures"]:
        save_fixtures()
    else:
        sys.exit("usage: python3 tests/agentcli/test_codex_cli.py --save-fixtures")
