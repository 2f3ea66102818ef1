"""The gate in an interactive session (issue 37 item 2): the real Claude Code TUI (pinned,
tests/agentcli/install.sh) in a real terminal (tmux, 150x45), default permission mode with the
user's allow rule for their test command, its scripted model (on loopback) asking for that command.
Once without the gate and once with `res hook install --agent claude --user` and a running loop:

- the person is never shown a permission prompt, with the gate as without it (the rewrite carries
  Claude Code's own allow, because the session's rules let the line run unasked);
- with the gate the command ran as a res job, and the job's output is the command's output in the
  session: its transcript (ctrl+o, as a person opens it) shows the command as the model asked for
  it, the test run's own lines between `r-N started` and `r-N done rc=0`.

What the terminal showed is kept (the test's tmp dir, and $RES_TEST_ARTIFACTS when set). A person who
has used Claude Code here before: onboarding done, the folder trusted, the loopback key approved,
manual (default) permission mode chosen in their settings (2.1.328's TUI otherwise starts in auto
mode, whose server-side check a loopback API cannot give).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests"))
import skips  # noqa: E402
from anthropic_api import AnthropicAPI, Turn  # noqa: E402
from clihelp import keep_artifact as _keep, res, wait_for  # noqa: E402,F401  (res: the fixture)
from gate_harness import AGENTS  # noqa: E402
from test_claude_cli import cli_env  # noqa: E402
from gate_harness import gate_project, loop  # noqa: E402,F401  (loop: the fixture)
from test_gate_modes import LINE, RULE, U, _environ  # noqa: E402

pytestmark = [pytest.mark.systemd,
              pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"),
                                 reason=skips.TMUX_MISSING)]  # CI installs it (.ci/run): there, missing fails

DONE_TEXT = "All done here."
# What Claude Code shows when it asks the person about a command (not its other dialogs, such as
# the offer to make auto mode the default once a turn ends).
PERMISSION_PROMPT = re.compile(r"Do you want to proceed\?|don.t ask again for|requires approval", re.I)



def _session(base: Path, proj: Path, gated: bool, environ: dict, allow: bool = True) -> tuple[list[str], str]:
    """Every screen the terminal showed until the turn ended (or a permission prompt was shown), and
    the transcript view after it ("" when it asked)."""
    name = ("gated" if gated else "plain") + ("" if allow else "-no-rule")
    home = base / name
    home.mkdir()
    claude = AGENTS["claude"].installed()
    with AnthropicAPI() as api:
        api.script(Turn(usage=U, text="Running the tests.", tool="Bash",
                        tool_input={"command": LINE, "description": "Run the tests"}), Turn(usage=U, text=DONE_TEXT))
        env = cli_env(home, api)
        env.update(environ)
        config = Path(env["CLAUDE_CONFIG_DIR"])
        (config / "settings.json").write_text(json.dumps({"permissions": {"defaultMode": "default", "allow": [RULE] if allow else []}},
                                                         indent=2) + "\n")
        key = env["ANTHROPIC_API_KEY"]
        (config / ".claude.json").write_text(json.dumps({
            "hasCompletedOnboarding": True, "theme": "dark",
            "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
            "projects": {str(proj): {"hasTrustDialogAccepted": True, "allowedTools": []}}}))
        if gated:  # as a user puts it there
            r = subprocess.run(["res", "hook", "install", "--agent", "claude", "--user"], env=env, cwd=str(proj),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, (r.stdout, r.stderr)
        tmux = ["tmux", "-L", f"restui-{os.getpid()}-{name}", "-f", "/dev/null"]  # a server of this test's own
        screens: list[str] = []
        try:
            subprocess.run([*tmux, "new-session", "-d", "-s", "cc", "-x", "150", "-y", "45", "-c", str(proj),
                            "env", "-i", *[f"{k}={v}" for k, v in env.items()], "TERM=xterm-256color", str(claude),
                            "Please check that this project's tests pass."], check=True, timeout=30)

            def screen() -> str:
                r = subprocess.run([*tmux, "capture-pane", "-p", "-t", "cc"], capture_output=True, text=True, timeout=30)
                screens.append(r.stdout)
                return r.stdout

            wait_for(lambda: DONE_TEXT in screen() or PERMISSION_PROMPT.search(screens[-1]), "the turn ends", 180, step=0.5)
            if PERMISSION_PROMPT.search(screens[-1]):
                return screens, ""
            subprocess.run([*tmux, "send-keys", "-t", "cc", "C-o"], check=True, timeout=30)  # the transcript
            wait_for(lambda: "detailed transcript" in screen(), "the transcript is shown", 30, step=0.3)
            transcript = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-t", "cc", "-S", "-200"],
                                        capture_output=True, text=True, timeout=30).stdout
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
    return screens, transcript


def test_an_allowed_test_command_in_the_tui_runs_as_a_job_with_no_prompt(loop, tmp_path):
    base = Path(tempfile.mkdtemp(prefix="res-tui-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        for gated in (False, True):
            screens, transcript = _session(base, proj, gated, _environ())
            name = "gated" if gated else "plain"
            _keep(f"tui-{name}-screens.txt", "\n\n==== next capture\n".join(screens), tmp_path)
            _keep(f"tui-{name}-transcript.txt", transcript, tmp_path)
            asked = [s for s in screens if PERMISSION_PROMPT.search(s)]
            assert not asked, f"{name}: the person was asked:\n{asked[0]}"
            assert DONE_TEXT in screens[-2] or DONE_TEXT in transcript, screens[-1]
            # the command as the model asked for it, and the test run's own output as its result
            assert f"Bash({LINE})" in transcript, transcript
            assert re.search(r"2 passed", transcript), transcript
            jobs = re.findall(r"(r-\d+) started; log .*?\n(?:.*\n)*?.*2 passed.*\n(?:.*\n)*?.*\1 done rc=0", transcript)
            if gated:
                assert jobs, f"not run as a res job:\n{transcript}"
                (job,) = set(jobs)
                st = loop.status(job)
                assert st["state"] == "done" and st["rc"] == 0, st
            else:
                assert not jobs and " started; log " not in transcript, transcript
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_with_no_rule_the_person_is_asked_about_their_own_command_as_without_the_gate(loop, tmp_path):
    """The other side: a line no rule covers is not rewritten, so the prompt the person sees (and the
    check above looks for) is Claude Code's own, about the command the model asked for."""
    base = Path(tempfile.mkdtemp(prefix="res-tui-", dir="/var/tmp"))
    try:
        proj = gate_project(base)
        screens, _ = _session(base, proj, True, _environ(), allow=False)
        _keep("tui-gated-no-rule-screens.txt", "\n\n==== next capture\n".join(screens), tmp_path)
        shown = screens[-1]
        assert PERMISSION_PROMPT.search(shown) and LINE in shown and "res run" not in shown, shown
        assert not [j for j in loop.status_all()["jobs"] if j["kind"] == "job"]  # nothing ran
    finally:
        shutil.rmtree(base, ignore_errors=True)
