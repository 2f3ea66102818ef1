"""Pure tier: the English line of every reason code, pinned once, here (render/reasons.py). Every other
pure test asserts the codes and figures the core puts in `detail` (docs/agent-interface.md); this file
says what each of them reads as, from literal details of the shapes the core makes, in UTC
(NOW is 20:26:40 UTC). Agents parse these lines: a change here is a change of what they read."""
from __future__ import annotations

import pytest

from reconciler.core.models import Action
from reconciler.core.quantities import UTC
from reconciler.render.lines import _SYMBOL
from reconciler.render.reasons import action_reason, outcome_why, pressure_text
from reconciler.render.text import apart, fmt_gb

NOW = 1_780_000_000.0
GIB = 1 << 30


def holder(id: str, title: str, gb: float, cpus: float, until: float, project: str = "proj-a", **kw) -> dict:
    return {"id": id, "title": title, "project": project, "gb": gb, "cpus": cpus, "until": until, "overdue": False, **kw}


def busy(resource: str, short: list[str], holders: list[dict], free_gb: float, free_cpus: float, asked_gb: float,
         asked_cpus: float, retry_at: float | None, **kw) -> dict:
    return {"code": "busy", "resource": resource, "short": short, "holders": holders, "free_gb": free_gb,
            "free_cpus": free_cpus, "asked_gb": asked_gb, "asked_cpus": asked_cpus,
            "retry": "after" if retry_at else "unknown", "retry_at": retry_at, **kw}


PRESSURE = {"pct": 25.0, "kind": "full", "window_s": 10, "limit": 10.0, "where": "system"}
SLICE_PRESSURE = {"pct": 12.34, "kind": "full", "window_s": 10, "limit": 10.0, "where": "slice", "slice": "agents.slice"}
UNSET = (1 << 64) - 1

# (action kind, detail, the action's fields beyond id and detail, its reason)
REASONS = [
    # ------------------------------------------------ refuse: busy (core.capacity.busy_detail), by resource
    ("refuse", busy("memory", ["memory"], [holder("r-5", "lint", 2.0, 1, NOW + 540, "proj-b")], 3.5, 10, 5.0, 1, NOW + 540), {},
     'busy: 2.0 GB held by proj-b "lint" (r-5) until ~20:35; 3.5 GB free for agents; '
     "retry after ~20:35 or work on something else"),
    ("refuse", busy("memory", ["memory"], [holder("r-5", "lint", 4.0, 1, NOW + 600), holder("r-4", "dotnet e2e", 4.0, 1, NOW + 3600)],
                    4.0, 10, 10.0, 1, NOW + 3600), {},
     'busy: 4.0 GB held by proj-a "lint" (r-5) until ~20:36, 4.0 GB by proj-a "dotnet e2e" (r-4) until ~21:26; '
     "4.0 GB free for agents; retry after ~21:26 or work on something else"),
    ("refuse", busy("memory", ["memory"], [holder("r-4", "dotnet e2e", 7.5, 1, NOW + 3540, by="claude pid 4121")], 5.5, 11, 6.0, 1,
                    NOW + 3540), {},
     'busy: 7.5 GB held by proj-a "dotnet e2e" (r-4, by claude pid 4121) until ~21:25; 5.5 GB free for agents; '
     "retry after ~21:25 or work on something else"),
    ("refuse", busy("cpus", ["cpus"], [holder("r-1", "build", 1.0, 10, NOW + 300)], 21.0, 2, 1.0, 4, NOW + 300), {},
     'busy: 10 cpus held by proj-a "build" (r-1) until ~20:31; 2 cpus free for agents; '
     "retry after ~20:31 or work on something else"),
    ("refuse", busy("memory+cpus", ["memory", "cpus"], [holder("r-1", "build", 1.0, 11, NOW + 300)], 21.0, 1, 22.0, 2, NOW + 300), {},
     'busy: 1.0 GB held by proj-a "build" (r-1) until ~20:31; 21.0 GB and 1 cpu free for agents; '
     "retry after ~20:31 or work on something else"),
    ("refuse", busy("queue_head", ["cpus"], [holder("r-1", "build", 1.0, 11, NOW + 300)], 21.0, 1, 1.0, 0.5, None,
                    head={"id": "r-2", "title": "attrs pytest", "gb": 2.0, "cpus": 12, "waits_for": "cpus"}), {},
     'busy: 11 cpus held by proj-a "build" (r-1) until ~20:31; queue head r-2 "attrs pytest" waits for 12 cpus first; '
     "1 cpu free for agents; retry later or work on something else"),
    ("refuse", busy("queue_head", ["memory"], [], 17, 12, 2, 1, None,
                    head={"id": "r-1", "title": "job 1", "gb": 20, "cpus": 1, "waits_for": "memory"}), {},
     'busy: queue head r-1 "job 1" waits for 20.0 GB first; 17.0 GB free for agents, 2.0 GB asked; the rest is in use '
     "outside res or kept as the user's reserve; retry later or work on something else"),
    # the two figures of a refusal never read the same (issue 38: "3.0 GB free for agents, 3.0 GB asked")
    ("refuse", busy("memory", ["memory"], [], 2.97, 12, 2.98, 1, None), {},
     "busy: 2.97 GB free for agents, 2.98 GB asked; the rest is in use outside res or kept as the user's reserve; "
     "retry later or work on something else"),
    ("refuse", busy("memory+cpus", ["memory", "cpus"], [], 0.5001, 2.996, 0.5004, 3, None), {},
     "busy: 512.1 MB and 2.996 cpus free for agents, 512.4 MB and 3.000 cpus asked; the rest is in use outside res "
     "or kept as the user's reserve; retry later or work on something else"),
    ("refuse", busy("memory", ["memory"], [holder("r-5", "lint", 2.0, 1, NOW + 540, "proj-b")], 2.97, 10, 2.98, 1, NOW + 540),
     {}, 'busy: 2.0 GB held by proj-b "lint" (r-5) until ~20:35; 3.0 GB free for agents; '
     "retry after ~20:35 or work on something else"),  # nothing asked beside it: the usual digits
    ("refuse", busy("memory", ["memory"], [holder("r-4", "dotnet e2e", 8.0, 1, NOW + 3540)], 5.0, 11, 6.0, 1, NOW + 3540,
                    force="would_fit", really_free_gb=13.0, really_free_cpus=12), {},
     'busy: 8.0 GB held by proj-a "dotnet e2e" (r-4) until ~21:25; 5.0 GB free for agents; retry after ~21:25 or work on '
     "something else; 13.0 GB really free beyond the reserve: --force starts it past the ledger (only if the holders "
     "will not use what they reserved)"),
    ("refuse", busy("memory", ["memory"], [holder("r-4", "dotnet e2e", 8.0, 1, NOW + 3540)], 5.0, 11, 6.0, 1, NOW + 3540,
                    force="short", really_free_gb=5.0, really_free_cpus=12), {},
     'busy even with --force: only 5.0 GB really free beyond the reserve; 8.0 GB held by proj-a "dotnet e2e" (r-4) '
     "until ~21:25; retry after ~21:25 or work on something else"),
    ("refuse", busy("cpus", ["cpus"], [holder("r-1", "build", 1.0, 6, NOW + 300)], 15.0, 2, 1.0, 10, None,
                    force="short", really_free_gb=16, really_free_cpus=8), {},
     'busy even with --force: only 8 cpus beyond the reserve; 6 cpus held by proj-a "build" (r-1) until ~20:31; '
     "retry later or work on something else"),
    ("refuse", {"code": "busy", "resource": "lock", "lock": "gate@/src/app", "retry": "after", "retry_at": NOW + 540,
                "holders": [holder("r-1", "gate", 1.0, 1, NOW + 540, by="alice")]}, {},
     'busy: lock "gate@/src/app" held by proj-a "gate" (r-1, by alice) until ~20:35; '
     "retry after ~20:35 or work on something else"),
    ("refuse", {"code": "busy", "resource": "lock", "lock": "gate@/src/app", "retry": "after", "retry_at": NOW + 540,
                "holders": [holder("r-1", "gate", 1.0, 1, NOW + 540)], "force": "lock"}, {},
     'busy: lock "gate@/src/app" held by proj-a "gate" (r-1) until ~20:35; --force never overrides a lock; '
     "retry after ~20:35 or work on something else"),
    ("refuse", {"code": "busy", "resource": "sessions", "limit": 3, "running": 3, "retry": "after", "retry_at": NOW + 600,
                "holders": [holder(f"r-{n}", f"bot {n}", 1.0, 1, NOW + 600 * n) for n in (1, 2, 3)]}, {},
     'busy: 3 agent sessions running (max 3): proj-a "bot 1" (r-1) until ~20:36, proj-a "bot 2" (r-2) until ~20:46, '
     'proj-a "bot 3" (r-3) until ~20:56; retry after ~20:36 or work on something else'),
    ("refuse", {"code": "busy", "resource": "daily_cost", "spent_usd": 5.2, "limit_usd": 5.0, "retry": "tomorrow", "retry_at": None}, {},
     "busy: agent sessions spent $5.20 today, daily_cost_usd is $5.00; new sessions start again tomorrow, or raise "
     "daily_cost_usd"),
    ("refuse", busy("pressure", ["pressure"], [], 22.0, 12, 1.0, 1, None, pressure=PRESSURE) | {"retry": "soon"}, {},
     "busy: memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %): nothing new starts until it falls; "
     "retry in a few minutes or work on something else"),
    ("refuse", busy("pressure", ["pressure"], [], 22.0, 12, 1.0, 1, None, pressure=SLICE_PRESSURE) | {"retry": "soon"}, {},
     "busy: memory pressure 12 % (full, 10 s) in agents.slice is over pressure_full_pct (10 %): nothing new starts "
     "until it falls; retry in a few minutes or work on something else"),
    ("refuse", busy("pressure", ["pressure"], [], 22.0, 12, 1.0, 1, None, pressure=PRESSURE, force="pressure") | {"retry": "soon"}, {},
     "busy: memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %): nothing new starts until it falls; "
     "--force never starts past memory pressure; retry in a few minutes or work on something else"),
    ("refuse", {"code": "busy", "resource": "cluster", "partition": "debug", "nodes": "vm", "est_start": NOW + 3600,
                "retry": "after", "retry_at": NOW + 3600}, {},
     "busy: the cluster would start it at ~21:26 (slurm, partition debug); retry after ~21:26, or --queue to wait in "
     "slurm's queue, or work on something else"),
    ("refuse", busy("guard", ["guard"], [], 0.3, 1.0, 2.2, 1, None, guard={"room_gb": 0.3, "guard_gb": 0.5}, retry="soon"), {},
     "busy: only 307 MB free beyond the reserve, under guard_gb (512 MB): jobs use more than they booked, and nothing new "
     "starts until they end or shrink; retry in a few minutes or work on something else"),
    ("refuse", busy("memory", ["memory"], [], 2.0, 4.0, 2.2, 1, None, cap_gb=3.5), {},
     "busy: 2.0 GB free for agents, 2.2 GB booked · 3.5 GB cap asked; the rest is in use outside res or kept as the "
     "user's reserve; retry later or work on something else"),
    # ------------------------------------------------ refuse: never_fits, pricing
    ("refuse", {"code": "never_fits", "resource": "memory", "asked": 20.0, "max": 16.0}, {}, "20 GB can never fit (max 16 GB)"),
    ("refuse", {"code": "never_fits", "resource": "cpus", "asked": 40, "max": 12}, {}, "40 cpus can never fit (max 12 cpus)"),
    ("refuse", {"code": "never_fits", "resource": "memory", "asked": 3.0, "max": 2.996}, {},
     "3.000 GB can never fit (max 2.996 GB)"),  # not "3 GB … (max 3.0 GB)"
    ("refuse", {"code": "never_fits", "resource": "cpus", "asked": 2, "max": 1.998}, {}, "2.000 cpus can never fit (max 1.998 cpus)"),
    ("refuse", {"code": "pricing", "resource": "pricing", "error": "pricing.toml:3: rates.input: must be ≥ 0"}, {},
     "pricing.toml:3: rates.input: must be ≥ 0; no agent session starts until it is fixed"),
    # ------------------------------------------------ queued (core.admission), by what it waits for
    ("enqueue", {"code": "queued", "position": 1, "est_start": None, "waits_for": "memory"}, {}, "position 1; est. start unknown"),
    ("enqueue", {"code": "queued", "position": 1, "est_start": NOW + 300, "waits_for": "memory+cpus"}, {},
     "position 1; est. start ~20:31"),
    ("enqueue", {"code": "queued", "position": 2, "est_start": None, "waits_for": "queue_head", "head": "r-1"}, {},
     "position 2; est. start unknown; behind queue head r-1"),
    ("enqueue", {"code": "queued", "position": 2, "est_start": NOW + 540, "waits_for": "lock", "lock": "gate", "lock_holder": "r-1"}, {},
     "position 2; est. start ~20:35; lock 'gate' held by r-1"),
    ("enqueue", {"code": "queued", "position": 2, "est_start": None, "waits_for": "sessions",
                 "block": {"code": "busy", "resource": "sessions", "limit": 3, "running": 3, "retry": "after", "retry_at": NOW + 600,
                           "holders": [holder("r-1", "bot 1", 1.0, 1, NOW + 600)]}}, {},
     'position 2; 3 agent sessions running (max 3): proj-a "bot 1" (r-1) until ~20:36; retry after ~20:36 or work on '
     "something else"),
    ("enqueue", {"code": "queued", "position": 3, "est_start": None, "waits_for": "sessions"}, {},
     "position 3; behind an earlier session that waits"),
    ("wait", {"code": "queued", "position": 1, "est_start": None, "waits_for": "cluster",
              "error": "slurm: squeue: Unable to contact slurm controller (slurmctld down? check: scontrol ping)"}, {},
     "position 1; waits for the cluster: slurm: squeue: Unable to contact slurm controller (slurmctld down? check: "
     "scontrol ping); submitted once it answers"),
    ("wait", {"code": "queued", "position": 1, "est_start": None, "waits_for": "pressure"}, {},
     "position 1; est. start unknown; waits for memory pressure to fall (pressure_full_pct)"),
    ("wait", {"code": "queued", "position": 1, "est_start": None, "waits_for": "pressure", "pressure": PRESSURE}, {},
     "position 1; est. start unknown; waits for memory pressure 25 % (full, 10 s) to fall under 10 % (pressure_full_pct)"),
    ("wait", {"code": "queued", "position": 1, "est_start": None, "waits_for": "pressure+memory", "pressure": PRESSURE}, {},
     "position 1; est. start unknown; waits for memory pressure 25 % (full, 10 s) to fall under 10 % (pressure_full_pct)"),
    ("wait", {"code": "queued", "position": 1, "est_start": None, "waits_for": "guard+memory",
              "guard": {"room_gb": 0.3, "guard_gb": 0.5}}, {},
     "position 1; est. start unknown; waits for jobs to end or shrink: only 307 MB free beyond the reserve, under "
     "guard_gb (512 MB)"),
    # ------------------------------------------------ starts
    ("start", {"code": "fits", "free_gb": 30.0, "head": True}, {}, "queue head, fits (30.0 GB free)"),
    ("start", {"code": "fits", "free_gb": 30.0, "head": False}, {}, "fits (30.0 GB free)"),
    ("start", {"code": "fits", "free_gb": 5.0, "head": True, "booked_from": "5 runs of make e2e"}, {"mem_gb": 3.5, "book_gb": 2.2},
     "queue head, fits (5.0 GB free); booked from 5 runs of make e2e"),
    ("grant", {"code": "fits", "free_gb": 0.5, "head": False}, {}, "fits (512 MB free)"),
    ("start", {"code": "backfill", "head": "r-2", "head_start": NOW + 300, "ends": NOW + 120, "free_gb": 2.0, "beside": False}, {},
     "backfill: ends ~20:28, before r-2's start ~20:31"),
    ("start", {"code": "backfill", "head": "r-2", "head_start": NOW + 300, "ends": NOW + 900, "free_gb": 2.0, "beside": True,
               "spare_gb": 1.0, "spare_cpus": 11}, {},
     "backfill: fits beside r-2 once it starts ~20:31 (1.0 GB, 11 cpus spare then)"),
    ("start", {"code": "submit", "where": "cluster", "overflow": False, "queue": False, "est_s": 600}, {"mem_gb": 40.0, "cpus": 32},
     "to slurm (40.0 GB, 32 cpus, 10 min)"),
    ("start", {"code": "submit", "where": "cluster", "overflow": True, "queue": False, "est_s": 600}, {"mem_gb": 4.0, "cpus": 1},
     "overflow: does not fit here now; to slurm (4.0 GB, 1 cpu, 10 min)"),
    ("running", {"code": "started"}, {}, "unit seen started"),
    # ------------------------------------------------ stops (core.plan.budget_trip)
    ("stop", {"code": "released"}, {}, "released"),
    ("stop", {"code": "budget", "budget": "cost", "used": 0.52, "limit": 0.5, "estimated": False, "messages": 0, "reported": 0.52}, {},
     "budget: cost $0.52 > $0.50"),
    ("stop", {"code": "budget", "budget": "cost", "used": 1.0404, "limit": 1.0, "estimated": True, "messages": 12, "reported": None}, {},
     "budget: cost ~$1.04 (estimated, 12 messages) > $1.00"),
    ("stop", {"code": "budget", "budget": "cost", "used": 0.1632, "limit": 0.05, "estimated": False, "messages": 0, "reported": 0.11}, {},
     "budget: cost ~$0.16 (its lines; it reported $0.11) > $0.05"),
    ("stop", {"code": "budget", "budget": "cost", "used": 0.010164, "limit": 0.01, "estimated": False, "messages": 0,
              "reported": 0.010164}, {},
     "budget: cost $0.0102 > $0.0100"),  # more digits where cents alone would show them equal
    ("stop", {"code": "budget", "budget": "duration", "used": 120.0, "limit": 60}, {}, "budget: duration 2 min > 60 s"),
    ("stop", {"code": "budget", "budget": "duration", "used": 1900.0, "limit": 1800}, {}, "budget: duration 32 min > 30 min"),
    ("stop", {"code": "budget", "budget": "iterations", "used": 41, "limit": 40}, {}, "budget: iterations 41 > 40"),
    ("stop", {"code": "attach_failed", "failures": 3, "error": "log unreadable: EIO"}, {},
     "attachment failed 3 times in a row: log unreadable: EIO"),
    ("stop", {"code": "log_limit", "limit_gb": 2.0, "written_gb": 2.25}, {}, "log over 2 GB (2.2 GB written; policy max_log_gb)"),
    # ------------------------------------------------ the pressure ladder's red (core/ladder.py)
    ("evict", {"code": "evicted", "used_gb": 2.9, "book_gb": 2.2, "cap_gb": 3.5, "gated": False, "started": NOW - 60,
               "room_gb": 0.2, "guard_gb": 0.5, "because": "room"}, {},
     "above its book (2.9 GB used, 2.2 GB booked); back to the queue head (205 MB free beyond the reserve, under half "
     "of guard_gb (512 MB))"),
    ("evict", {"code": "evicted", "used_gb": 3.1, "book_gb": 2.6, "cap_gb": None, "gated": True, "started": NOW - 60,
               "room_gb": 1.0, "guard_gb": 0.5, "because": "pressure",
               "pressure": {"pct": 40.0, "avg60_pct": 22.5, "limit": 10.0, "where": "system"}}, {},
     "above the gate's guess (3.1 GB used, 2.6 GB booked); back to the queue head (memory pressure 40 % (full, 10 s; "
     "22 % over 60 s) held over pressure_full_pct (10 %))"),
    ("evict", {"code": "evicted", "room_gb": 0.1, "guard_gb": 0.5, "because": "room",
               "process": {"pid": 4242, "start": "100", "name": "node", "gb": 3.1, "pids": [4242], "session": 4121,
                           "over_gb": 2.0}}, {},
     "3.1 GB outside any job, over ladder_session_gb (2.0 GB), of agent session pid 4121; the session goes on (102 MB "
     "free beyond the reserve, under half of guard_gb (512 MB))"),
    # ------------------------------------------------ settles: rc, peak, time, then the why (OUTCOMES below)
    ("settle", {"code": "exited", "rc": 3, "peak_gb": 0.4, "took_s": 300.0}, {}, "rc=3 peak 410 MB in 5 min; exit code 3"),
    ("settle", {"code": "memory_limit", "mem_gb": 1.0, "peak_gb": 1.0, "try_mem": "1.5G", "rc": 137, "took_s": 300.0}, {},
     "rc=137 peak 1.0 GB in 5 min; killed at its memory limit (1.0 GB, peak 1.0 GB); raise --mem (try --mem 1.5G)"),
    ("settle", {"code": "lost", "lost": "vanished"}, {}, "lost: the unit vanished without an exit record"),
    # ------------------------------------------------ attachments
    ("reattach", {"code": "unheld"}, {}, "nobody attached"),
    ("reattach", {"code": "holder_gone", "holder": "host/123"}, {}, "host/123 is gone"),
    ("reattach", {"code": "lease_lapsed", "holder": "host/200", "ago_s": 12.0}, {}, "lease of host/200 expired 12 s ago"),
    ("requeue", {"code": "holder_gone", "holder": "host/123"}, {}, "never started; host/123 is gone"),
    ("requeue", {"code": "lease_lapsed", "holder": "host/123"}, {}, "never started; lease expired"),
    # ------------------------------------------------ notes, the queue file, state.db
    ("expire", {"code": "owner_gone", "pid": 42}, {}, "owner pid 42 is gone"),
    ("expire", {"code": "expired", "at": NOW + 600}, {}, "expired at 20:36"),
    ("expire", {"code": "released"}, {}, "released"),
    ("cancel", {"code": "cancelled"}, {}, "removed from the queue"),
    ("retire", {"code": "retire", "phase": "done"}, {}, "done; removing it from the queue file"),
    ("prune", {"code": "prune", "phase": "done"}, {}, "finished over 24 h ago; into history"),
    ("restore", {"code": "restore", "stop": True}, {},
     "gone from queue.toml without res release: written back (res release r-1 --stop ends it)"),
    ("restore", {"code": "restore", "stop": False}, {}, "gone from queue.toml without res release: written back (res release r-1 ends it)"),
    ("recover", {"code": "unit"}, {}, "state.db has no record of it, its unit is there: taken back"),
    ("recover", {"code": "lost"}, {}, "state.db has no record of it, but it ran before (its log is there): not started again"),
    ("hold", {"code": "hand_added"}, {},
     "added to queue.toml outside res (not by res run): never started; res release r-1 drops it"),
    ("retry", {"code": "retry", "killed_at_gb": 1.0, "mem_gb": 1.5, "peak_gb": 1.0, "took_s": 300.0}, {},
     "killed at its memory limit (1.0 GB, peak 1.0 GB); res sized it, so it starts again once, at 1.5 GB"),
    ("retry", {"code": "retry", "cause": "evicted", "stops": 1, "used_gb": 2.9, "book_gb": 2.2, "to_gb": 3.0,
               "at_cap": False, "booked_from": "raised after a stop", "peak_gb": 2.9, "took_s": 30.0}, {},
     "stopped by res above its book (2.9 GB used, 2.2 GB booked) before memory ran out; back at the queue's head, "
     "booked 3.0 GB now; it starts again by itself"),
    ("retry", {"code": "retry", "cause": "evicted", "stops": 2, "used_gb": 3.3, "book_gb": 3.0, "to_gb": 3.5,
               "at_cap": True, "booked_from": "its cap: stopped 2 times above its book", "peak_gb": 3.3, "took_s": 30.0}, {},
     "stopped by res above its book (3.3 GB used, 3.0 GB booked) before memory ran out (stop 2); back at the queue's "
     "head, booked at its cap (3.5 GB) from now on; it starts again by itself"),
    # ------------------------------------------------ the user's side (core.game, core.sessions)
    ("end_game", {"code": "game_ended", "at": NOW - 5}, {}, "game mode ended at 20:26; clearing it"),
    ("set", {"code": "game_slice", "changes": {"MemoryHigh": [26 * GIB, 20 * GIB], "CPUWeight": [20, 5], "IOWeight": [20, 5]},
             "game": "on", "until": NOW + 3600}, {},
     "MemoryHigh 26.0 GB → 20.0 GB, CPUWeight 20 → 5, IOWeight 20 → 5 (game on until 21:26)"),
    ("set", {"code": "game_slice", "changes": {"MemoryHigh": [20 * GIB, 26 * GIB], "CPUWeight": [5, 20], "IOWeight": [5, 20]},
             "game": "off", "until": None}, {},
     "MemoryHigh 20.0 GB → 26.0 GB, CPUWeight 5 → 20, IOWeight 5 → 20 (game off)"),
    ("set", {"code": "game_slice", "changes": {"MemoryHigh": [UNSET, 26 * GIB], "CPUWeight": [UNSET, 20], "IOWeight": [None, 20]},
             "game": "off", "until": None}, {},
     "MemoryHigh max → 26.0 GB, CPUWeight default → 20, IOWeight default → 20 (game off)"),
    ("set", {"code": "session_memory", "was": UNSET, "to_gb": 6}, {}, "MemoryHigh max → 6.0 GB (session_mem_gb)"),
    ("set", {"code": "session_memory", "was": 2 * GIB, "to_gb": 6}, {}, "MemoryHigh 2.0 GB → 6.0 GB (session_mem_gb)"),
    ("adopt", {"code": "outside_slice", "pid": 41, "children": 2, "slice": "agents.slice"}, {},
     "claude pid 41 and 2 child processes, outside agents.slice"),
    ("adopt", {"code": "outside_slice", "pid": 7, "children": 1, "slice": "agents.slice"}, {},
     "claude pid 7 and 1 child process, outside agents.slice"),
    ("adopt", {"code": "outside_slice", "pid": 9, "children": 0, "slice": "agents.slice"}, {}, "claude pid 9, outside agents.slice"),
]


def _id(case) -> str:
    kind, d, _, _ = case
    return f"{kind}-{d['code']}-" + str(d.get("resource") or d.get("waits_for") or d.get("budget") or "")


@pytest.mark.parametrize("kind, detail, fields, line", REASONS, ids=[_id(c) for c in REASONS])
def test_the_reason_of_each_code(kind, detail, fields, line):
    assert action_reason(Action(kind, "r-1", detail=detail, **fields), UTC) == line


def test_every_kind_of_action_has_its_reason_pinned_here():
    assert set(_SYMBOL) <= {kind for kind, *_ in REASONS}


# (an ended job's outcome, its `why`: core.plan.settle_outcome, agent_outcome)
OUTCOMES = [
    ({"code": "exited", "rc": 0}, "exited 0"),
    ({"code": "exited", "rc": 3, "peak_gb": 0.4, "took_s": 300.0}, "exit code 3"),
    ({"code": "memory_limit", "mem_gb": 1.0, "peak_gb": 1.0, "try_mem": "1.5G", "rc": 137},
     "killed at its memory limit (1.0 GB, peak 1.0 GB); raise --mem (try --mem 1.5G)"),
    ({"code": "memory_limit", "mem_gb": 1.0, "peak_gb": None, "try_mem": "1.5G", "rc": 137},
     "killed at its memory limit (1.0 GB); raise --mem (try --mem 1.5G)"),
    ({"code": "memory_limit", "mem_gb": 0.25, "peak_gb": 0.25, "try_mem": "384M", "rc": 3, "oom_kills": 20},
     "exit code 3: 20 of its processes killed at its memory limit (256 MB, peak 256 MB); raise --mem (try --mem 384M)"),
    ({"code": "exec_failed"}, "could not execute the command (not found or not executable)"),
    ({"code": "time_limit", "limit_s": 600}, "over its time limit on the cluster (10 min, from --for); raise --for"),
    ({"code": "node_failure"}, "its cluster node failed (slurm NODE_FAIL); run it again"),
    ({"code": "stopped", "stop_reason": "released", "rc": 143}, "released"),  # a stop's own reason, as recorded
    ({"code": "stopped_outside", "signal": "TERM", "rc": 143}, "stopped from outside res (signal TERM)"),
    ({"code": "signal", "signal": "SEGV", "rc": 139}, "killed by signal SEGV"),
    ({"code": "lost", "lost": "foreign_exit"}, "lost: its exit record is another run's (not written by its unit)"),
    ({"code": "lost", "lost": "vanished"}, "lost: the unit vanished without an exit record"),
    ({"code": "agent_failed", "failure": "error_during_execution"}, "agent failed: error_during_execution"),
    ({"code": "agent_failed"}, "agent failed: reported an error"),
    ({"code": "released"}, "released"),
    ({"code": "budget", "budget": "cost", "used": 0.52, "limit": 0.5}, "budget: cost $0.52 > $0.50"),
    ({"code": "attach_failed", "failures": 3, "error": "log unreadable: EIO"}, "attachment failed 3 times in a row: log unreadable: EIO"),
    ({"code": "log_limit", "limit_gb": 2.0, "written_gb": 2.25}, "log over 2 GB (2.2 GB written; policy max_log_gb)"),
    # how an agent session's spend was counted (issue 22), after the outcome's own words
    ({"code": "exited", "rc": 0, "unknown_format": True, "lines": 40},
     "exited 0; its output matched no known agent format (40 lines): spend estimated at 1 cent a line"),
    ({"code": "exited", "rc": 0, "dearest_rates": "no model named (give -m)"},
     "exited 0; priced at the dearest rates: no model named (give -m)"),
    ({"code": "exited", "rc": 0, "set_aside": 2,
      "set_aside_note": "line 9: a usage count of 1e+308 tokens; set aside, nothing of it counted"},
     "exited 0; 2 lines of its output set aside (line 9: a usage count of 1e+308 tokens; set aside, nothing of it counted)"),
    ({"code": "exited", "rc": 0, "set_aside": 1, "set_aside_note": "line 3: x", "dearest_rates": "no price for model 'm'"},
     "exited 0; priced at the dearest rates: no price for model 'm'; 1 line of its output set aside (line 3: x)"),
]


@pytest.mark.parametrize("outcome, why", OUTCOMES, ids=[f"{o['code']}-{i}" for i, (o, _) in enumerate(OUTCOMES)])
def test_the_why_of_each_outcome(outcome, why):
    assert outcome_why(outcome) == why


@pytest.mark.parametrize("pct, shown", [(25.0, "25"), (12.34, "12"), (100.0, "100"), (9.5, "9.5"), (0.25, "0.2"),
                                        (3.0, "3"), (9.96, "10"), (3.04, "3")])
def test_the_pressure_percentage_as_people_read_it(pct, shown):
    assert pressure_text({"pct": pct, "kind": "full", "window_s": 10, "where": "system"}) == \
        f"memory pressure {shown} % (full, 10 s)"


@pytest.mark.parametrize("a, b, shown", [
    (2.97, 2.98, ("2.97 GB", "2.98 GB")), (2.996, 3.0, ("2.996 GB", "3.000 GB")), (3.0, 3.0, ("3.0 GB", "3.0 GB")),
    (2.5, 3.5, ("2.5 GB", "3.5 GB")), (0.5001, 0.5004, ("512.1 MB", "512.4 MB")),
    (2.98, 2.98 + 1e-9, ("3.0 GB", "3.0 GB")),  # apart by less than a MB: noise, not digits to show
    (1.0, 1.004, ("1.000 GB", "1.004 GB")),
])
def test_two_sizes_side_by_side_read_apart_where_they_differ(a, b, shown):
    assert apart(fmt_gb, a, b) == shown and apart(fmt_gb, b, a) == shown[::-1]
