"""The real Gemini CLI against a Gemini API on loopback (issue 22): res's digest of its output must
be the usage the server sent, priced per model, in both headless formats.

Gemini CLI (@google/gemini-cli from npm, installed by tests/agentcli/install.sh: the current pin in
`gemini`, a 0.4x in `gemini-0.47`) runs offline with GEMINI_API_KEY and GOOGLE_GEMINI_BASE_URL
pointing at gemini_api.py, which answers with usage chosen here. Its stdout and stderr go to one
log, as a res job's do, and GeminiDigest reads that log. Checked:

- `--output-format stream-json` and `json` of the same session give the same digest (tokens, spend,
  outcome, iterations), and that is the table price of what the server billed, per model (a router
  classifier on a flash-lite model and the main loop on another, with a tool call between two calls);
- a 429 (daily quota: the CLI does not retry it) before any usage costs $0.00 in both formats, and
  the run fails with the CLI's message; after a billed call, stream-json reports that call's usage
  (exact) while json's error document reports none (known: $0.00, see docs);
- the CLI reaches nothing but the loopback server (HTTPS_PROXY is the server; no CONNECT came).

Skipped when a CLI is not installed, unless CI is set (then it fails). Regenerate the saved real
outputs (tests/fixtures/gemini/cli) with `python3 tests/agentcli/test_gemini_cli.py --save-fixtures`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemini_api import GeminiAPI, Turn, Usage  # noqa: E402

from reconciler.core.digest import make_digest  # noqa: E402
from reconciler.core.spend import running_spend_usd  # noqa: E402
from reconciler.core.pricing import load_pricing  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGENTCLI_DIR = Path(os.environ.get("RES_AGENTCLI_DIR") or "/tmp/res-agentcli")
CLIS = {"gemini": "0.61.0", "gemini-0.47": "0.47.0"}  # install.sh name -> pinned version
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
FIXTURES = ROOT / "tests" / "fixtures" / "gemini" / "cli"
TOL = 1e-6
RUN_TIMEOUT_S = 180
DAILY_QUOTA = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"  # a QuotaFailure the CLI does not retry


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    turns: tuple[Turn, ...]
    ok: bool = True


CASES = {
    "auto-tool": Case("auto-tool", "auto", (
        Turn(usage=Usage(prompt=9000, candidates=20, thoughts=10), tool="list_directory", args={"dir_path": "."}),
        Turn(usage=Usage(prompt=9500, candidates=15, thoughts=5, cached=8000), text="The directory is empty."))),
    "429-first": Case("429-first", "gemini-2.5-flash", tuple(
        Turn(status=429, error_message="You exceeded your current quota, please check your plan and billing details.",
             quota_id=DAILY_QUOTA) for _ in range(3)), ok=False),
    "429-after": Case("429-after", "gemini-2.5-flash", (
        Turn(usage=Usage(prompt=9000, candidates=20, thoughts=10), tool="list_directory", args={"dir_path": "."}),
        *(Turn(status=429, error_message="You exceeded your current quota, please check your plan and billing details.",
               quota_id=DAILY_QUOTA) for _ in range(3))), ok=False),
}


def cli_path(name: str) -> Path:
    return AGENTCLI_DIR / name / "node_modules" / ".bin" / "gemini"


def need(name: str) -> Path:
    cli = cli_path(name)
    if not cli.exists():
        why = f"Gemini CLI {CLIS[name]} not installed at {cli} (bash tests/agentcli/install.sh {name})"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return cli


@dataclass
class Run:
    rc: int
    log: bytes
    billed: dict[str, list[Usage]]  # per model, what the server billed
    connects: list[str]


def run_cli(cli: Path, case: Case, fmt: str) -> Run:
    """One headless run; stdout and stderr into one log, as a res job's."""
    base = Path(tempfile.mkdtemp(prefix="res-gemini-cli-"))
    try:
        home, work = base / "home", base / "work"
        (home / ".gemini").mkdir(parents=True)
        work.mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True,
                        "enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        }))
        with GeminiAPI() as api:
            api.script(*case.turns)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(base),
                   "GEMINI_API_KEY": "loopback-key", "GOOGLE_GEMINI_BASE_URL": api.url,
                   "HTTPS_PROXY": api.url, "HTTP_PROXY": api.url, "NO_PROXY": "127.0.0.1,localhost",
                   "NO_COLOR": "1"}
            log = base / "log"
            with open(log, "wb") as out:
                p = subprocess.run([str(cli), "-p", "List this directory, then say what is in it.", "-m", case.model,
                                    "--output-format", fmt, "--approval-mode", "yolo"],
                                   cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   timeout=RUN_TIMEOUT_S)
            connects = [r["path"] for r in api.requests if r["method"] == "CONNECT"]
            return Run(p.returncode, log.read_bytes(), api.billed(), connects)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def digest_of(log: bytes, model: str | None, rc: int):
    """GeminiDigest over a log as ingest reads it (complete lines; the last one at the end), with the
    running spend just before the usage came."""
    d = make_digest("gemini", TABLE, model=model)
    lines = log.decode("utf-8", "replace").split("\n")
    before = None
    for line in lines[:-1]:
        if line.startswith('{"type":"result"') or (line == "}" and d.json_doc is not None):
            before = running_spend_usd(d.state)
        d.push(line)
    if lines[-1]:
        d.push(lines[-1])
    d.finish(rc)
    return d.state, before


def priced(billed: dict[str, list[Usage]]) -> float:
    """The table price of what the server billed, call by call."""
    return sum(TABLE.cost_tokens(m, u.prompt - u.cached, u.total_tokens - u.prompt, 0, u.cached)
               for m, us in billed.items() for u in us)


@pytest.mark.parametrize("name", list(CLIS))
def test_json_and_stream_json_give_the_same_digest_and_it_is_what_was_billed(name):
    cli = need(name)
    case = CASES["auto-tool"]
    got = {}
    for fmt in ("stream-json", "json"):
        run = run_cli(cli, case, fmt)
        assert run.rc == 0, run.log[-2000:]
        assert not run.connects, run.connects
        s, before = digest_of(run.log, case.model, run.rc)
        assert s.outcome == "success", s.failure_reason
        assert s.set_aside == 0
        assert len(run.billed) == 2  # the router's classifier and the main model
        assert abs(s.spend_usd - priced(run.billed)) <= TOL, (fmt, s.spend_usd, priced(run.billed), run.billed)
        assert running_spend_usd(s) == pytest.approx(s.spend_usd, abs=TOL)
        assert s.model in run.billed and s.model_note is None
        got[fmt] = (s.input_tokens, s.output_tokens, s.cache_read_tokens, round(s.spend_usd, 9), s.outcome, s.iterations)
        if fmt == "stream-json":
            assert before >= 0.8 * s.spend_usd
    assert got["stream-json"] == got["json"]


@pytest.mark.parametrize("name", list(CLIS))
def test_a_429_before_any_usage_costs_nothing(name):
    cli = need(name)
    case = CASES["429-first"]
    for fmt in ("stream-json", "json"):
        run = run_cli(cli, case, fmt)
        assert run.rc != 0 and not run.billed and not run.connects
        s, _ = digest_of(run.log, case.model, run.rc)
        assert s.outcome == "failure" and s.set_aside == 0
        assert s.spend_usd == 0.0 and running_spend_usd(s) == 0.0, (fmt, s)


@pytest.mark.parametrize("name", list(CLIS))
def test_a_429_after_a_billed_call(name):
    cli = need(name)
    case = CASES["429-after"]
    for fmt in ("stream-json", "json"):
        run = run_cli(cli, case, fmt)
        assert run.rc != 0 and len(run.billed) == 1
        s, _ = digest_of(run.log, case.model, run.rc)
        assert s.outcome == "failure"
        if fmt == "stream-json":  # the result's stats report the billed call
            assert abs(s.spend_usd - priced(run.billed)) <= TOL
        else:  # json's error document has no stats: nothing is reported, the refusal is taken as the whole
            assert s.spend_usd == 0.0


def save_fixtures() -> None:
    """Run every case in both formats with every installed CLI; save the logs (real CLI output) and
    what the server billed."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    billed_all = {}
    for name, version in CLIS.items():
        cli = cli_path(name)
        if not cli.exists():
            print(f"skip {name}: not installed")
            continue
        for case in CASES.values():
            for fmt in ("stream-json", "json"):
                run = run_cli(cli, case, fmt)
                stem = f"loopback_{version}_{fmt}_{case.id}_rc{run.rc}"
                (FIXTURES / f"{stem}.log").write_bytes(run.log)
                billed_all[stem] = {m: [u.__dict__ for u in us] for m, us in run.billed.items()}
                print(stem, len(run.log), "bytes", run.billed)
    (FIXTURES / "billed.json").write_text(json.dumps(billed_all, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--save-fixtures"]:
        save_fixtures()
    else:
        print(__doc__)
