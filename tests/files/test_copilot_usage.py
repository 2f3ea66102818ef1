"""config/agentusage.copilot_session_usage on real files: the session file GitHub Copilot CLI 1.0.102
wrote (tests/fixtures/copilot, two runs of one session) under a COPILOT_HOME, only what was written
since a job started, and nothing read from what is not a plain session file (a link, a FIFO, a session
id that is a path, a line past the limit). The digest's side: tests/pure/test_copilot.py."""
from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from reconciler.config import agentusage
from reconciler.config.agentusage import copilot_session_usage

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "copilot"
SID = "b119262f-b7f4-47f8-91e4-fcc27293636a"
EVENTS = FIX / "copilot-1.0.102-resumed.events.jsonl"


def _at(event_type: str) -> float:
    """When the file's first event of `event_type` was written (epoch)."""
    for line in EVENTS.read_text().splitlines():
        ev = json.loads(line)
        if ev["type"] == event_type:
            return datetime.fromisoformat(ev["timestamp"]).timestamp()
    raise AssertionError(event_type)


@pytest.fixture
def home(tmp_path) -> Path:
    d = tmp_path / "copilot-home" / "session-state" / SID
    d.mkdir(parents=True)
    shutil.copyfile(EVENTS, d / "events.jsonl")
    return tmp_path / "copilot-home"


def test_what_the_session_wrote_since_the_job_started(home):
    env = {"COPILOT_HOME": str(home)}
    records, shutdowns = copilot_session_usage(SID, env, "/", _at("session.start"))
    assert [r["inputTokens"] for r in records] == [1000, 1200, 1500] and len(shutdowns) == 2
    records, shutdowns = copilot_session_usage(SID, env, "/", _at("session.resume"))  # the resumed run's job
    assert [(r["inputTokens"], r["cacheReadTokens"], r["outputTokens"]) for r in records] == [(1500, 1000, 7)]
    assert [s["modelMetrics"]["loop-model"]["usage"]["inputTokens"] for s in shutdowns] == [3700]
    assert copilot_session_usage(SID, env, "/", _at("session.resume") + 3600) == ([], [])


def test_copilot_home_relative_to_the_jobs_directory_and_the_default_under_home(home, tmp_path):
    records, _ = copilot_session_usage(SID, {"COPILOT_HOME": "copilot-home"}, str(tmp_path), 0)
    assert len(records) == 3
    (tmp_path / "h").mkdir()
    os.rename(home, tmp_path / "h" / ".copilot")
    records, _ = copilot_session_usage(SID, {"HOME": str(tmp_path / "h")}, "/", 0)
    assert len(records) == 3


def test_nothing_is_read_from_what_is_not_a_plain_session_file(home, tmp_path):
    env = {"COPILOT_HOME": str(home)}
    assert copilot_session_usage("../" + SID, env, "/", 0) is None
    assert copilot_session_usage(SID + "/..", env, "/", 0) is None
    assert copilot_session_usage("", env, "/", 0) is None
    assert copilot_session_usage("no-such-session", env, "/", 0) is None
    events = home / "session-state" / SID / "events.jsonl"
    real = tmp_path / "elsewhere.jsonl"
    os.rename(events, real)
    events.symlink_to(real)
    assert copilot_session_usage(SID, env, "/", 0) is None
    events.unlink()
    os.mkfifo(events)  # never a hang
    assert copilot_session_usage(SID, env, "/", 0) is None


def test_a_line_past_the_limit_is_skipped_and_the_rest_read(home, monkeypatch):
    monkeypatch.setattr(agentusage, "MAX_LINE", 4096)
    monkeypatch.setattr(agentusage, "CHUNK", 1024)
    events = home / "session-state" / SID / "events.jsonl"
    lines = EVENTS.read_text().splitlines(keepends=True)
    long = '{"type":"session.usage_record","timestamp":"2026-12-08T00:05:40.000Z","data":{"usage":{"inputTokens":9,"x":"' \
        + "y" * 10_000 + '"}}}\n'
    events.write_text("".join(lines[:3]) + long + "".join(lines[3:]))
    records, _ = copilot_session_usage(SID, {"COPILOT_HOME": str(home)}, "/", 0)
    assert [r["inputTokens"] for r in records] == [1000, 1200, 1500]
