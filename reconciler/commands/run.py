"""The request commands on the command line: `res run`, `res note`, `res release`, `res wait`. Each
makes its request from the caller's world (its cwd, its PATH, its environment, its process), asks the
loop (or runs the passes here: ops/requests.py), and prints one line or one JSON object.

Import-light: a `res run` the loop answers loads no pydantic, no D-Bus."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from reconciler.commands.base import Fail, decide, quiet_logs, say, the_policy
from reconciler.config.environ import public_env, resolve_program
from reconciler.config.gitrepo import checkout, project_name
from reconciler.config.paths import Paths


def cmd_run(a, paths: Paths) -> int:
    cmd = list(a.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise Fail("res: no command given (res run --mem 1G --for 5m -- COMMAND ...)", 2)
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise Fail("res: the current directory does not exist any more; cd somewhere that does") from None
    from reconciler.config.environ import SECRET_VALUE

    for i, arg in enumerate(cmd):
        if any(0xDC80 <= ord(c) <= 0xDCFF for c in arg):
            from reconciler.core.invalid import quoted

            raise Fail(f"res: argument {i} of the command, {quoted(arg)[:60]}, is not UTF-8 text; res keeps the "
                       "command in queue.toml, which holds text only: pass such bytes in a file or the environment", 2)
        if SECRET_VALUE.search(arg):  # it would be written to queue.toml, state.db and the unit
            raise Fail(f"res: argument {i} of the command looks like a secret (a key, a token, a URL with a "
                       "password); pass it in the environment instead: res never writes those down", 2)
    caller = _caller_env()
    program = resolve_program(cmd[0], cwd, caller.get("PATH", ""))
    if program is None:
        raise Fail(f"res: command not found or not executable: {cmd[0]}", 1)
    title = _check_title(a.title if a.title is not None else _title_from(cmd))
    cmd[0] = program  # the program this shell would run, not the one on systemd's PATH
    env = public_env(caller)
    repo = checkout(cwd)
    if a.start_within is not None and not (a.wait and a.queue):
        raise Fail("res: --start-within goes with --wait --queue", 2)
    auto = [name for name, value in (("mem", a.mem), ("cpus", a.cpus), ("for", a.est)) if value == "auto"]
    if auto and a.agent != "none":
        raise Fail("res: an agent session is not sized automatically: give --mem, --cpus and --for", 2)
    sizes = _given(mem_gb=a.mem, cpus=a.cpus, est_s=a.est)
    fields = dict(title=title,
                  project=a.project or project_name(cwd, repo), **{k: v for k, v in sizes.items() if v != "auto"},
                  created=time.time(), queue=a.queue, lock=a.lock, force=a.force, cmd=cmd, cwd=cwd, env=env,
                  agent=a.agent, max_cost_usd=a.max_cost_usd, max_duration_s=a.max_duration,
                  max_iterations=a.max_iterations, **_given(on="local" if a.gated else a.on),
                  **({"gated": True} if a.gated else {}), **({"auto": auto} if auto else {}), **_asker(a, caller, repo),
                  request_id=_request_id(a))
    if a.start_within is not None:  # never started after it, whatever becomes of this call (core.admission.start_missed)
        fields["start_by"] = fields["created"] + a.start_within
    fields.update(_agent_session(a.agent, cmd, cwd, caller))
    if a.agent != "none" and not a.json:
        from reconciler.core.agents import unread_output

        unread = unread_output(a.agent, cmd)
        if unread:  # said once, before it runs: a budget that cannot bite is no budget
            print(f"res: note: {unread}: a cost budget sees its spend only then", file=sys.stderr)
    if a.tail is not None and not a.wait:
        raise Fail("res: --tail goes with --wait", 2)
    if not a.wait:
        return _submit(paths, "job", fields, a.json)
    code, line, data = _submit_answer(paths, "job", fields, within=a.start_within)
    state = (data or {}).get("state")
    # "done": it ended before the answer came (a quick job, a busy machine, the same request asked
    # again): still its output and its own exit code, never the submit's 0
    if state not in ("queued", "running", "starting", "exited", "done") or code != 0:
        _print_answer(code, line, data, a.json)
        return code
    return _wait_for_job(paths, data, line, state, a, fields.get("start_by"))


def _wait_for_job(paths: Paths, data: dict, line: str, state: str, a, start_by: float | None = None) -> int:
    """`res run --wait`: the job's output as it comes (stdout), res's own lines on stderr (as
    `systemd-run --wait` does), the job's exit code."""
    from reconciler.loop.waiting import LogFollower, ThrottleWatch, tail_lines, wait_for

    job_id = data["id"]

    def say(text: str) -> None:
        if not a.json:
            print(text, file=sys.stderr, flush=True)

    if state != "done":  # (its done line comes at the end, as for any other)
        say(line)  # started, or queued (once: position, est. start, what it waits for)
    started = (lambda: say(f"{job_id} started; log {follow.path}")) if state == "queued" else None
    quiet = a.json or a.tail is not None
    follow = LogFollower(Path(data.get("log") or paths.log(job_id)), on_start=started, echo=not quiet,
                         locate=(lambda: _log_of(paths, job_id)) if state == "queued" else None)
    throttle = ThrottleWatch(paths, job_id)

    deadline = _start_deadline(state, start_by)

    def on_idle() -> None:
        follow.poll()
        throttle.poll()
        if deadline is not None and not follow.seen and time.monotonic() >= deadline:
            raise _NotStarted

    queued = data  # where it waited when asked: the busy line's position and est. start
    while True:
        try:
            code, done, data = wait_for(paths, the_policy, job_id, None, on_idle=on_idle, look_by=deadline)
        except _NotStarted:
            deadline = None
            gave_up = _withdraw(paths, job_id, queued, a.start_within)
        else:  # a pass refused it at its start_by before this call looked (core.admission.start_missed): the same
            missed = ((data or {}).get("reason") or {}).get("code") == "start_missed"
            gave_up = _busy_line(job_id, queued, a.start_within) if missed else None
            if not missed:
                break
        if gave_up is not None:  # withdrawn before it started: the busy line, exit 3
            print(json.dumps(dict(queued, state="withdrawn", exit_code=3, line=gave_up)) if a.json else gave_up,
                  file=sys.stdout if a.json else sys.stderr)
            return 3
        # it started meanwhile: wait for it as if nothing happened
    if not follow.seen:
        follow.poll(relocate=True)  # started and ended between two looks: where it ran
    if not quiet:
        follow.poll()  # the rest, up to the line the unit's own stop step wrote
    elif a.tail is not None and not a.json:
        sys.stdout.buffer.write(tail_lines(follow.path, a.tail))
        sys.stdout.flush()
    if a.json:
        out = dict(data or {"id": job_id}, exit_code=code, line=done)
        if a.tail is not None:
            out["tail"] = tail_lines(follow.path, a.tail).decode("utf-8", "replace")
        print(json.dumps(out))
    else:
        print(done, file=sys.stderr)
    return code


WITHDRAW_WAIT_S = 0.5  # how long a --start-within that ran out waits for its withdrawal's answer


class _NotStarted(Exception):
    """--start-within passed and the job has not started."""


def _start_deadline(state: str, start_by: float | None) -> float | None:
    """When `--start-within` gives up on a queued job (time.monotonic()): its start_by, counted from
    when it was asked (the whole call, its first answer included, keeps the caller's limit); None
    without the flag or once the job runs. Never sooner: the plan's est. start may rest on guesses."""
    if start_by is None or state != "queued":
        return None
    return time.monotonic() + max(start_by - time.time(), 0.0)


def _withdraw(paths: Paths, job_id: str, data: dict, within: int) -> str | None:
    """Withdraw a job that did not start in time: its busy line, or None if it started meanwhile
    (release leaves a running job alone)."""
    from reconciler.loop.protocol import Release
    from reconciler.observed.procs import process_chain

    def local(engine):
        from reconciler.ops import requests as ops

        return ops.release(engine, engine.tick, job_id, False)

    unsure = ""
    try:  # a moment at most: its start_by keeps it from starting from now on whether or not this lands
        code, _, now = decide(paths, Release(job_id, stop=False, who=process_chain(os.getpid())), local,
                              wait_s=WITHDRAW_WAIT_S)
    except Fail:  # the loop did not answer by then (stopped, or state.db held)
        code, now, unsure = 1, None, f" (res status {job_id} says if it started just before)"
    if code != 0 and (now or {}).get("state") in ("running", "starting", "exited"):
        return None
    return _busy_line(job_id, data, within, unsure)


def _busy_line(job_id: str, data: dict, within: int, unsure: str = "") -> str:
    """`busy: r-7 would not start within 30 s (position 1; est. start ~14:09); withdrawn; retry …`."""
    from reconciler.config.zone import zone_of
    from reconciler.render.reasons import queued_line

    reason = (data or {}).get("reason") or {}
    try:
        where = queued_line(reason, zone_of(the_policy()))
    except (KeyError, TypeError, ValueError):
        where = "still queued"
    retry = "retry later or work on something else"
    if type(reason.get("est_start")) in (int, float):
        from reconciler.render.text import fmt_clock

        retry = f"retry after ~{fmt_clock(reason['est_start'], zone_of(the_policy()))} or work on something else"
    return f"busy: {job_id} would not start within {within} s ({where}); withdrawn{unsure}; {retry}"


def _log_of(paths: Paths, job_id: str) -> Path:
    """Where a job's log is, as its record says (read-only)."""
    from reconciler.recorded.store import Store

    store = Store.open(paths, readonly=True)
    try:
        return paths.log(job_id, store.log_dir(job_id))
    finally:
        store.close()


def cmd_note(a, paths: Paths) -> int:
    from reconciler.observed.procs import alive, note_owner, parse_stat

    if a.until_expiry:
        owner, name = None, None
    elif a.owner is not None:
        try:
            if not alive(a.owner):  # a zombie ended already: it would free the note at once
                raise OSError
            with open(f"/proc/{a.owner}/stat") as f:
                name = parse_stat(f.read())[0]
        except (OSError, ValueError):
            raise Fail(f"res: --owner {a.owner}: no such process", 2) from None
        owner = a.owner
    else:
        owner, name = note_owner(os.getppid())
    cwd = os.getcwd()
    repo = checkout(cwd)
    fields = dict(title=_check_title(a.title), project=a.project or project_name(cwd, repo), mem_gb=a.mem,
                  est_s=a.est, created=time.time(), force=a.force, owner_pid=owner, owner_name=name,
                  **_given(cpus=a.cpus), **_asker(a, _caller_env(), repo), request_id=_request_id(a))
    return _submit(paths, "note", fields, a.json)


def _request_id(a) -> str:
    """The caller's name for this request (`--request-id`), else one made up here: either way the line
    a caller gets when no answer comes names it, and asking again with it is the same request."""
    if getattr(a, "request_id", None):
        return a.request_id
    return "q-" + os.urandom(6).hex()


def _asker(a, env: dict[str, str], repo) -> dict:
    """Who asks: --by/--task, else the environment, the process tree, the git branch (observed.asker)."""
    from reconciler.observed.asker import asker

    try:
        return asker(env, os.getppid(), repo, by=a.by, task=a.task)
    except ValueError as e:
        raise Fail(f"res: {e}", 2) from None


def _submit(paths: Paths, kind: str, fields: dict, as_json: bool = False) -> int:
    code, line, data = _submit_answer(paths, kind, fields)
    _print_answer(code, line, data, as_json)
    return code


def _print_answer(code: int, line: str, data: dict | None, as_json: bool) -> None:
    """The one line (stderr for an error), or with --json one object on stdout with the line and the
    exit code beside the entry."""
    if as_json:
        print(json.dumps(dict(data or {}, exit_code=code, line=line)))
    else:
        say(line, code)


def _submit_answer(paths: Paths, kind: str, fields: dict, within: float | None = None) -> tuple[int, str, dict | None]:
    """The loop's answer (or the passes' here). `within`: --start-within, which bounds this wait too."""
    async def local(engine, resume=False):
        from reconciler.ops import requests as ops

        decided = await ops.submit(engine, engine.tick, kind, fields, resume=resume)
        hint = ops.request_hint(engine, kind, fields)
        if hint:
            print(hint, file=sys.stderr)
        return decided

    from reconciler.loop.protocol import Submit
    from reconciler.observed.procs import process_chain

    paths.ensure()
    return decide(paths, Submit(kind, fields, who=process_chain(os.getpid())), local,
                   resume=lambda engine: local(engine, resume=True), wait_s=within)


def cmd_release(a, paths: Paths) -> int:
    def local(engine):
        from reconciler.ops import requests as ops

        return ops.release(engine, engine.tick, a.id, a.stop)

    from reconciler.loop.protocol import Release
    from reconciler.observed.procs import process_chain

    code, line, data = decide(paths, Release(a.id, stop=a.stop, who=process_chain(os.getpid())), local)
    _print_answer(code, line, data, a.json)
    return code


def cmd_wait(a, paths: Paths) -> int:
    """Exits with the job's own code; 124 timeout, 125 never ran, 1 error (README: exit codes)."""
    from reconciler.loop.waiting import ThrottleWatch, wait_for

    quiet_logs()
    code, line, data = wait_for(paths, the_policy, a.id, a.timeout, on_idle=ThrottleWatch(paths, a.id).poll)
    if a.json:
        print(json.dumps(dict(data or {"id": a.id}, exit_code=code, line=line)))
    else:
        print(line, file=sys.stderr if line.startswith("res: ") else sys.stdout)
    return code


def _caller_env() -> dict[str, str]:
    """Our environment as the calling shell had it (environ.caller_environment: what pyenv added on
    its way to us taken back, judged against our parent's own environment)."""
    from reconciler.config.environ import caller_environment

    env = dict(os.environ)
    if "PYENV_ROOT" not in env:
        return env
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            parent = dict(kv.decode("utf-8", "surrogateescape").partition("=")[::2] for kv in f.read().split(b"\0") if kv)
    except OSError:
        parent = None
    return caller_environment(env, parent)


def _agent_session(agent: str, cmd: list[str], cwd: str, env: dict[str, str]) -> dict:
    """What the agent's own configuration says of the session (the model it runs, the CLI's version,
    a resumed thread's usage so far: config/agentmodel.py), for the agents whose output does not say
    it (its record's model_source, core/agentclis.py). Never fails a submit: what cannot be read is left
    unknown."""
    from reconciler.core.agentclis import CLIS

    source = CLIS[agent].model_source if agent in CLIS else None
    if source is None:
        return {}
    from reconciler.config import agentmodel

    try:
        return getattr(agentmodel, source)(cmd, cwd, env)
    except (OSError, ValueError, RecursionError):
        return {}


def _given(**values) -> dict:
    """The flags that were given; the others take the request model's defaults (one home)."""
    return {k: v for k, v in values.items() if v is not None}


def _title_from(cmd: list[str]) -> str:
    """The command as a title: the program's own name, not its path (`python3 -m pytest`)."""
    t = " ".join(" ".join([os.path.basename(cmd[0]) or cmd[0], *cmd[1:]]).split())
    return t if len(t) <= 80 else t[:79] + "…"


def _check_title(title: str) -> str:
    if len(title) > 200:
        raise Fail(f"res: --title is {len(title)} characters; at most 200", 2)
    if not title.strip():
        raise Fail("res: --title is empty", 2)
    return title
