"""The report of a crowd run: the table (one row per arm) and the lines under it (what its waiting
columns mean, with their figures; res-learned's, res-overflow's and res-cli's own lines and their
issues' targets). Pure: rows in, text out. Imports arms and measures (and workload's MARGIN); the
res-cli arm's lines from cli_arm only when a row carries them."""
from __future__ import annotations

import os

from .arms import GATE_RETRY_S
from .measures import pct
from .workload import MARGIN

# res-overflow pays when its makespan is at most this × the local-only res arm's: a gain past the
# run-to-run spread of one arm on this machine (2–5 % between back-to-back runs, docs/crowd.md)
OVERFLOW_TARGET = 0.90


def table(rows: list[dict], bound: float, idle: dict) -> str:
    """One row per arm, its name first; times in seconds, memory in GB, the probe in ms."""
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)

    cols = [("arm", 12), ("makespan s", 10), ("÷bound", 6), ("OOM att", 7), ("failed", 6), ("stops", 5), ("lost %", 6),
            ("wait p50", 8),
            ("wait p95", 8), ("hand-off", 8), ("overtaken", 9), ("idle cpu·s", 10), ("peak GB", 7), ("PSI max10", 9),
            ("PSI ms", 7), ("probe p50", 9), ("probe p99", 9), ("p99÷idle", 8)]
    lines = [" ".join(f"{n:<{w}}" if i == 0 else f"{n:>{w}}" for i, (n, w) in enumerate(cols))]
    lines.append("-" * len(lines[0]))
    for r in rows:
        ratio = None if not (r["probe_p99_ms"] and idle.get("p99")) else r["probe_p99_ms"] / idle["p99"]
        vals = [r["arm"], f(r["makespan_s"], ".1f"), f(r["makespan_s"] / bound, ".2f") + "×", str(r["oom_killed"]),
                str(r["failed"]), f(r.get("res_stops"), "d"), f(r.get("lost_pct"), ".1f"), f(r["wait_p50_s"], ".1f"), f(r["wait_p95_s"], ".1f"), f(r["handoff_p50_s"], ".2f"),
                f(r.get("overtaken_s"), ".1f"), f(r.get("idle_cpu_waiting_s"), ".1f"), f(r["peak_gb"], ".2f"), f(r["psi_full_max_avg10"], ".2f"), f(r["psi_full_total_ms"], ".0f"),
                f(r["probe_p50_ms"], ".1f"), f(r["probe_p99_ms"], ".1f"), f(ratio, ".2f") + ("×" if ratio else "")]
        lines.append(" ".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))
    return "\n".join(lines)


def notes(rows: list[dict]) -> str:
    """The lines under the table that say what its waiting columns mean, with their figures."""
    out = []
    over = ", ".join(f"{r['arm']} {r['overtaken_s']:.1f} s ({r['overtaken_past_estimate_s']:.1f} s of it past the "
                     f"jumpers' own estimates)" for r in rows if r.get("overtaken_s") is not None)
    if over:
        out.append("overtaken: summed over waiting jobs, the time one waited only because jobs asked after it ran "
                   f"(by what the arm knows: res the sizes it was told, slots their count): {over}")
    fbw = ", ".join(f"{r['arm']} {r['fits_but_waits_s']:.1f} s" for r in rows if r.get("fits_but_waits_s") is not None)
    if fbw:
        out.append(f"fits but waits: seconds in which some waiting job fitted beside what ran, by the same measure: {fbw}")
    out.append("idle cpu·s: the container's cores left idle (its own CPU counter) while some job waited")
    gate = ", ".join(f"{r['arm']} {r['gate_refusals']}" for r in rows if r.get("gate_refusals") is not None)
    if gate:
        out.append(f"refused by the gate (the agent asked again {GATE_RETRY_S:g} s later; each counts once): {gate}")
    for r in rows:
        if r.get("warmup") is not None:
            out += learned_notes(r, next((x for x in rows if x["arm"] == "res"), None))
        if r.get("cluster") is not None:
            out += overflow_notes(r, next((x for x in rows if x["arm"] == "res"), None))
        if r.get("cli") is not None:
            from .cli_arm import notes as cli_notes

            out += cli_notes(r, next((x for x in rows if x["arm"] == "res-gated"), None))
    return "\n".join(out)


def overflow_notes(r: dict, local: dict | None) -> list[str]:
    """res-overflow's lines: its cluster, what went there and how fast it started, issue 28's target."""
    c = r["cluster"]

    def s(v):
        return "—" if v is None else f"{v:.2f} s"
    sent = c["sent"]
    kinds = ", ".join(f"{sum(1 for x in sent if x['kind'] == k)} {k}" for k in ("test", "build", "e2e"))
    out = [f"{r['arm']}: the cluster: 3 nodes of {'+'.join(f'{g:g}' for g in c['nodes_gb'])} GB (their own, outside "
           f"W; their CPUs are this machine's {os.cpu_count()} cores); {len(sent)} of {c['attempts']} attempts went "
           f"there ({kinds})" + ("" if c["records_read"] else " (res's state.db could not be read: not counted)"),
           f"{r['arm']}: start latency: the idle cluster, sbatch → the job's process runs, p50 {s(c['sbatch_p50_s'])}, "
           f"max {s(c['sbatch_max_s'])} (n={len(c['sbatch_s'])}); in the run, res's submit → the job's process runs "
           f"p50 {s(c['submit_to_start_p50_s'])}, max {s(c['submit_to_start_max_s'])}; ask → res's submit p50 "
           f"{s(c['ask_to_submit_p50_s'])}, max {s(c['ask_to_submit_max_s'])}; its end → its agent knows (res reads "
           f"the exit record on the shared filesystem) p50 {s(c['told_p50_s'])}, max {s(c['told_max_s'])}"]
    if local is not None:
        waits = {(a["agent"], a["job"], a["attempt"]): a for a in local["attempts"]}
        pairs = [(x["started"] - x["asked"], w["started"] - w["asked"]) for x in sent
                 if x["started"] is not None and (w := waits.get((x["agent"], x["job"], x["attempt"]))) is not None
                 and w["started"] is not None]
        if pairs:
            worse = sum(1 for here, there in pairs if here > there)
            out.append(f"{r['arm']}: the jobs that went to the cluster waited p50 {pct([p[0] for p in pairs], 0.5):.1f} s "
                       f"(ask → running on a node); the same jobs in the res arm waited p50 "
                       f"{pct([p[1] for p in pairs], 0.5):.1f} s; {worse} of {len(pairs)} waited longer for the cluster")
        ratio = r["makespan_s"] / local["makespan_s"]
        ok = ratio <= OVERFLOW_TARGET and r["oom_killed"] == 0 and r["failed"] == 0
        out.append(f"{r['arm']} against res, local only (issue 28): makespan {ratio:.2f}× ({r['makespan_s']:.1f} s "
                   f"against {local['makespan_s']:.1f} s), wait p50 {r['wait_p50_s']:.1f} s against "
                   f"{local['wait_p50_s']:.1f} s, p95 {r['wait_p95_s']:.1f} s against {local['wait_p95_s']:.1f} s, "
                   f"OOM-killed {r['oom_killed']} against {local['oom_killed']}, failed {r['failed']}; target: "
                   f"makespan ≤ {OVERFLOW_TARGET:.2f}× with 0 OOM-killed and 0 failed: {'met' if ok else 'not met'}")
    return out


def learned_notes(r: dict, honest: dict | None) -> list[str]:
    """res-learned's lines: its warm-up, the sizes res chose against the truth, issue 25's target."""
    w = r["warmup"]

    def kills(x):
        return (f"{x['oom_killed']} OOM-killed attempt{'s' if x['oom_killed'] != 1 else ''} ({x['res_restarts']} "
                f"answered by res starting the job again, bigger; {x['oom_killed'] - x['res_restarts']} retried by "
                f"their agents), {x['failed']} failed")
    out = [f"{r['arm']}: warm-up round (not measured; the same workload, --mem/--cpus/--for auto from an empty "
           f"history): {w['makespan_s']:.1f} s, {kills(w)}; measured round: {kills(r)}"]
    chose = []
    for kind in ("test", "build", "e2e"):
        got = [x for x in r.get("sizes", []) if x["kind"] == kind and None not in (x["mem_gb"], x["cpus"], x["est_s"])]
        if got:
            mem = median_of([x["mem_gb"] / x["true_peak_gb"] for x in got])
            est = median_of([x["est_s"] / x["time_s"] for x in got])
            cpus = median_of([x["cpus"] - x["true_cpus"] for x in got])
            chose.append(f"{kind} ×{mem:.2f} peak, ×{est:.1f} time, {cpus:+.2f} CPUs")
    if chose:
        out.append(f"{r['arm']}: sizes res chose in the measured round, median against the truth (honest sizes: "
                   f"×{MARGIN:g} peak, ×1 time, +0 CPUs): {'; '.join(chose)}")
    if honest is not None:
        ratio = r["makespan_s"] / honest["makespan_s"]
        ok_oom, ok_time = r["oom_killed"] == 0 and r["failed"] == 0, ratio <= 1.10
        out.append(f"{r['arm']} against honest sizes (issue 25): OOM-killed after the warm-up {r['oom_killed']}, "
                   f"failed {r['failed']} (target 0): {'met' if ok_oom else 'not met'}; makespan {ratio:.2f}× "
                   f"the res arm's (target ≤ 1.10×): {'met' if ok_time else 'not met'}")
    return out


def median_of(values: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    s = sorted(values)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
