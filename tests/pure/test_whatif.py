"""Pure tier: the gate's question to the planner (core/whatif.py): would a job of this size start now,
or when? Answered by core/plan.py itself on the same inputs as a pass."""
from __future__ import annotations

from reconciler.core.models import Desired, JobObs
from reconciler.core.whatif import would_fit
from tests.pure.test_plan import NOW, POLICY, running, world

W = dict(avail=20.0, total=32.0, nproc=16)  # 20 − 6 reserve − 2 headroom = 12 GB; 16 − 4 = 12 cpus


def ask(records, size, desired=None):
    recs = {r.id: r for r in records}
    d = desired or Desired(requests=[r.request for r in records])
    jobs = {r.id: JobObs(state="active") for r in records}
    return would_fit(d, recs, world(**W, jobs=jobs), NOW, POLICY, size)


def size(mem, cpus=1.0, est=600, guessed=True):
    return {"mem_gb": mem, "cpus": cpus, "est_s": est, "guessed": guessed, "title": "pytest", "project": "p", "cwd": "/p"}


def test_fits_now():
    assert ask([], size(2.0))["fits"] == "now"


def test_waits_for_a_declared_holder_until_its_end():
    hog = running(1, mem=11.0, started=NOW - 300, est=600)  # declared: ends ~NOW + 300
    got = ask([hog], size(2.0))
    assert got["fits"] == "later" and got["start"] == NOW + 300 and got["detail"]["code"] == "busy"


def test_a_start_that_rests_on_gated_guesses_is_not_a_reason_to_refuse():
    gated = running(1, mem=11.0, started=NOW - 300, est=600, gated=True)  # its end: the gate's guess
    got = ask([gated], size(2.0))
    assert got["fits"] == "later" and got["start"] is None


def test_a_guess_bigger_than_the_agents_will_ever_have_is_asked_at_the_most_there_is():
    # 24 GB is the most agents could have (32 − 6 − 2), 12 are free now (the rest in use outside res):
    # a guess is booked at what is free, not refused for what the machine's other users hold
    got = ask([], size(50.0, cpus=40.0))
    assert got["fits"] == "now" and got["mem_gb"] == 12.0 and got["cpus"] == 12.0
    declared = ask([], size(50.0, guessed=False))
    assert declared["fits"] == "never"


def test_behind_a_waiting_queue_head_the_start_is_the_queues_own_estimate():
    """As the gate's rewrite asks (--queue): in line behind the head, not refused for the head's needs
    (a request asked for now may not overtake it: that answer alone would say 'never known')."""
    from tests.pure.test_plan import req

    hog = running(1, mem=1.0, cpus=12, started=NOW - 300, est=600)  # every cpu until NOW + 300
    head = req(2, mem=1.0, cpus=12, est=60, queue=True)  # then every cpu for a minute
    d = Desired(requests=[hog.request, head])
    got = ask([hog], size(1.0, cpus=12.0), desired=d)
    assert got["fits"] == "later" and got["start"] == NOW + 360
    assert got["detail"]["code"] == "busy" and got["detail"]["holders"][0]["id"] == "r-1"
