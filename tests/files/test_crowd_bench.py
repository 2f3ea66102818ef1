"""bench/crowd.py's own figures and picture, on hand-built timelines (marked as such: no run of the
benchmark shows these exact cases): what it reports as queue jumping and idle CPU, and what its
picture shows a person (the pixels of the drawn PNG)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from crowdkit.armrun import ArmRun  # noqa: E402
from crowdkit.measures import Attempt  # noqa: E402
from crowdkit.workload import Job  # noqa: E402

GIB = 1 << 30


def job(agent, idx, time_s=2.0, peak_gb=1.0):
    return Job(agent, idx, "build", f"build {idx}", peak_gb, time_s, time_s)


def attempt(agent, asked, started, finished, rc=0):
    return Attempt(agent, 0, "build", 0, asked, started, finished, finished if finished is not None else started + 1, rc)


def arm_run(tmp_path, name, plan, attempts, mem_gb=6.0):
    run = ArmRun(name, plan, mem_gb, tmp_path)
    run.attempts, run.t0 = attempts, 0.0
    return run


def test_a_job_that_jumps_the_queue_is_counted_against_the_one_it_jumped(tmp_path):
    """One slot. r runs 0–2; x asks at 0.5, y at 1; y takes the slot at 2 (it jumped x) and runs to
    4, past its own estimate (2 s) from 4 on... x starts at 5: overtaken 3 s, 1 s of it with y past
    its estimate."""
    plan = [[job(0, 0)], [job(1, 0)], [job(2, 0)]]
    runs = [attempt(0, 0.0, 0.0, 2.0), attempt(1, 0.5, 5.0, 7.0), attempt(2, 1.0, 2.0, 5.0)]
    run = arm_run(tmp_path, "slots-1", plan, runs)
    total, past = run.overtaken()
    assert total == pytest.approx(3.0) and past == pytest.approx(1.0)
    assert run.fits_but_waits() == pytest.approx(0.0)  # the slot was never free while someone waited
    # in ask order, nobody is overtaken
    fair = [attempt(0, 0.0, 0.0, 2.0), attempt(1, 0.5, 2.0, 4.0), attempt(2, 1.0, 4.0, 6.0)]
    assert arm_run(tmp_path / "b", "slots-1", plan, fair).overtaken() == (0.0, 0.0)


def test_res_arms_measure_by_the_declared_sizes_and_cpus(tmp_path):
    """W = 6: two 2.5 GB jobs (declared 3.125 each with the 1.25 margin) do not fit together; a later
    small one running beside the first keeps nothing out (it fits beside), so it overtakes nobody."""
    big_a, big_b, small = job(0, 0, 10, 2.5), job(1, 0, 10, 2.5), job(2, 0, 3, 0.1)
    plan = [[big_a], [big_b], [small]]
    runs = [attempt(0, 0.0, 0.0, 10.0), attempt(1, 0.1, 10.0, 20.0), attempt(2, 0.2, 0.5, 3.5)]
    run = arm_run(tmp_path, "res", plan, runs)
    assert run.overtaken() == (0.0, 0.0)
    assert run.fits_but_waits() == pytest.approx(0.3)  # the small one waited 0.2–0.5 though it fitted
    # free-for-all holds nothing back: no such figure
    assert arm_run(tmp_path / "f", "free-for-all", plan, runs).overtaken() is None


def test_idle_cpu_is_counted_only_while_someone_waits(tmp_path):
    plan = [[job(0, 0)], [job(1, 0)]]
    runs = [attempt(0, 0.0, 0.0, 4.0), attempt(1, 0.0, 2.0, 4.0)]
    run = arm_run(tmp_path, "slots-1", plan, runs)
    cores = len(os.sched_getaffinity(0))
    # (t, total, psi, cpu seconds used so far, by agent): 1 cpu busy throughout
    samples = [(float(t), 0, None, float(t), {}) for t in range(5)]
    assert run.idle_cpu_waiting(samples) == pytest.approx((cores - 1) * 2.0)  # agent 1 waited 0–2
    assert run.idle_cpu_waiting([(0.0, 0, None, None, {}), (1.0, 0, None, None, {})]) is None


def _doc(kills: int) -> dict:
    """Two agents: agent 0 holds 3 GB, agent 1 holds 1 GB, for 60 s; `kills` OOM kills of agent 1."""
    samples = [[t * 0.5, 4 * GIB, {"0": 3 * GIB, "1": 1 * GIB}] for t in range(121)]
    attempts = [dict(agent=1, job=k, kind="e2e", attempt=0, asked=0, started=0, finished=None, ended=10.0 + 10 * k,
                     rc=137) for k in range(kills)]
    arm = dict(arm="free-for-all", makespan_s=60.0, oom_killed=kills, failed=0, samples=samples, attempts=attempts)
    return dict(mix="memory", agents=2, mem_gb=6.0, cores=2, smoke=False, bound=dict(bound=40.0), arms=[arm])


def _pixels(path: Path, rgb: tuple, tol: int = 12) -> int:
    import matplotlib.image

    img = matplotlib.image.imread(str(path))[:, :, :3] * 255
    return int((abs(img - rgb) <= tol).all(axis=2).sum())


def test_the_picture_shows_each_agents_share_and_every_oom_kill(tmp_path):
    from crowdkit.plot import OOM_COLOUR, plot

    import matplotlib.pyplot as plt

    plot(_doc(kills=3), str(tmp_path / "kills.png"))
    plot(_doc(kills=0), str(tmp_path / "none.png"))
    assert (tmp_path / "kills.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blue, orange = ([round(c * 255) for c in plt.get_cmap("tab10").colors[i]] for i in (0, 1))
    a0, a1 = _pixels(tmp_path / "none.png", blue), _pixels(tmp_path / "none.png", orange)
    # 3 GB against 1 GB, stacked: the areas a person compares are 3 : 1 (the legend's swatches aside)
    assert 2.5 < a0 / a1 < 3.5, (a0, a1)
    red = [int(OOM_COLOUR[i:i + 2], 16) for i in (1, 3, 5)]
    # the legend's cross is in both; each kill adds its own on the cap line
    with_kills, without = _pixels(tmp_path / "kills.png", red, 40), _pixels(tmp_path / "none.png", red, 40)
    assert without > 0 and with_kills > 3 * without, (with_kills, without)
