"""bench/crowd_sweep.py's own arithmetic (bench/crowdkit/sweep.py, issue 36): the best lossless slot arm, the
summary per setting, the pick rule (no OOM kill, no failed job, at most 2 % lost in every run; the lowest mean
ratio to the best slots; ties to the smaller numbers), a resumed sweep's cells and its report.
Hand-built runs (marked as such): no crowd is run here."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from crowdkit import sweep  # noqa: E402


def run(mix, seed, arm, makespan, setting=None, vs=None, oom=0, failed=0, stops=0, lost=0.0, margin=None, over=None):
    return dict(mix=mix, seed=seed, arm=arm, makespan_s=makespan, bound_ratio=makespan / 100, oom_killed=oom,
                failed=failed, res_stops=stops, lost_pct=lost, probe_ratio=1.2, setting=setting, vs_slots=vs,
                margin=margin, cpu_overcommit=over)


def res_run(mix, seed, margin, over, vs, **kw):
    return run(mix, seed, "res", 100 * vs, setting=sweep.setting_name(margin, over), vs=vs, margin=margin, over=over, **kw)


def test_the_best_slots_are_the_fastest_that_lost_nothing():
    rows = [run("memory", 1, "slots-2", 200.0), run("memory", 1, "slots-3", 100.0, oom=40, failed=12)]
    assert sweep.best_slots(rows)["arm"] == "slots-2"
    assert sweep.best_slots([run("memory", 1, "slots-3", 100.0, oom=1)]) is None


def test_the_pick_is_the_lowest_mean_among_the_settings_that_lost_nothing():
    runs = [res_run("cpu", 1, 1.0, 1.5, 0.90), res_run("memory", 1, 1.0, 1.5, 1.00),   # mean 0.95
            res_run("cpu", 1, 1.0, 3.0, 0.80), res_run("memory", 1, 1.0, 3.0, 0.90, oom=1),  # faster, an OOM kill
            res_run("cpu", 1, 1.1, 1.0, 0.85), res_run("memory", 1, 1.1, 1.0, 0.95, lost=2.5),  # lost too much
            res_run("cpu", 1, 1.25, 1.0, 0.95), res_run("memory", 1, 1.25, 1.0, 0.95)]         # mean 0.95: a tie
    rows = sweep.summary(runs)
    by = {r["setting"]: r for r in rows}
    assert by["margin 1 × cpus 1.5"]["vs_slots_mean"] == pytest.approx(0.95)
    assert by["margin 1 × cpus 1.5"]["vs_slots_by_mix"] == {"cpu": 0.9, "memory": 1.0}
    assert by["margin 1 × cpus 3"]["oom"] == 1 and by["margin 1.1 × cpus 1"]["lost_max_pct"] == 2.5
    chosen = sweep.pick(rows)
    # the tie (0.95 both) goes to the smaller numbers, margin first (the module's docstring)
    assert (chosen["margin"], chosen["cpu_overcommit"]) == (1.0, 1.5)
    assert sweep.pick(sweep.summary([res_run("cpu", 1, 1.0, 1.0, 0.9, failed=1)])) is None  # none is safe


def test_a_resumed_sweep_keeps_its_runs_and_skips_their_cells(tmp_path):
    path = tmp_path / "sweep.json"
    assert sweep.prior_runs(path, 8, 6.0) == []  # nothing measured yet
    runs = [run("memory", 23, "slots-2", 207.5), res_run("memory", 23, 1.0, 1.0, 1.08)]
    path.write_text(json.dumps({"agents": 8, "mem_gb": 6.0, "runs": runs}))
    kept = sweep.prior_runs(path, 8, 6.0)
    assert {sweep.cell(r) for r in kept} == {("memory", 23, "slots-2", None), ("memory", 23, "res", "margin 1 × cpus 1")}
    with pytest.raises(SystemExit, match="measured 8 agents on 6.0 GB, not 2 on 1 GB"):
        sweep.prior_runs(path, 2, 1.0)  # another crowd's figures are not this one's
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="--resume"):
        sweep.prior_runs(path, 8, 6.0)


def test_the_report_is_the_table_docs_show_with_the_pick_in_bold(tmp_path, capsys):
    runs = [run("memory", 23, "slots-2", 200.0), res_run("memory", 23, 1.0, 1.5, 0.98),
            res_run("memory", 23, 1.1, 1.5, 1.30)]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"mixes": ["memory", "cpu"], "seeds": [23, 24], "agents": 8, "mem_gb": 6.0, "cores": 2,
                                "runs": runs}))
    assert sweep.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 runs over 1 (mix, seed) cells of 2 × 2; W = 6.0 GB, 8 agents, 2 cores")
    rows = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert rows[0].startswith("| setting | runs | ÷ best slots, mean |") and len(rows) == 3
    assert rows[1].startswith("| **margin 1 × cpus 1.5** | **1** | **0.980** |")
    assert rows[2].startswith("| margin 1.1 × cpus 1.5 | 1 | 1.300 |")
    assert out.rstrip().endswith("pick: margin = 1, cpu_overcommit = 1.5")
