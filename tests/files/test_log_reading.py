"""Files tier: reading a job's log as it grows (reconciler.runtime.read_output, apply.attach.ingest):
lines longer than one read, a line still being written, a line too long to keep."""
from __future__ import annotations

import json
from pathlib import Path

from reconciler.apply import attach
from reconciler.apply.attach import ingest, load_pricing_files
from reconciler.core.models import JobRecord, Phase, Request
from reconciler.runtime import read_output

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "claude" / "real"


def test_a_line_longer_than_one_read_is_read_whole(tmp_path):
    log = tmp_path / "r-1.log"
    log.write_bytes(b"a" * 5000 + b"\nshort\n")
    assert read_output(log, 0, limit=1024) == (b"a" * 5000 + b"\nshort\n", 5007)
    assert read_output(log, 0, limit=1024, longest=3000) == (b"a" * 3000, 3000)  # cut: never a stall
    assert read_output(log, 3000, limit=1024, longest=3000) == (b"a" * 2000 + b"\nshort\n", 5007)


def test_a_line_still_being_written_is_not_read(tmp_path):
    log = tmp_path / "r-1.log"
    log.write_bytes(b"done\n" + b"b" * 5000)
    assert read_output(log, 0, limit=1024) == (b"done\n", 5)
    assert read_output(log, 5, limit=1024) == (b"", 5)
    assert read_output(tmp_path / "gone.log", 0) == (b"", 0)


def test_an_agent_line_longer_than_a_read_still_counts(tmp_path, monkeypatch):
    """A real assistant line whose tool call writes a whole file (made 3× longer than one read by
    repeating its text: hand-built from a real line) counts its output like any other line."""
    monkeypatch.setattr(attach, "CHUNK", 4096)
    pricing, err = load_pricing_files()
    assert err is None
    lines = [line for line in (REAL / "nightgauge-2.1.223-nopartial-two-bash-calls.jsonl").read_text().split("\n") if line]
    ev = next(json.loads(line) for line in lines if line.startswith('{"type":"assistant"'))
    ev["message"]["content"] = [{"type": "text", "text": "x" * 3 * attach.CHUNK}]
    big = json.dumps(ev, separators=(",", ":"))
    log = tmp_path / "r-1.log"
    log.write_text(lines[0] + "\n" + big + "\n")
    req = Request(id="r-1", title="t", mem_gb=1, est_s=60, created=0, agent="claude", cmd=["claude"])
    out, reached_end = ingest(JobRecord(request=req, phase=Phase.running), log, pricing)
    assert reached_end and out.log_offset == log.stat().st_size
    assert out.digest.lines == 2
    assert out.digest.output_tokens >= 3 * attach.CHUNK / 2  # CHARS_PER_TOKEN: 2 characters a token at most
