"""The Codex digest on real output: transcripts copied byte for byte from public repositories
(tests/fixtures/codex, SOURCES.md) and the real CLI's own output against a scripted loopback API
(tests/fixtures/codex/cli, with what the server billed in billed.json; produced by
tests/agentcli/test_codex_cli.py). What each checks:

- the final spend is the pricing table's price of the usage the agent itself reported, at the model
  the session really used, within 1e-6 (for the CLI's output: of what the server billed, request by
  request);
- the running spend (running_spend_usd after each line) is never below 0.8x of what was spent so far
  and, once the usage is reported, equals it;
- a resumed or forked thread counts each invocation once; a refused turn costs $0.00; a usage count
  that is no count sets its line aside.

The few lines built by hand are for cases no real output shows, and say so."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.core.codex import BASE_INPUT_TOKENS, CodexDigest
from reconciler.core.digest import make_digest
from reconciler.core.spend import running_spend_usd
from reconciler.core.pricing import load_pricing

ROOT = Path(__file__).resolve().parents[2]
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
CODEX = ROOT / "tests" / "fixtures" / "codex"
CLI = CODEX / "cli"
BILLED = json.loads((CLI / "billed.json").read_text())

# The model each public transcript's session used: agentcmd's rollout of the same run names
# gpt-5-codex; lezli01/vincent's captures name none, and ran with no -m: their release's default
# (core/agents.CODEX_DEFAULT_MODELS, measured on the real CLIs). Their failure names gpt-5.6-sol.
REAL = {
    "agentcmd_0.46.0_command-exec_success.jsonl": "gpt-5-codex",
    "vincent_0.142.5_command-exec_success.jsonl": "gpt-5.5",
    "vincent_0.147.0_reasoning_success.jsonl": "gpt-5.6-sol",
    "vincent_0.150.1_mcp-tool-failed_turn-completed.jsonl": "gpt-5.6-sol",
    "vincent_0.150.1_plan-todo-file-change_success.jsonl": "gpt-5.6-sol",
    "vincent_0.150.1_resume.jsonl": "gpt-5.6-sol",
}


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def replay(lines: list[str], model: str | None, rc: int | None = 0, **session):
    """The digest after the whole output, and (line, running spend, reported yet) after each line."""
    d = make_digest("codex", TABLE, model=model)
    assert isinstance(d, CodexDigest)
    d.session(**session)
    after = []
    for line in lines:
        d.push(line)
        after.append((line, running_spend_usd(d.state), d.state.result_seen))
    d.finish(rc)
    return d, after


def reported_price(line: str, model: str, requests: int = 1, before=(0, 0, 0, 0)) -> float:
    u = json.loads(line)["usage"]
    inp, cached, out = u["input_tokens"] - before[0], u["cached_input_tokens"] - before[1], u["output_tokens"] - before[2]
    cw = u.get("cache_write_input_tokens", 0) - before[3]
    return TABLE.cost_tokens(model, inp - cached - cw, out, cw, cached, requests=requests)


# ---------------------------------------------------------------- public transcripts


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_transcript_costs_the_price_of_the_usage_it_reported(name):
    lines = lines_of(CODEX / name)
    d, after = replay(lines, REAL[name])
    done = next(i for i, line in enumerate(lines) if '"turn.completed"' in line)
    want = reported_price(lines[done], REAL[name], requests=d.state.iterations)
    assert d.state.outcome == "success"
    assert d.state.spend_usd == pytest.approx(want, abs=1e-6)
    assert want == pytest.approx(reported_price(lines[done], REAL[name]), abs=1e-12)  # no prompt over 272K
    # just before the usage came, every call had been made: the estimate is at least 0.8x of it
    assert after[done - 1][1] >= 0.8 * want, (after[done - 1][1], want)
    for line, running, reported in after[done:]:
        assert reported and running == pytest.approx(want, abs=1e-9)


def test_the_spend_of_the_real_transcripts_before_and_after(capsys):
    """The figures of the report: the spend with no model known (the dearest rates, as before the
    model was read from the session's configuration) over the spend at the model really used."""
    for name, model in sorted(REAL.items()):
        lines = lines_of(CODEX / name)
        right = replay(lines, model)[0].state.spend_usd
        unknown = replay(lines, None)[0].state.spend_usd
        assert unknown > right
        print(f"{name}: {unknown:.6f} / {right:.6f} = {unknown / right:.2f}x")


def test_the_model_of_a_session_with_none_named_says_why_it_is_dear():
    lines = lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl")
    d, _ = replay(lines, None, model_note="no model named, and codex 0.172.0's default model is not known to res (give -m)")
    assert "0.172.0" in d.state.model_note
    d, _ = replay(lines, "gpt-5-codex")
    assert d.state.model_note is None


def test_a_refused_turn_costs_nothing():
    """vincent 0.142.5: the API answered HTTP 400 before any output (`turn.failed` with no usage)."""
    lines = lines_of(CODEX / "vincent_0.142.5_turn-failed.jsonl")
    d, after = replay(lines, "gpt-5.6-sol", rc=1)
    assert (d.state.outcome, d.state.spend_usd, d.state.estimate_usd) == ("failure", 0.0, 0.0)
    assert running_spend_usd(d.state) == 0.0
    assert max(r for _, r, _ in after) > 0  # while the turn was under way it counted


def test_a_resumed_thread_whose_earlier_usage_is_unknown_counts_whole():
    """vincent's resume capture: nothing known of the thread before it, so its total counts whole
    (an over-read at worst, never an under-read)."""
    lines = lines_of(CODEX / "vincent_0.150.1_resume.jsonl")
    d, _ = replay(lines, "gpt-5.6-sol")
    assert d.state.spend_usd == pytest.approx(reported_price(lines[-1], "gpt-5.6-sol"), abs=1e-9)


# ---------------------------------------------------------------- the real CLI's output


def cli_case(file: str):
    b = BILLED[file]
    f = b["request_fields"]
    d, after = replay(lines_of(CLI / file), f.get("model"), rc=b["rc"], usage_before=f.get("usage_before"),
                      resumes=f.get("resumes"), model_note=None if f.get("model") else f.get("model_from"))
    model = b["requested"][0] if b["requested"] else f.get("model")
    billed = sum(TABLE.cost_tokens(model, u["input_tokens"] - u["cached_tokens"] - u["cache_write_tokens"],
                                   u["output_tokens"], u["cache_write_tokens"], u["cached_tokens"]) for u in b["billed"])
    return b, d, after, billed


@pytest.mark.parametrize("file", sorted(BILLED))
def test_the_real_cli_costs_what_the_server_billed(file):
    b, d, after, billed = cli_case(file)
    assert all(m == b["request_fields"].get("model") for m in b["requested"])  # res read the model the CLI used
    if b["rc"] == 0:
        assert d.state.outcome == "success"
        assert d.state.spend_usd == pytest.approx(billed, abs=1e-6)
        unreported = [r for _, r, rep in after if not rep]
        if "long" not in file:  # a fresh thread's 200K prompts show nothing of their size (see below)
            assert unreported[-1] >= 0.8 * billed, (unreported[-1], billed)
        assert all(r == pytest.approx(billed, abs=1e-9) for _, r, rep in after if rep)
    else:
        assert d.state.outcome == "failure"
        assert d.state.spend_usd >= 0.8 * billed
        if not b["billed"]:
            assert d.state.spend_usd == 0.0


@pytest.mark.parametrize("version", sorted({f.split("-")[1] for f in BILLED if "thread-" in f}))
def test_each_invocation_of_a_resumed_or_forked_thread_counts_once(version):
    """A thread: a fresh run, `exec resume` twice, `exec fork`: its turn.completed usage is the
    thread's running total (the fork's too, under a new thread id). Each invocation costs what the
    server billed for it, and the four add up to all it billed; read whole (no usage_before), the
    resumed ones would count every earlier run again."""
    files = sorted(f for f in BILLED if f.startswith(f"codex-{version}-thread-"))
    assert len(files) == 4
    total = total_billed = whole = 0.0
    for file in files:
        b, d, _, billed = cli_case(file)
        assert d.state.spend_usd == pytest.approx(billed, abs=1e-6), file
        total += d.state.spend_usd
        total_billed += billed
        whole += replay(lines_of(CLI / file), b["request_fields"]["model"])[0].state.spend_usd
    assert total == pytest.approx(total_billed, abs=1e-6)
    assert whole > 2 * total  # what the digest read before: 1 + 2 + 3 + 4 runs' worth


@pytest.mark.parametrize("version", sorted({f.split("-")[1] for f in BILLED if "thread-" in f}))
def test_without_the_rollout_each_invocation_counts_once_from_res_own_records(version):
    """Issue 38: the same real thread (fresh, `exec resume` twice, `exec fork`) when `res run` could not
    read the rollout (the log copied elsewhere, $CODEX_HOME not readable): no usage_before. res saw
    the earlier invocations itself: the last total it recorded of the thread (`thread_total`) is
    taken off, it is the figure the rollout gave, and each invocation costs what the server billed
    (not 2.2-2.3x, every earlier run counted again)."""
    files = sorted(f for f in BILLED if f.startswith(f"codex-{version}-thread-"))
    recorded: list[tuple[str, tuple]] = []  # (thread id, thread_total) of each invocation, as res records them
    for file in files:
        b, want, _, billed = cli_case(file)  # with the rollout's usage_before: the reference
        fields = b["request_fields"]
        kind = file.rsplit("-", 1)[1].removesuffix(".jsonl")  # fresh, resume, fork
        source = fields.get("resumes") or (recorded[0][0] if kind == "fork" else None)

        def earlier(shown, source=source, fork=kind == "fork"):  # what apply/attach.thread_before answers
            found = [total for thread, total in recorded if thread == source]
            return ("" if fork else source, *found[-1]) if found else None

        d, _ = replay(lines_of(CLI / file), fields["model"], earlier=None if kind == "fresh" else earlier)
        assert d.state.spend_usd == pytest.approx(billed, abs=1e-6) == want.state.spend_usd, file
        if kind != "fresh":
            assert list(d.state.records_before[1:]) == fields["usage_before"][:4], file  # the rollout's figure
        recorded.append((d.state.session_id, d.state.thread_total))
        again = make_digest("codex", TABLE, d.state.model_dump_json(), model=fields["model"])
        assert again.state.records_before == d.state.records_before  # kept: a later pass counts from it
    whole, _ = replay(lines_of(CLI / files[2]), BILLED[files[2]]["request_fields"]["model"])
    assert whole.state.spend_usd > 2 * cli_case(files[2])[3]  # what it read before: the thread's whole total


def test_an_earlier_total_res_never_saw_counts_whole():
    """No record of the thread (res never ran its earlier invocations): as before, the thread's total
    counts whole, a conservative over-read; an answer that is no total is not used."""
    file = "codex-0.158.0-thread-2-resume.jsonl"
    lines, model = lines_of(CLI / file), BILLED[file]["request_fields"]["model"]
    plain, _ = replay(lines, model)
    for answer in (None, ("x",), ("t", -1, 0, 0, 0), ("t", 1.5, 0, 0, 0)):
        d, _ = replay(lines, model, earlier=lambda shown, answer=answer: answer)
        assert d.state.spend_usd == plain.state.spend_usd and d.state.records_before is None
    other, _ = replay(lines, model, earlier=lambda shown: ("another-thread", 18000, 2000, 300, 0))
    assert other.state.spend_usd == plain.state.spend_usd  # a total of another thread than the stream's


def test_a_failed_turn_after_model_output_keeps_its_cost():
    b, d, after, billed = cli_case("codex-0.171.0-failed-after-tool.jsonl")
    assert b["rc"] == 1 and len(b["billed"]) == 1  # the first request answered (a tool call), the second 500
    assert d.state.outcome == "failure" and d.state.spend_usd >= 0.8 * billed


def test_the_long_context_tier_is_chosen_per_request():
    """gpt-5.5 (>272K a request pays the long rates): two requests of 200K, 400K in all, pay the
    standard rates; one request of 400K the long ones."""
    _, two, _, billed_two = cli_case("codex-0.171.0-long-two-requests.jsonl")
    _, one, _, billed_one = cli_case("codex-0.171.0-long-one-request.jsonl")
    assert two.state.iterations == 2 and two.state.spend_usd == pytest.approx(billed_two, abs=1e-6)
    assert one.state.iterations == 1 and one.state.spend_usd == pytest.approx(billed_one, abs=1e-6)
    assert billed_one > 1.5 * billed_two


# ---------------------------------------------------------------- built by hand


@pytest.mark.parametrize("bad", ["10" * 200, "1e308", "-5", '"12000"', "true", "1.5", "Infinity", "NaN"])
def test_a_usage_count_that_is_no_count_sets_the_line_aside(bad):
    """Hand-built: no real output has these. Nothing of the line counts (not even its success)."""
    lines = lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl")
    line = lines[-1].replace('"output_tokens":129', f'"output_tokens":{bad}')
    assert line != lines[-1]
    d, _ = replay(lines[:-1] + [line], "gpt-5-codex", rc=None)
    estimate, _ = replay(lines[:-1], "gpt-5-codex", rc=None)
    assert d.state.set_aside == 1 and d.state.set_aside_note.startswith(f"line {len(lines)}: ")
    assert d.state.spend_usd == estimate.state.spend_usd and not d.state.result_seen
    assert d.state.outcome == "failure"  # no turn.completed counted: the exit code decides, and it is unknown


def test_a_resumed_thread_total_below_the_earlier_one_started_afresh():
    """Hand-built: a usage_before larger than the reported total (a thread whose total restarted):
    the total counts whole, never a negative or smaller spend."""
    lines = lines_of(CODEX / "vincent_0.150.1_resume.jsonl")
    d, _ = replay(lines, "gpt-5.6-sol", usage_before=[133712, 113920, 937, 0, 30000],
                  resumes="01a0586e-5a43-7001-9628-cde66a53e993")
    assert d.state.spend_usd == pytest.approx(reported_price(lines[-1], "gpt-5.6-sol"), abs=1e-9)


def test_usage_before_applies_only_to_the_thread_it_was_read_for():
    """Hand-built: the request's usage_before was read for another thread than the one the CLI
    resumed (resume --last raced another run): the total counts whole."""
    lines = lines_of(CODEX / "vincent_0.150.1_resume.jsonl")
    d, _ = replay(lines, "gpt-5.6-sol", usage_before=[10000, 9000, 10, 0, 9000], resumes="another-thread")
    assert d.state.spend_usd == pytest.approx(reported_price(lines[-1], "gpt-5.6-sol"), abs=1e-9)
    d, _ = replay(lines, "gpt-5.6-sol", usage_before=[10000, 9000, 10, 0, 9000],
                  resumes="01a0586e-5a43-7001-9628-cde66a53e993")
    assert d.state.spend_usd == pytest.approx(reported_price(lines[-1], "gpt-5.6-sol", before=(10000, 9000, 10, 0)),
                                              abs=1e-9)


def test_a_resumed_threads_context_counts_on_its_first_call():
    """Hand-built on a real transcript: a resumed thread whose last request's prompt was 120K sends
    that context again with its first call: the estimate before the usage is not the fresh 18K."""
    lines = lines_of(CODEX / "vincent_0.150.1_resume.jsonl")
    fresh, after_fresh = replay(lines[:2], "gpt-5.6-sol", rc=None)
    resumed, after_resumed = replay(lines[:2], "gpt-5.6-sol", rc=None, usage_before=[300000, 250000, 900, 0, 120000],
                                    resumes="01a0586e-5a43-7001-9628-cde66a53e993")
    assert after_fresh[-1][1] == pytest.approx(TABLE.cost_tokens("gpt-5.6-sol", BASE_INPUT_TOKENS))
    assert after_resumed[-1][1] == pytest.approx(TABLE.cost_tokens("gpt-5.6-sol", 120000))


def test_a_turn_completed_without_usage_keeps_the_estimate():
    """Hand-built: a provider that reports no usage (all zero): the spend is the estimate, never $0."""
    lines = lines_of(CODEX / "agentcmd_0.46.0_command-exec_success.jsonl")
    zero = '{"type":"turn.completed","usage":{"input_tokens":0,"cached_input_tokens":0,"output_tokens":0}}'
    d, after = replay(lines[:-1] + [zero], "gpt-5-codex")
    assert d.state.outcome == "success" and d.state.spend_usd == after[-2][1] > 0
