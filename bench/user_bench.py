"""Benchmarks of the user's side: `res hook` and `res status`, each as a whole process.

r. The gate (`res hook` with `res serve` running): a light and a heavy command, against `python3 -c pass`.
h. `res hook` as Claude Code runs it before every Bash command: the console script, a PreToolUse JSON
   for the Bash tool on stdin, with game mode off and with game mode on (set by `res game on --for 1h`
   in a private state directory), against `python3 -c pass` (the floor of any Python command).
   Every output is checked: off, nothing on stdout or stderr; on, JSON whose updatedInput is the
   command with `unset DISPLAY WAYLAND_DISPLAY; ` in front. The commands take turns in every round.
i. `res status` over 200 entries (50 notes held by this process, 150 agent sessions queued behind a
   session cap of 0, so nothing starts: put in through the desired Writer, then one `res reconcile`)
   against `systemctl --user list-units --no-pager`, taking turns.

Both run the console script installed next to the interpreter that runs the benchmarks (what
`pip install` puts on a user's PATH; a version manager's shim in front of it is not res's cost), and
import `reconciler` from this checkout.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path

from common import PY, REPO, Broken, Figure, Report, ResEnv, median_ms, p90_ms, res_argv, spread, timed

HOOK_TARGET = 3.0
PREFIX = "unset DISPLAY WAYLAND_DISPLAY;"
COMMAND = "ls"
HOOK_INPUT = json.dumps({
    "session_id": "bench-h", "transcript_path": "/tmp/res-bench-h/transcript.jsonl", "cwd": "/tmp",
    "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
    "tool_input": {"command": COMMAND},
})


def _checkout_env(env: dict) -> dict:
    """`reconciler` imported from this checkout, whatever an editable install points at."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


# Every command here gets no stdin (DEVNULL) unless it is handed text (the hook's JSON).
_run = partial(timed, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------- h: res hook


def _check_off(r: subprocess.CompletedProcess) -> None:
    if r.returncode != 0 or r.stdout or r.stderr:
        raise Broken(f"res hook, game off: exit {r.returncode}, stdout {r.stdout.strip()[:200]!r}, "
                     f"stderr {r.stderr.strip()[-300:]!r} (expected no output, exit 0)")


def _check_on(r: subprocess.CompletedProcess) -> None:
    try:
        out = json.loads(r.stdout)
        inner = out["hookSpecificOutput"]
        command = inner["updatedInput"]["command"]
    except (ValueError, KeyError, TypeError):
        out, inner, command = None, {}, None
    if (r.returncode != 0 or r.stderr or not isinstance(command, str) or not command.startswith(PREFIX)
            or command[len(PREFIX):].strip() != COMMAND or inner.get("hookEventName") != "PreToolUse"
            or "permissionDecision" in inner or set(out or {}) != {"hookSpecificOutput"}):
        raise Broken(f"res hook, game on: exit {r.returncode}, stdout {r.stdout.strip()[:300]!r}, "
                     f"stderr {r.stderr.strip()[-300:]!r} (expected JSON rewriting the command to "
                     f"{PREFIX} {COMMAND})")


def bench_hook(report: Report, rounds: int) -> None:
    off, on = ResEnv("h0"), ResEnv("h1")
    res = res_argv()
    path_res = shutil.which("res")
    shim = path_res is not None and os.path.realpath(path_res) != os.path.realpath(res[0])
    try:
        env_off, env_on = _checkout_env(off.env), _checkout_env(on.env)
        for e in (off, on):  # what a loop would have written: the hook reads the table from it
            _write_gate_json(e.state)
        _, r = _run(res + ["game", "on", "--for", "1h"], env_on, str(on.work))
        if r.returncode != 0 or not r.stdout.startswith("game on until"):
            raise Broken(f"res game on --for 1h: exit {r.returncode}, stdout {r.stdout.strip()!r}, stderr {r.stderr.strip()!r}")
        if not (on.state / "desired" / "game.toml").is_file() or (off.state / "desired" / "game.toml").exists():
            raise Broken("res game on did not write the private game file (or wrote the wrong one)")

        commands = [
            ("python", [PY, "-c", "pass"], env_off, subprocess.DEVNULL, None),
            ("python -S", [PY, "-S", "-c", "pass"], env_off, subprocess.DEVNULL, None),
            ("off", res + ["hook"], env_off, HOOK_INPUT, _check_off),
            ("on", res + ["hook"], env_on, HOOK_INPUT, _check_on),
        ]
        if shim:  # what `res hook` costs through the PATH a user's settings.json would use, for context
            commands.append(("on, PATH res", [path_res, "hook"], env_on, HOOK_INPUT, _check_on))
        times: dict[str, list[float]] = {name: [] for name, *_ in commands}
        for i in range(rounds + 1):  # round 0 fills the bytecode cache and is not counted
            for name, argv, env, stdin, check in commands:
                t, r = _run(argv, env, str(off.work), stdin=stdin)
                if check is not None:
                    check(r)
                elif r.returncode != 0:
                    raise Broken(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                if i:
                    times[name].append(t)
    finally:
        off.close()
        on.close()

    py, t_off, t_on = median_ms(times["python"]), median_ms(times["off"]), median_ms(times["on"])
    py90, off90, on90 = p90_ms(times["python"]), p90_ms(times["off"]), p90_ms(times["on"])
    target = f"≤ {HOOK_TARGET:g}×"
    report.figures += [
        Figure("h", "res hook (game off) / python3 -c pass", t_off / py,
               f"median {t_off:.0f} vs {py:.0f} ms; p90 {off90:.0f} vs {py90:.0f} ms", target, t_off / py <= HOOK_TARGET),
        Figure("h", "res hook (game on) / python3 -c pass", t_on / py,
               f"median {t_on:.0f} vs {py:.0f} ms; p90 {on90:.0f} vs {py90:.0f} ms", target, t_on / py <= HOOK_TARGET),
        Figure("h", "res hook (game on), p90 / python3 -c pass, p90", on90 / py90, f"{on90:.0f} ms vs {py90:.0f} ms"),
    ]
    report.raw += [
        f"h  python3 -c pass ({PY})  {spread(times['python'], p90=True)}",
        f"h  python3 -S -c pass (no site-packages)       {spread(times['python -S'], p90=True)}",
        f"h  res hook, game off ({res[-1]})  {spread(times['off'], p90=True)}",
        f"h  res hook, game on                           {spread(times['on'], p90=True)}",
        f"h  p90 ratios: off {off90 / py90:.2f}×, on {on90 / py90:.2f}×; every output checked "
        f"({rounds + 1} rounds: off no output, on `{PREFIX} {COMMAND}`)",
    ]
    if shim:
        report.raw.append(f"h  res hook, game on, through PATH ({path_res}) {spread(times['on, PATH res'], p90=True)} "
                          f"= {median_ms(times['on, PATH res']) / py:.2f}× python3 -c pass (context: the shim's cost)")


def _write_gate_json(state: Path) -> None:
    from reconciler.config import gatefile
    from reconciler.core.gate import make_table, table_data

    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    gatefile.write(state / "gate.json", {"v": 1, "wait_s": 30, "heavy_mem_gb": 2,
                                         "table": table_data(make_table(gatefile.shipped_table_data())), "learned": {}})


# ---------------------------------------------------------------- r: the gate's decision

GATE_LIGHT_TARGET, GATE_HEAVY_MS = 1.2, 50.0


def _hook_input(command: str, cwd: str) -> str:
    return json.dumps({"session_id": "bench-r", "transcript_path": "/tmp/res-bench-r/t.jsonl", "cwd": cwd,
                       "permission_mode": "bypassPermissions", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command, "description": "bench"}})


def bench_gate(report: Report, rounds: int) -> None:
    """r. The gate with `res serve` running (it wrote gate.json and answers "would this fit?"): `res
    hook` on a light command (`ls -la`: no output) and on a heavy one (`pytest -q`: rewritten to `res
    run --wait …` after asking the loop), against `python3 -c pass`, taking turns. Every output checked."""
    env = ResEnv("r", user_reserve_gb=0, small_headroom_gb=0, user_reserve_cpus=0, game_reserve_cpus=0)
    res = res_argv()
    try:
        env.start_serve()
        hook_env = _checkout_env(env.env)
        light, heavy = _hook_input("ls -la", str(env.work)), _hook_input("pytest -q", str(env.work))

        def light_ok(r):
            if r.returncode != 0 or r.stdout or r.stderr:
                raise Broken(f"res hook on `ls -la`: exit {r.returncode}, stdout {r.stdout[:200]!r}, stderr {r.stderr[-300:]!r}")

        def heavy_ok(r):
            try:
                command = json.loads(r.stdout)["hookSpecificOutput"]["updatedInput"]["command"]
            except (ValueError, KeyError, TypeError):
                command = ""
            if r.returncode != 0 or " run --wait --queue --start-within " not in command or not command.endswith("-- bash -c 'pytest -q'"):
                raise Broken(f"res hook on `pytest -q`: exit {r.returncode}, stdout {r.stdout[:300]!r}, stderr {r.stderr[-300:]!r}")

        commands = [("python", [PY, "-c", "pass"], subprocess.DEVNULL, None),
                    ("light", res + ["hook"], light, light_ok), ("heavy", res + ["hook"], heavy, heavy_ok)]
        times: dict[str, list[float]] = {name: [] for name, *_ in commands}
        for i in range(rounds + 1):
            for name, argv, stdin, check in commands:
                t, r = _run(argv, hook_env, str(env.work), stdin=stdin)
                if check is not None:
                    check(r)
                if i:
                    times[name].append(t)
        env.finish("the gate's questions")
    finally:
        env.close()
    py, t_light, t_heavy = median_ms(times["python"]), median_ms(times["light"]), median_ms(times["heavy"])
    report.figures += [
        Figure("r", "res hook, light command / python3 -c pass", t_light / py, f"median {t_light:.0f} vs {py:.0f} ms",
               f"≤ {GATE_LIGHT_TARGET:g}×", t_light / py <= GATE_LIGHT_TARGET),
        Figure("r", "res hook, heavy command: the decision / 50 ms", (t_heavy - t_light) / GATE_HEAVY_MS,
               f"{t_heavy - t_light:.0f} ms more than a light one (median {t_heavy:.0f} ms)", "≤ 1×",
               t_heavy - t_light <= GATE_HEAVY_MS),
    ]
    report.raw += [f"r  python3 -c pass                 {spread(times['python'], p90=True)}",
                   f"r  res hook, `ls -la` (light)      {spread(times['light'], p90=True)}",
                   f"r  res hook, `pytest -q` (heavy)   {spread(times['heavy'], p90=True)} (asks the loop; rewritten, checked)"]


# ---------------------------------------------------------------- i: res status


NOTES, SESSIONS = 50, 150
UNIT_LINE = re.compile(r"^\W*(\S+\.[a-z]+)\s+(loaded|not-found|masked|error|bad-setting)\s")  # a unit in list-units
# Sessions wait behind a cap of 0 running sessions, so nothing is started; CPUs are not reserved so
# that a small machine still grants the notes.
STATUS_POLICY = dict(max_concurrent_sessions=0, user_reserve_cpus=0, game_reserve_cpus=0)


def _fill(env: ResEnv) -> None:
    """50 notes held by this process and 150 queued agent sessions, through the desired Writer."""
    from reconciler.desired.writer import Writer
    from reconciler.config.paths import Paths

    writer = Writer(Paths(env.state))
    now = time.time()
    for n in range(NOTES):
        writer.add(dict(title=f"bench note {n} (build cache)", project="bench-notes", mem_gb=0.02, cpus=0.01,
                        est_s=3600, created=now, owner_pid=os.getpid()), "note")
    for n in range(SESSIONS):
        writer.add(dict(title=f"bench session {n} fix the flaky test", project=f"bench-proj-{n % 7}", mem_gb=0.5,
                        cpus=0.1, est_s=1800, created=now, queue=True, cmd=["true"], cwd=str(env.work),
                        agent="claude"), "job")


def bench_status(report: Report, rounds: int) -> None:
    env, empty = ResEnv("i", **STATUS_POLICY), ResEnv("i0", **STATUS_POLICY)
    res = res_argv()
    total = NOTES + SESSIONS
    try:
        renv, eenv = _checkout_env(env.env), _checkout_env(empty.env)
        _fill(env)
        for e, where in ((renv, env), (eenv, empty)):  # one pass each: the entries recorded, a snapshot taken
            _, r = _run(res + ["reconcile"], e, str(where.work), timeout=120)
            if r.returncode != 0:
                raise Broken(f"res reconcile: exit {r.returncode}: {r.stdout.strip()[-300:]} {r.stderr.strip()[-300:]}")
        _, r = _run(res + ["status", "--json"], renv, str(env.work))
        try:
            jobs = json.loads(r.stdout)["jobs"]
        except (ValueError, KeyError, TypeError):
            raise Broken(f"res status --json: exit {r.returncode}: {r.stdout.strip()[:200]!r} {r.stderr.strip()[-300:]!r}") from None
        states: dict[str, int] = {}
        for j in jobs:
            key = f"{j['kind']} {j['state']}"
            states[key] = states.get(key, 0) + 1
        if len(jobs) != total:
            raise Broken(f"res status shows {len(jobs)} entries, not {total}: {states}")
        started = [j["id"] for j in jobs if j["kind"] == "job" and j["state"] not in ("queued",)]
        if started:
            raise Broken(f"sessions were to wait behind a cap of 0, but {len(started)} did not: {states}")

        times: dict[str, list[float]] = {"status": [], "systemctl": [], "empty": []}
        lines = units = 0
        for i in range(rounds + 1):  # round 0 warms the caches and is not counted
            t_sysd, r = _run(["systemctl", "--user", "list-units", "--no-pager"], env.env, str(env.work))
            if r.returncode != 0:
                raise Broken(f"systemctl --user list-units: exit {r.returncode}: {r.stderr.strip()}")
            units = sum(1 for line in r.stdout.splitlines() if UNIT_LINE.match(line))
            t_status, r = _run(res + ["status"], renv, str(env.work))
            lines = sum(1 for line in r.stdout.splitlines() if line.startswith("r-"))
            if r.returncode != 0 or lines != total:
                raise Broken(f"res status: exit {r.returncode}, {lines} entry lines (expected {total}): "
                             f"{r.stderr.strip()[-300:]}")
            t_empty, r = _run(res + ["status"], eenv, str(empty.work))
            if r.returncode != 0 or not r.stdout.startswith("no entries"):
                raise Broken(f"res status, no entries: exit {r.returncode}: {r.stdout.strip()[:200]!r} "
                             f"{r.stderr.strip()[-300:]!r}")
            if i:
                times["systemctl"].append(t_sysd)
                times["status"].append(t_status)
                times["empty"].append(t_empty)
        # The same with `res serve` running: the loop answers `res status` (its models are loaded).
        env.start_serve()
        times["serve"] = []
        for i in range(rounds + 1):
            t_serve, r = _run(res + ["status"], renv, str(env.work))
            served = sum(1 for line in r.stdout.splitlines() if line.startswith("r-"))
            if r.returncode != 0 or served != total:
                raise Broken(f"res status (loop running): exit {r.returncode}, {served} entry lines: {r.stderr.strip()[-300:]}")
            if i:
                times["serve"].append(t_serve)
        env.stop_serve()
        left = env.units()
        if left:
            raise Broken(f"units of ours exist, though nothing was to start: {left}")
    finally:
        env.close()
        empty.close()

    st, sysd, st0, sv = (median_ms(times[k]) for k in ("status", "systemctl", "empty", "serve"))
    report.figures += [
        Figure("i", f"res status ({total} entries, loop running) / systemctl list-units", sv / sysd,
               f"median {sv:.0f} ms vs {sysd:.1f} ms"),
        Figure("i", f"res status ({total} entries) / systemctl list-units", st / sysd,
               f"median {st:.0f} ms vs {sysd:.1f} ms"),
        Figure("i", f"res status ({total} entries) / res status (none)", st / st0,
               f"median {st:.0f} ms vs {st0:.0f} ms: {(st - st0) / total:.2f} ms an entry"),
    ]
    report.raw += [
        f"i  res status, {total} entries ({', '.join(f'{v} {k}' for k, v in sorted(states.items()))}; "
        f"{lines} lines)  {spread(times['status'], p90=True)}",
        f"i  res status, no entries                      {spread(times['empty'], p90=True)}",
        f"i  res status, {total} entries, res serve answering  {spread(times['serve'], p90=True)}",
        f"i  systemctl --user list-units --no-pager (~{units} units)  {spread(times['systemctl'], p90=True)}",
    ]
