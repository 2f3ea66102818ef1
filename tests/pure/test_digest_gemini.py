"""GeminiDigest on real Gemini CLI output (tests/fixtures/gemini, SOURCES.md beside them): public
transcripts (stream-json 0.11–0.39, json 0.11 and a 0.4x–0.5x), and the real CLI 0.47.0 / 0.61.0
run against a Gemini API on loopback (tests/fixtures/gemini/cli, from tests/agentcli/test_gemini_cli.py,
with what that server billed in billed.json). Costs are worked from policies/pricing.toml here,
independently of the digest. Lines built by hand are for cases no real file shows, and say so."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reconciler.core.digest import DigestState, make_digest
from reconciler.core.spend import running_spend_usd
from reconciler.core.gemini import JSON_DOC_MAX
from reconciler.core.pricing import load_pricing

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
GEMINI = ROOT / "tests" / "fixtures" / "gemini"
CLI = GEMINI / "cli"
BILLED = json.loads((CLI / "billed.json").read_text())
TOL = 1e-6

PUBLIC = sorted(p for p in GEMINI.iterdir() if p.is_file() and p.suffix != ".md")
LOOPBACK = sorted(CLI.glob("*.log"))
ALL = PUBLIC + LOOPBACK
HAS_DOC_FIELD = "json_doc" in DigestState.model_fields


def lines_of(path: Path) -> list[str]:
    """The log's lines as ingest pushes them: split at newlines, a last line without one included."""
    parts = path.read_bytes().decode("utf-8", "replace").split("\n")
    return parts[:-1] + ([parts[-1]] if parts[-1] else [])


def rc_of(path: Path) -> int:
    return int(path.stem.rsplit("_rc", 1)[1]) if "_rc" in path.stem else 0


def run(lines: list[str], rc: int | None = 0, model: str | None = None):
    """The digest over the lines, and the running spend after every line."""
    d = make_digest("gemini", TABLE, model=model)
    running = []
    for line in lines:
        d.push(line)
        running.append(running_spend_usd(d.state))
    d.finish(rc)
    return d, running


def reported_usd(path: Path) -> float | None:
    """The table price of the usage the transcript itself reports (per model where it names them,
    at its own request count in json), read here without the digest; None if it reports none."""
    text = path.read_bytes().decode()
    for line in text.split("\n"):
        if line.startswith('{"type":"result"'):
            stats = json.loads(line).get("stats")
            if not stats:
                return None
            models = stats.get("models") or None
            if models is None:
                init = next(json.loads(x) for x in text.split("\n") if x.startswith('{"type":"init"'))
                models = {init["model"]: stats}
            calls = 1 + sum(1 for x in text.split("\n") if x.startswith('{"type":"tool_result"'))
            return sum(TABLE.cost_tokens(m, s["input_tokens"] - s.get("cached", 0),
                                         max(s["total_tokens"] - s["input_tokens"], s["output_tokens"]), 0,
                                         s.get("cached", 0), requests=calls) for m, s in models.items())
    i = text.find('\n  "stats": {')
    if i < 0:
        return None
    stats = json.loads("{" + text[i:text.rindex("\n}") + 2])["stats"]
    return sum(TABLE.cost_tokens(m, t["prompt"] - t["cached"], max(t["total"] - t["prompt"], t["candidates"] + t["thoughts"]),
                                 0, t["cached"], requests=max(1, s["api"]["totalRequests"]))
               for m, s in stats["models"].items() for t in [s["tokens"]])


def billed_usd(path: Path) -> float:
    """The table price of what the loopback server billed, call by call."""
    total = 0.0
    for model, calls in BILLED[path.stem].items():
        for u in calls:
            t = u["total"] if u["total"] is not None else u["prompt"] + u["candidates"] + u["thoughts"] + u["tool"]
            total += TABLE.cost_tokens(model, u["prompt"] - u["cached"], t - u["prompt"], 0, u["cached"])
    return total


def usage_line(lines: list[str]) -> int:
    """The index of the line that brings the usage: the result, or a json document's closing brace."""
    for i, line in enumerate(lines):
        if line.startswith('{"type":"result"'):
            return i
    return max(i for i, line in enumerate(lines) if line == "}")


# ---------------------------------------------------------------- every real transcript


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_the_spend_is_the_table_price_of_what_the_agent_reported(path):
    lines = lines_of(path)
    d, running = run(lines, rc_of(path))
    s = d.state
    want = reported_usd(path)
    if want is None:  # a json error document: no usage reported (the 429s)
        assert "429" in path.name and s.spend_usd == 0.0
    else:
        assert abs(s.spend_usd - want) <= TOL, (s.spend_usd, want)
    if path.parent == CLI and "_json_429-after" not in path.name:  # and what the loopback server billed
        assert abs(s.spend_usd - billed_usd(path)) <= TOL  # (json's 429 document reports none of it: known)
    assert s.set_aside == 0
    k = usage_line(lines)
    # once the agent has reported its usage, the running spend is that, and stays
    assert all(abs(r - s.spend_usd) <= TOL for r in running[k:]), running[k:]
    assert s.estimate_usd == pytest.approx(s.spend_usd, abs=TOL)


STREAM = [p for p in ALL if "stream-json" in p.name or p.suffix == ".jsonl"]


@pytest.mark.parametrize("path", STREAM, ids=lambda p: p.name)
def test_the_running_estimate_never_under_reads_what_was_spent(path):
    """stream-json shows every model call as it happens: before the usage comes the estimate is at
    least 0.8x of what the session turned out to spend (json shows nothing before its end)."""
    lines = lines_of(path)
    d, running = run(lines, rc_of(path))
    before = running[usage_line(lines) - 1]
    assert before >= 0.8 * d.state.spend_usd, (before, d.state.spend_usd)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_the_outcome(path):
    d, _ = run(lines_of(path), rc_of(path))
    if "_success" in path.name or "_rc0" in path.name:
        assert (d.state.outcome, d.state.failure_reason) == ("success", None)
    elif "0.47.0_stream-json" in path.name:  # 0.47 says no more than this in stream-json (its json says the quota)
        assert (d.state.outcome, d.state.failure_reason) == ("failure", "result error: [API Error: An unknown error occurred.]")
    else:
        assert d.state.outcome == "failure" and "exhausted your daily quota" in d.state.failure_reason


# ---------------------------------------------------------------- json == stream-json


@pytest.mark.parametrize("version, case", [(v, c) for v in ("0.47.0", "0.61.0") for c in ("auto-tool", "429-first", "429-after")])
def test_json_and_stream_json_of_the_same_session_give_the_same_digest(version, case):
    (stream,) = CLI.glob(f"loopback_{version}_stream-json_{case}_rc*.log")
    (whole,) = CLI.glob(f"loopback_{version}_json_{case}_rc*.log")
    a, _ = run(lines_of(stream), rc_of(stream), model="auto" if case == "auto-tool" else "gemini-2.5-flash")
    b, _ = run(lines_of(whole), rc_of(whole), model="auto" if case == "auto-tool" else "gemini-2.5-flash")

    def key(s):
        return (s.input_tokens, s.output_tokens, s.cache_read_tokens, round(s.spend_usd, 9), s.outcome)

    if case == "429-after":  # json's error document reports nothing of the call billed before the 429
        assert a.state.spend_usd == pytest.approx(billed_usd(stream), abs=TOL) and b.state.spend_usd == 0.0
        assert a.state.outcome == b.state.outcome == "failure"
        return
    assert key(a.state) == key(b.state)
    if case == "auto-tool":  # the same model and calls too (a 429's json document names neither)
        assert (a.state.model, a.state.iterations) == (b.state.model, b.state.iterations)
        assert a.state.iterations == 2 and a.state.model in ("gemini-3.5-flash", "gemini-3.8-flash")


def test_the_real_models_of_cli_0_47_and_0_61():
    """-m auto: a router classifier on a flash-lite model, the main loop on a flash (0.61:
    gemini-3.8-flash; 0.47: gemini-3.5-flash): both priced by their own rates, no note."""
    for version, main, helper in (("0.61.0", "gemini-3.8-flash", "gemini-3.5-flash-lite"),
                                  ("0.47.0", "gemini-3.5-flash", "gemini-3.1-flash-lite")):
        (path,) = CLI.glob(f"loopback_{version}_json_auto-tool_rc0.log")
        assert set(BILLED[path.stem]) == {main, helper}
        d, _ = run(lines_of(path), 0, model="auto")
        assert d.state.model == main and d.state.model_note is None
        # main: (9000 + 9500 − 8000) input, 8000 cached, (30 + 20) output; helper: 1200 input, 20 output
        r, h = TABLE.rates(main), TABLE.rates(helper)
        want = (10500 * r.input + 8000 * r.cache_read + 50 * r.output + 1200 * h.input + 20 * h.output) * 1e-6
        assert d.state.spend_usd == pytest.approx(want, abs=1e-12)


def test_a_flash_model_asked_for_is_estimated_as_the_dearer_flash_it_may_run_as():
    """0.47 with -m gemini-2.5-flash sent every request to gemini-3.5-flash (5x the input rate): the
    estimate before the usage came is priced as that one, so it does not under-read."""
    (path,) = CLI.glob("loopback_0.47.0_stream-json_429-after_rc1.log")
    assert set(BILLED[path.stem]) == {"gemini-3.5-flash"}
    lines = lines_of(path)
    d, running = run(lines, 1, model="gemini-2.5-flash")
    assert running[usage_line(lines) - 1] >= 0.8 * billed_usd(path)
    assert d.state.model == "gemini-3.5-flash"


# ---------------------------------------------------------------- refused work


@pytest.mark.parametrize("path", [p for p in LOOPBACK if "429-first" in p.name], ids=lambda p: p.name)
def test_a_429_before_any_output_costs_nothing(path):
    d, running = run(lines_of(path), rc_of(path), model="gemini-2.5-flash")
    assert d.state.spend_usd == 0.0 and running[-1] == 0.0 and d.state.input_tokens == 0


def test_a_result_without_stats_after_a_429_takes_the_turn_back():
    """Hand-built from the real 0.61 429 result (its stats removed: a CLI that leaves them out, the
    experimental ADK path): the estimate of the refused call is taken back."""
    (path,) = CLI.glob("loopback_0.61.0_stream-json_429-first_rc173.log")
    lines = lines_of(path)
    k = usage_line(lines)
    ev = json.loads(lines[k])
    del ev["stats"]
    lines[k] = json.dumps(ev)
    d, running = run(lines, 173, model="gemini-2.5-flash")
    assert running[k - 1] > 0 and d.state.spend_usd == 0.0 and running[-1] == 0.0
    other = json.loads(lines[k])
    other["error"]["message"] = "[API Error: Internal error]"
    lines[k] = json.dumps(other)
    d, running = run(lines, 1, model="gemini-2.5-flash")
    assert d.state.spend_usd == running[k - 1] > 0  # not a refusal: the estimate stands


# ---------------------------------------------------------------- the json document


def test_a_response_spread_over_lines_is_skipped_and_its_stats_read():
    """Real (agent-chat-hub): the response string hard-wrapped at the terminal's width, so the
    document is not JSON as a whole; stderr text before it."""
    path = GEMINI / "agentchathub_output-json_wrapped_3.1-pro-preview_success.txt"
    d, _ = run(lines_of(path))
    s = d.state
    # 18983 prompt, 0 cached, total 20372 − 18983 = 1389 output (thoughts report 0 but total has them)
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens) == (18983, 1389, 0)
    assert s.spend_usd == pytest.approx((18983 * 2.0 + 1389 * 12.0) * 1e-6, abs=1e-12)
    assert (s.model, s.session_id, s.iterations) == ("gemini-3.1-pro-preview", "fdbb7d96-b919-45c9-8586-b9ef75035dc3", 1)


def test_a_model_without_a_published_price_says_so():
    d, _ = run(lines_of(GEMINI / "agentchathub_output-json_wrapped_pro-default-3-requests_success.txt"))
    assert d.state.model == "gemini-pro-default" and "no published price" in d.state.model_note
    assert d.state.iterations == 3
    d, _ = run(lines_of(GEMINI / "gemicord_stream-json_tool-use_success.jsonl"))  # stats name no model
    assert "alias 'auto-gemini-2.5'" in d.state.model_note
    d, _ = run(lines_of(GEMINI / "anyteam_0.39.0_stream-json_auto-two-models_success.jsonl"))  # they do
    assert d.state.model_note is None and d.state.model == "gemini-3-flash-preview"


def test_a_large_response_is_not_kept():
    """Hand-built from the real 0.61 json output: a 4 MB response. What the state keeps of the open
    document stays small, and the digest is the same."""
    (path,) = CLI.glob("loopback_0.61.0_json_auto-tool_rc0.log")
    lines = lines_of(path)
    i = next(i for i, x in enumerate(lines) if x.startswith('  "response": '))
    big = list(lines)
    big[i] = '  "response": ' + json.dumps("x\"\\y\n" * 1_000_000) + ","
    d = make_digest("gemini", TABLE, model="auto")
    for line in big[: i + 3]:
        d.push(line)
    assert d.json_doc is not None and len(d.json_doc) < 1000
    for line in big[i + 3:]:
        d.push(line)
    d.finish(0)
    want, _ = run(lines, 0, model="auto")
    assert d.state.model_dump_json() == want.state.model_dump_json()
    assert d.state.spend_usd == pytest.approx(billed_usd(path), abs=TOL)


def test_a_document_over_the_cap_is_set_aside():
    """Hand-built: stats with 10 000 models (no real CLI has that many): set aside, never counted
    past its cap; the outcome is then the exit code's."""
    lines = ["{", '  "response": "",', '  "stats": {', '    "models": {']
    lines += [f'      "m{i}": {{"tokens": {{"prompt": 1}}}},' for i in range(10_000)]
    lines += ["    }", "  }", "}"]
    d, _ = run(lines, 0)
    assert d.state.set_aside == 1 and "KB" in d.state.set_aside_note and d.json_doc is None
    assert d.state.spend_usd == 0.0  # nothing of it counted: as if the run ended without its output
    assert d.state.outcome == "failure" and "without a result" in d.state.failure_reason
    assert JSON_DOC_MAX >= 16 * 1024


def test_a_brace_of_something_else_does_not_swallow_stream_json():
    """Hand-built: a lone "{" (a Node object printed to stderr) before real stream-json lines."""
    lines = lines_of(GEMINI / "agentcmd_0.11.0_stream-json_simple_success.jsonl")
    d, _ = run(["{", "  code: 429,"] + lines)
    want, _ = run(lines)
    assert (d.state.spend_usd, d.state.outcome) == (want.state.spend_usd, "success")


JSON_DOCS = [p for p in ALL if ("_json_" in p.name or "output-json" in p.name) and "429" not in p.name]


@pytest.mark.parametrize("path", JSON_DOCS, ids=lambda p: p.name)
@pytest.mark.parametrize("after", ["Warning: Limited color support detected, falling back to 16 colors.",
                                   "Ripgrep is not available. Falling back to GrepTool.", " ", "}"])
def test_the_document_ends_at_its_closing_brace_whatever_follows_it_on_the_line(path, after):
    """Issue 38: the CLI's stderr merged into the log lands on the line of the closing brace
    (`}Warning: Limited color support detected …`). Hand-built from each real json log: that line
    joined with stderr text. It used to read as "ended inside its JSON output": 0 tokens, $0.00, failed."""
    lines = lines_of(path)
    want, _ = run(lines, rc_of(path))
    k = usage_line(lines)
    got, _ = run(lines[:k] + ["}" + after] + lines[k + 1:], rc_of(path))
    assert want.state.spend_usd > 0 and want.state.outcome == "success"
    assert (got.state.spend_usd, got.state.outcome, got.state.iterations) == \
        (want.state.spend_usd, want.state.outcome, want.state.iterations)


def test_a_document_cut_short_fails_the_run():
    (path,) = CLI.glob("loopback_0.61.0_json_auto-tool_rc0.log")
    lines = lines_of(path)
    d, _ = run(lines[:-3], 0)  # killed while writing it
    assert d.state.outcome == "failure" and "cut short" in d.state.failure_reason


@pytest.mark.skipif(not HAS_DOC_FIELD, reason="DigestState has no json_doc field yet (the lead adds it)")
@pytest.mark.parametrize("path", [p for p in ALL if "json_" in p.name or p.suffix in (".json", ".txt")]
                         + [p for p in ALL if p.suffix == ".jsonl"], ids=lambda p: p.name)
def test_a_resume_at_every_line_boundary_ends_in_the_same_state(path):
    """The committed state (JSON) after any line, resumed: the same end, a json document open
    across the cut included."""
    lines = lines_of(path)
    whole, _ = run(lines, rc_of(path))
    want = whole.state.model_dump_json()
    for k in range(len(lines) + 1):
        first = make_digest("gemini", TABLE)
        for line in lines[:k]:
            first.push(line)
        again = make_digest("gemini", TABLE, first.state.model_dump_json())
        for line in lines[k:]:
            again.push(line)
        again.finish(rc_of(path))
        assert again.state.model_dump_json() == want, f"cut after line {k}"


# ---------------------------------------------------------------- long context, hostile numbers


def test_the_long_context_tier_is_chosen_per_request():
    """Hand-built from the real agentchathub two-model output: gemini-3.1-pro-preview's prompt
    raised to 450 000 tokens. Over 3 requests (150 000 each) the short tier applies; over 1, the long."""
    path = GEMINI / "agentchathub_output-json_wrapped_two-models_success.txt"
    text = path.read_text()
    for requests, tier in ((3, "short"), (1, "long")):
        t = text.replace('"prompt": 19577', '"prompt": 450000').replace('"total": 20096', '"total": 450519')
        t = t.replace('"totalRequests": 1,\n          "totalErrors"', f'"totalRequests": {requests},\n          "totalErrors"', 1)
        d, _ = run(t.split("\n"))
        pro = TABLE.rates("gemini-3.1-pro-preview")
        r = pro if tier == "short" else pro.long
        other = TABLE.cost_tokens("gemini-pro-default", 45387, 48720 - 45387, 0, 0, requests=2)
        assert d.state.spend_usd == pytest.approx(other + (450000 * r.input + 519 * r.output) * 1e-6, abs=1e-12), tier
    # stream-json gives no request counts: its sums are spread over the main-loop calls it showed
    lines = lines_of(GEMINI / "gemicord_stream-json_tool-use_success.jsonl")  # 2 calls
    k = usage_line(lines)
    ev = json.loads(lines[k])
    ev["stats"].update(input_tokens=300_000, total_tokens=300_553, cached=0, input=300_000)
    lines[k] = json.dumps(ev)
    d, _ = run(lines)
    r = TABLE.rates("auto-gemini-2.5")  # 150 000 a call: the short tier
    assert d.state.spend_usd == pytest.approx((300_000 * r.input + 553 * r.output) * 1e-6, abs=1e-12)


@pytest.mark.parametrize("bad", ["1" + "0" * 400, "1e308", "-5", '"9000"', "1.5", "true", "NaN"])
def test_a_hostile_number_in_the_stats_sets_the_line_aside(bad):
    """Hand-built from the real lines: one count in the stats replaced. Nothing of the line counts
    (not its $0, not its outcome): the estimate stands, and the run ended without a result."""
    lines = lines_of(GEMINI / "anyteam_0.39.0_stream-json_auto-two-models_success.jsonl")
    k = usage_line(lines)
    lines[k] = lines[k].replace('"input_tokens":2742', f'"input_tokens":{bad}')
    d, running = run(lines, 0)
    assert d.state.set_aside == 1 and d.state.set_aside_note
    assert d.state.spend_usd == running[k - 1] > 0 and math.isfinite(d.state.spend_usd)
    assert not d.state.result_seen and d.state.outcome == "failure" and "without a result" in d.state.failure_reason
    # the same in a json document
    text = (GEMINI / "agentcmd_0.11.0_output-json_multi-model_success.json").read_text()
    d, _ = run(text.replace('"prompt": 15526', f'"prompt": {bad}').split("\n"), 1)
    assert d.state.set_aside == 1 and d.state.spend_usd == 0.0 and d.state.outcome == "failure"
