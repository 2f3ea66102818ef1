"""The end of a test run that skipped tests (tests/skips.py, printed by tests/conftest.py): each skip
grouped by what this machine lacks, with the one command that brings it in, from the reasons the
skip sites really give (the agent CLIs' as a run without them printed them; the browser's, tmux's
and Slurm's made by their own checks with the tool taken away)."""
from __future__ import annotations

import shutil

import browser
import skips
import slurmcluster
import slurmnodes

# As `python3 -m pytest -rs tests/agentcli` printed them on a machine without the CLIs (issue 38).
AGENT_CLI_REASONS = [
    "Claude Code 2.1.328 is not installed at /tmp/res-agentcli/claude/node_modules/.bin/claude: run "
    "`bash tests/agentcli/install.sh` (RES_AGENTCLI_DIR=/tmp/res-agentcli)",
    "the Codex CLI is not installed at /tmp/res-agentcli/codex/node_modules/.bin/codex (bash tests/agentcli/install.sh codex)",
    "@google/gemini-cli 0.61.0 is not installed at /tmp/res-agentcli/gemini/node_modules/.bin/gemini: run "
    "`bash tests/agentcli/install.sh gemini` (RES_AGENTCLI_DIR=/tmp/res-agentcli)",
    "Gemini CLI 0.47.0 not installed at /tmp/res-agentcli/gemini-0.47/node_modules/.bin/gemini (bash tests/agentcli/install.sh gemini-0.47)",
]


def _views_reasons(monkeypatch) -> list[str]:
    monkeypatch.setattr(browser, "driver", lambda: None)
    no_driver = browser.missing()
    monkeypatch.setattr(browser, "driver", lambda: "/usr/bin/chromedriver")
    monkeypatch.setattr(browser, "chromium", lambda: None)
    return [no_driver, browser.missing(), skips.TMUX_MISSING]


def _slurm_reasons(monkeypatch) -> list[str]:
    real = shutil.which
    monkeypatch.setattr(slurmcluster.os.path, "exists", lambda p: False)
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    no_slurm = slurmcluster.missing()
    monkeypatch.setattr(slurmcluster, "missing", lambda: None)
    no_ip = slurmnodes.missing()
    monkeypatch.setattr(shutil, "which", real)
    return [no_slurm, no_ip]


def test_each_skip_is_counted_under_what_brings_it_in(monkeypatch):
    views, slurm = _views_reasons(monkeypatch), _slurm_reasons(monkeypatch)
    assert all(views) and all(slurm), (views, slurm)
    other = ["needs root to chown", "machine too small to shape a 9 GB budget (3.1 GB available)", "needs root to chown"]
    lines = skips.summary(AGENT_CLI_REASONS * 3 + views + slurm + other)
    assert lines == [
        "20 skipped; what each needs, and the one command that brings it in:",
        "  12 need the agent CLIs (Claude Code, Codex, Gemini CLI: tests/agentcli): bash tests/agentcli/install.sh",
        "   3 need Chromium, its driver and tmux (the page and `res top` as a person sees them): "
        "apt-get install chromium chromium-driver tmux",
        "   2 need Slurm (the cluster tier: tests/slurm): apt-get install --no-install-recommends slurmctld slurmd "
        "slurm-client munge iproute2 util-linux",
        "   2 skipped: needs root to chown",
        "   1 skipped: machine too small to shape a 9 GB budget (3.1 GB available)",
    ], "\n".join(lines)


def test_a_reason_no_command_brings_in_is_listed_as_it_is_and_many_are_cut_short():
    reasons = [f"reason {i}" for i in range(skips.OTHER_SHOWN + 3)]
    lines = skips.summary(reasons)
    assert lines[1:1 + skips.OTHER_SHOWN] == [f"   1 skipped: reason {i}" for i in range(skips.OTHER_SHOWN)]
    assert lines[-1] == "     and 3 other reasons: pytest -rs lists every skip"
    assert skips.summary([]) == []


def test_the_reason_is_read_from_the_report_as_pytest_keeps_it():
    assert skips.reason_of(("tests/x.py", 12, "Skipped: no tmux")) == "no tmux"
    assert skips.reason_of("Skipped: odd") == "odd"
