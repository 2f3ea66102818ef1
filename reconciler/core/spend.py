"""What a budget and `res status` read of a session's digest state, whichever agent wrote it: the
running spend a `--max-cost-usd` budget is checked against, whether the spend is still the digest's
own estimate, and output in no format the digest knows. Apart from the digests themselves
(core/digest.py, codex.py, gemini.py) so that the planner and the status read the state without
the line parsers.
"""
from __future__ import annotations

from reconciler.core.agentclis import CLIS, behaviour
from reconciler.core.digestbase import DigestState

# Calls Claude Code makes that never show as assistant lines (titles, summaries, checks: a Haiku
# model), which only the result's modelUsage shows: 0.27 % and 0.50 % of the spend in the two real
# transcripts that have them (tests/fixtures/claude/real). Counted on the running estimate as 2 %.
BACKGROUND_MARGIN = 0.02
# Output in no format the digest knows (a session without --output-format stream-json, another
# CLI): after this many lines with not one event understood, each line counts at UNKNOWN_LINE_USD
# for a budget (a model call cost 0.4–12 cents and took 2–30 lines in the real transcripts), so
# that a budget still bites and the spend is never a silent $0.00.
UNKNOWN_AFTER_LINES = 20
UNKNOWN_LINE_USD = 0.01


def running_spend_usd(state: DigestState | None) -> float:
    """What a budget checks mid-run: the spend so far as the agent reported it or as the lines add
    up, whichever is larger, with the margin for calls no line shows. Never below what was reported."""
    if state is None:
        return 0.0
    # Only Claude Code makes model calls its output never shows (its module's UNSHOWN_CALLS); the
    # others' reported usage is the whole of it.
    margin = BACKGROUND_MARGIN if state.agent in CLIS and behaviour(state.agent).UNSHOWN_CALLS else 0.0
    running = max(state.spend_usd, state.estimate_usd * (1 + margin))
    if unknown_format(state):
        running = max(running, state.lines * UNKNOWN_LINE_USD)
    return running


def unknown_format(state: DigestState | None) -> bool:
    """An agent session whose output matched no event of its format in UNKNOWN_AFTER_LINES lines."""
    return (state is not None and state.agent != "none" and state.recognized == 0
            and state.lines >= UNKNOWN_AFTER_LINES)


def spend_is_estimated(state: DigestState | None) -> bool:
    """The spend is the digest's own estimate: no result has reported it yet, or the agent has worked
    on since the last one."""
    return state is not None and state.agent != "none" and (not state.result_seen or state.turn_calls > 0)
