"""What a fresh machine lacks that some tests need, and the one command that brings each in. The end
of a run groups its skips by it (tests/conftest.py, pytest_terminal_summary), so a user who reads
"248 skipped" is told why and what to type; a skip that no command brings in (root, a small machine,
another claude session) is listed with its own reason. Where CI is set these tests fail instead."""
from __future__ import annotations

from collections import Counter

AGENT_CLIS = "bash tests/agentcli/install.sh"
VIEWS = "apt-get install chromium chromium-driver tmux"
SLURM = "apt-get install --no-install-recommends slurmctld slurmd slurm-client munge iproute2 util-linux"
TMUX_MISSING = "tmux is not installed (apt-get install tmux)"

# (what is missing, the one command, what a skip's reason says when that is why: its own command)
NEEDS = (
    ("the agent CLIs (Claude Code, Codex, Gemini CLI: tests/agentcli)", AGENT_CLIS, ("tests/agentcli/install.sh",)),
    ("Chromium, its driver and tmux (the page and `res top` as a person sees them)", VIEWS,
     ("apt-get install chromium", "apt-get install tmux")),
    ("Slurm (the cluster tier: tests/slurm)", SLURM, ("apt-get install slurm", "apt-get install iproute2")),
)
OTHER_SHOWN = 8  # distinct other reasons listed; pytest -rs lists them all


def reason_of(longrepr) -> str:
    """A skip report's reason: pytest keeps it as (file, line, "Skipped: why")."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def summary(reasons: list[str]) -> list[str]:
    """The lines that end a run with skips: how many for want of each thing, with its command; then
    the other reasons, most frequent first."""
    if not reasons:
        return []
    wanting: Counter = Counter()
    other: Counter = Counter()
    for why in reasons:
        need = next((i for i, (_, _, says) in enumerate(NEEDS) if any(m in why for m in says)), None)
        if need is None:
            other[why] += 1
        else:
            wanting[need] += 1
    width = len(str(len(reasons)))
    lines = [f"{len(reasons)} skipped; what each needs, and the one command that brings it in:"]
    for i, (what, command, _) in enumerate(NEEDS):
        if wanting[i]:
            lines.append(f"  {wanting[i]:>{width}} need {what}: {command}")
    for why, n in other.most_common(OTHER_SHOWN):
        lines.append(f"  {n:>{width}} skipped: {why}")
    if len(other) > OTHER_SHOWN:
        lines.append(f"  {'':>{width}} and {len(other) - OTHER_SHOWN} other reasons: pytest -rs lists every skip")
    return lines
