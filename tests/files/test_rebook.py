"""Files tier: the loop books each queued job from what history knows at every pass (DESIGN §5.1,
loop/tick.rebook), so a job asked before its command's third run ended is not held at its cap."""
from __future__ import annotations

from reconciler.core.models import Desired, JobRecord, Phase, Request
from reconciler.loop.tick import rebook


def job(n, cmd, mem=3.5, **kw):
    return Request(id=f"r-{n}", title=f"job {n}", project="web", mem_gb=mem, est_s=60, created=1.0, queue=True,
                   cmd=cmd, **kw)


LEARNED = {"web": {"make e2e": [3.3, 600, True, 3, 1.0, 2.5], "make lint": [0.5, 60, False, 2, 1.0, 0.3]}}


def test_queued_jobs_take_the_books_history_gives_now_and_running_ones_keep_theirs():
    e2e, lint, running = job(1, ["make", "e2e"]), job(2, ["make", "lint"]), job(3, ["make", "e2e"])
    d = Desired(requests=[e2e, lint, running])
    records = {"r-3": JobRecord(request=running, phase=Phase.running)}
    memo: dict = {}
    rebook(d, records, LEARNED, 1.1, memo)
    got = {r.id: r for r in d.requests}
    assert (got["r-1"].book, got["r-1"].booked_from) == (2.75, "3 runs of make e2e")
    assert got["r-2"].book == 3.5 and got["r-2"].book_gb is None  # 2 runs: its cap
    assert got["r-3"] is running  # started at the book it had then
    assert memo  # remembered per command until history changes
    rebook(d, records, {}, 1.1, {})  # nothing learned (a first pass, no gate.json): left as they are
    assert {r.id: r.book for r in d.requests} == {"r-1": 2.75, "r-2": 3.5, "r-3": 3.5}
