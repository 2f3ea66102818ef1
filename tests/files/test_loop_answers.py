"""The loop's answers, with a fake engine whose passes never end (nothing real is touched)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from reconciler.loop.serve import answer_request


def test_a_request_not_decided_in_answer_timeout_s_is_answered_with_its_id():
    said = []
    engine = SimpleNamespace(
        policy=SimpleNamespace(answer_timeout_s=0.2),
        writer=SimpleNamespace(who=None, add=lambda fields, kind: SimpleNamespace(id="r-7", queue=False)),
        store=SimpleNamespace(get=lambda job_id: None), blocked=[])

    async def never():  # a pass that does not end (the manager hangs, say)
        await asyncio.sleep(3600)

    ticker = SimpleNamespace(pass_after_now=never)
    answer = asyncio.run(answer_request(engine, ticker, {"op": "submit", "kind": "job", "fields": {}}, say=said.append))
    assert said == [{"accepted": "r-7"}]
    assert answer["code"] == 1 and answer["line"] == (
        "res: the reconciler loop took r-7 but did not decide it in 0.2 s; it may still start "
        "(res status r-7; res release r-7 withdraws it)")
