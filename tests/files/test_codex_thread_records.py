"""Files tier: a resumed Codex thread whose rollout `res run` could not read (issue 38) counts each
invocation once from res's own records: the real CLI 0.158.0's output of one thread (fresh, `exec
resume` twice, `exec fork`; tests/fixtures/codex/cli) digested by the loop's Streamer against a real
state.db, the earlier invocations live or already pruned into history."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconciler.apply.attach import Streamer
from reconciler.config.paths import Paths
from reconciler.core.models import JobRecord, Phase, Request, copy
from reconciler.core.pricing import load_pricing
from reconciler.recorded.store import Store

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "tests" / "fixtures" / "codex" / "cli"
BILLED = json.loads((CLI / "billed.json").read_text())
TABLE = load_pricing((ROOT / "policies" / "pricing.toml").read_text())
FILES = [f"codex-0.158.0-thread-{n}.jsonl" for n in ("1-fresh", "2-resume", "3-resume", "4-fork")]
THREAD = BILLED[FILES[1]]["request_fields"]["resumes"]  # the thread runs 1-3 continue, and 4 forks


def billed_usd(file: str) -> float:
    model = BILLED[file]["request_fields"]["model"]
    return sum(TABLE.cost_tokens(model, u["input_tokens"] - u["cached_tokens"] - u["cache_write_tokens"],
                                 u["output_tokens"], u["cache_write_tokens"], u["cached_tokens"])
               for u in BILLED[file]["billed"])


def command(file: str, last: bool = False) -> list[str]:
    if "fresh" in file:
        return ["codex", "exec", "--json", "a question"]
    if "fork" in file:
        return ["codex", "exec", "fork", THREAD, "--json", "a forked question"]
    return ["codex", "exec", "resume", *(["--last"] if last else [THREAD]), "--json", "again"]


@pytest.fixture
def loop(tmp_path):
    """A state.db and the loop's Streamer over it, with the logs in tmp_path/logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    store = Store.open(Paths(tmp_path / "state"))
    streamer = Streamer(store, None, "host/1/n/0", lambda job_id, log_dir: logs / f"{job_id}.log")
    streamer.refresh_pricing()
    yield store, streamer, logs
    store.close()


def run(store, streamer, logs, n: int, file: str, last: bool = False) -> JobRecord:
    """Invocation `n` of the thread as a job the loop digests to its end (no usage_before: the
    rollout was not read), then recorded done."""
    fields = BILLED[file]["request_fields"]
    req = Request(id=f"r-{n}", title="codex", mem_gb=1, est_s=600, created=float(n), agent="codex",
                  cmd=command(file, last), model=fields["model"], model_from=fields["model_from"])
    shutil.copyfile(CLI / file, logs / f"r-{n}.log")
    rec = JobRecord(request=req, phase=Phase.running, started=100.0 * n, attached_by="host/1/n/0")
    done = copy(streamer._ingest(rec, final=True, rc=0), phase=Phase.done, ended=100.0 * n + 50)
    assert store.put(done)
    return done


def test_each_invocation_counts_once_from_the_threads_earlier_records(loop):
    store, streamer, logs = loop
    spent = []
    for n, file in enumerate(FILES, start=1):
        if n == 3:
            assert store.prune(ids=["r-1", "r-2"]) == ["r-1", "r-2"]  # its earlier invocations: in history now
        rec = run(store, streamer, logs, n, file)
        assert rec.digest.spend_usd == pytest.approx(billed_usd(file), abs=1e-6), file
        if n > 1:  # the figure res recorded is the one the rollout would have given
            assert list(rec.digest.records_before[1:]) == BILLED[file]["request_fields"]["usage_before"][:4]
        spent.append(rec.digest.spend_usd)
    assert sum(spent) == pytest.approx(sum(billed_usd(f) for f in FILES), abs=1e-6)
    assert store.get("r-4").digest.records_before[0] == ""  # a fork: its new thread starts from it


def test_resume_last_is_looked_up_by_the_thread_its_stream_names(loop):
    store, streamer, logs = loop
    run(store, streamer, logs, 1, FILES[0])
    rec = run(store, streamer, logs, 2, FILES[1], last=True)
    assert rec.digest.records_before == (THREAD, *BILLED[FILES[1]]["request_fields"]["usage_before"][:4])
    assert rec.digest.spend_usd == pytest.approx(billed_usd(FILES[1]), abs=1e-6)


def test_only_earlier_invocations_of_the_same_thread_count(loop):
    """A later record of the thread (started after this one) and another thread's are not this
    invocation's "before": with only those, its total counts whole, as before."""
    store, streamer, logs = loop
    later = run(store, streamer, logs, 5, FILES[0])  # the thread's first run, recorded as started later
    assert later.digest.session_id == THREAD
    other = copy(later, request=copy(later.request, id="r-6"), started=10.0,
                 digest=later.digest.model_copy(update={"session_id": "another-thread"}))
    assert store.put(other)
    rec = run(store, streamer, logs, 2, FILES[1])
    assert rec.digest.records_before is None
    assert rec.digest.spend_usd > 1.5 * billed_usd(FILES[1])  # the thread's whole total: an over-read
