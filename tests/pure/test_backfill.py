"""Pure tier: EASY backfill (DESIGN §5.2). A later queue entry starts ahead of a waiting head only if,
by its own --for, it ends before the head's expected start or fits in what the head leaves spare;
the head's expected start never moves because of it."""
from __future__ import annotations

import random
from dataclasses import replace

from reconciler.core.models import Desired, JobObs, Phase, copy
from tests.pure.test_plan import NOW, POLICY, kinds, plan, req, run_plan, running, world

# budget: 20 avail − 6 reserve − 2 headroom = 12 GB; 16 − 4 = 12 cpus
W = dict(avail=20.0, total=32.0, nproc=16)


def hog():
    """10 GB held until NOW + 300 (started 5 min ago, --for 10m), nothing of it used yet: 2 GB free."""
    return running(1, mem=10.0, cpus=1, started=NOW - 300, est=600, title="e2e a")


def test_an_entry_that_ends_before_the_head_starts_jumps_it_and_says_why():
    head = req(2, mem=11.0, queue=True, title="e2e b")  # waits for r-1 to end: starts ~NOW + 300
    short = req(3, mem=1.0, est=120, queue=True, title="pytest")
    p = run_plan([head, short], records=[hog()], w=world(**W))
    assert kinds(p) == [("enqueue", "r-2"), ("start", "r-3")]
    assert p.actions[0].detail["est_start"] == NOW + 300
    jump = p.actions[1]
    assert jump.detail == {"code": "backfill", "head": "r-2", "head_start": NOW + 300, "ends": NOW + 120,
                           "free_gb": 2.0, "beside": False}


def test_a_longer_entry_jumps_only_into_what_the_head_leaves_spare():
    # At r-2's start (NOW + 300) 12 GB are free and it takes 11: 1 GB, 11 cpus spare.
    head = req(2, mem=11.0, queue=True)
    long_big = req(3, mem=1.5, est=900, queue=True)  # fits now (2 free), would hold 1.5 > 1 past NOW + 300
    long_small = req(4, mem=1.0, est=900, queue=True)  # fits in the spare: starts
    after = req(5, mem=0.5, est=900, queue=True)  # fits now (1 GB free), but the spare is gone
    quick = req(6, mem=0.5, est=60, queue=True)  # ends before the head starts: still jumps
    p = run_plan([head, long_big, long_small, after, quick], records=[hog()], w=world(**W))
    assert kinds(p) == [("enqueue", "r-2"), ("enqueue", "r-3"), ("start", "r-4"), ("enqueue", "r-5"), ("start", "r-6")]
    assert p.actions[1].detail["waits_for"] == "queue_head" and p.actions[3].detail["waits_for"] == "queue_head"
    beside = p.actions[2]
    assert beside.detail["beside"] is True and beside.detail["spare_gb"] == 1.0 and beside.detail["spare_cpus"] == 11
    assert (beside.detail["head"], beside.detail["head_start"]) == ("r-2", NOW + 300)
    # positions count only what stays queued
    assert [a.detail["position"] for a in p.actions if a.kind == "enqueue"] == [1, 2, 3]


def test_cpus_are_protected_like_memory():
    cpu_hog = running(1, mem=1.0, cpus=11, started=NOW - 300, est=600)  # 1 cpu free until NOW + 300
    head = req(2, mem=1.0, cpus=12, queue=True)  # takes every cpu when it starts: nothing spare
    p = run_plan([head, req(3, mem=0.5, cpus=1, est=900, queue=True), req(4, mem=0.5, cpus=1, est=200, queue=True)],
                 records=[cpu_hog], w=world(**W))
    assert kinds(p) == [("enqueue", "r-2"), ("enqueue", "r-3"), ("start", "r-4")]


def test_nothing_jumps_a_head_whose_start_nobody_can_tell():
    # 12 GB budget, the head asks 11 but only 9 are really free (in use outside res): even every
    # holder ending would not make room, so its start is unknown and nothing may overtake it.
    head = req(2, mem=11.0, queue=True)
    p = run_plan([head, req(3, mem=1.0, est=30, queue=True)], w=world(avail=17.0, total=32.0, nproc=16))
    assert kinds(p) == [("enqueue", "r-2"), ("enqueue", "r-3")]
    assert p.actions[0].detail["est_start"] is None
    assert (p.actions[1].detail["waits_for"], p.actions[1].detail["head"]) == ("queue_head", "r-2")


def test_a_request_without_queue_is_granted_by_backfill_or_refused_naming_the_head():
    head = req(2, mem=11.0, queue=True)
    p = run_plan([head, req(3, mem=1.0, est=120), req(4, mem=1.0, est=900, kind="note"), req(5, mem=0.5, est=900)],
                 records=[hog()], w=world(**W))
    assert kinds(p) == [("enqueue", "r-2"), ("start", "r-3"), ("grant", "r-4"), ("refuse", "r-5")]
    assert p.actions[1].detail["code"] == "backfill" and p.actions[2].detail["beside"] is True
    assert p.actions[3].detail["resource"] == "queue_head"


def test_a_job_that_may_backfill_stays_here_instead_of_overflowing_to_the_cluster():
    """With `overflow = "cluster"`, what waits behind a head pinned here goes to the cluster, unless
    it may backfill here."""
    policy = replace(POLICY, overflow="cluster")
    w = world(**W)
    w.cluster_ok = True
    w.jobs["r-1"] = JobObs(state="active")
    rec = hog()
    reqs = [rec.request, req(2, mem=11.0, queue=True, on="local"), req(3, mem=1.0, est=120, queue=True),
            req(4, mem=1.5, est=900, queue=True)]
    p = plan(Desired(requests=reqs), {"r-1": rec}, w, NOW, policy)
    assert kinds(p) == [("enqueue", "r-2"), ("start", "r-3"), ("start", "r-4")]
    assert p.actions[1].detail["code"] == "backfill"
    assert p.actions[2].detail == {"code": "submit", "where": "cluster", "overflow": True, "queue": True, "est_s": 900}


def _forecast_head_start(requests, records, w):
    p = run_plan(requests, records=records, w=w)
    heads = [a for a in p.actions if a.kind == "enqueue" and a.detail.get("waits_for") in ("memory", "cpus", "memory+cpus")]
    return p, (heads[0].detail["est_start"], heads[0].id) if heads else None


def test_backfill_never_moves_the_heads_expected_start_random_queues():
    """Seeded random machines and queues: plan a pass, apply its starts (each started now, holding
    its own --for), plan the next pass at the same instant: the head is the same entry and expected
    no later than before; and the same with none of the entries behind the head at all."""
    rng = random.Random(5)
    jumped = 0
    for case in range(400):
        holders = []
        for n in range(1, rng.randint(1, 4) + 1):
            est = rng.choice((60, 300, 600, 1800))
            holders.append(running(n, mem=rng.choice((0.5, 1.0, 2.0, 4.0)), cpus=rng.choice((0.5, 1, 2, 4)),
                                   started=NOW - rng.uniform(0, est), est=est))
        first = len(holders) + 1
        queue = [req(first + i, mem=rng.choice((0.2, 0.5, 1.0, 3.0, 6.0, 9.0)), cpus=rng.choice((0.25, 1, 2, 6)),
                     est=rng.choice((30, 120, 400, 900, 3000)), queue=True) for i in range(rng.randint(2, 8))]
        w = dict(avail=rng.choice((14.0, 16.0, 20.0)), total=32.0, nproc=16)
        p, head = _forecast_head_start(queue, holders, world(**w))
        if head is None or head[0] is None:
            continue
        est, head_id = head
        ahead = [r for r in queue if r.number < int(head_id[2:])]
        _, alone = _forecast_head_start(ahead + [r for r in queue if r.id == head_id], holders, world(**w))
        assert alone == head, (case, alone, head)  # what is behind the head never moves it
        started = {a.id for a in p.actions if a.kind == "start"}
        jumped += sum(1 for a in p.actions if a.kind == "start" and a.detail["code"] == "backfill")
        next_records = holders + [copy(running(int(r.id[2:]), mem=r.mem_gb, cpus=r.cpus, est=r.est_s, started=NOW),
                                       phase=Phase.starting) for r in queue if r.id in started]
        rest = [r for r in queue if r.id not in started]
        _, again = _forecast_head_start(rest, next_records, world(**w))
        assert again is not None and again[1] == head_id and again[0] <= est + 1e-6, (case, head, again)
    assert jumped > 50  # the cases did exercise backfill
