"""The command line (DESIGN §8). Exit codes: 0 ok, 1 error (one line `res: …`), 2 usage, 3 busy.

Import-light at the top: `res run` parses, writes and asks the loop; the heavy libraries (pydantic,
dbus-fast, APScheduler) load only in the commands that use them.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time

from reconciler.config.environ import public_env, resolve_program
from reconciler.config.paths import Paths
from reconciler.core.quantities import BadValue, parse_count, parse_cpus, parse_duration_s, parse_pid, parse_size_gb, parse_usd


class Fail(Exception):
    """Exit with this code after printing this one line."""

    def __init__(self, line: str, code: int = 1):
        super().__init__(line)
        self.line, self.code = line, code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise Fail(f"res: {message} (see: {self.prog} --help)", 2)


_VALUED = ("--mem", "--cpus", "--for", "--timeout")


def _join_negative(argv: list[str]) -> list[str]:
    """`--mem -1G` is a negative value, not a missing one: pass it on as `--mem=-1G`, so it gets the
    value's own error instead of argparse's "expected one argument"."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return out + argv[i:]
        if tok in _VALUED and i + 1 < len(argv) and len(argv[i + 1]) > 1 and argv[i + 1][0] == "-" \
                and (argv[i + 1][1].isdigit() or argv[i + 1][1] == "."):
            out.append(f"{tok}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def _arg(parse, what):
    def conv(text):
        if text.strip().startswith("-"):
            raise argparse.ArgumentTypeError(f"{what} {text!r}: must be more than 0")
        try:
            return parse(text, what)
        except BadValue as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    conv.__name__ = what
    return conv


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="res", description="Resources for coding agents on a shared workstation.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a command as a job with reserved memory and CPUs")
    run.add_argument("--mem", required=True, type=_arg(parse_size_gb, "--mem"), help="memory, e.g. 512M, 10G")
    run.add_argument("--cpus", type=_arg(parse_cpus, "--cpus"), default=None,
                     help="CPUs it keeps busy (default 0.5); its share when CPUs are contended")
    run.add_argument("--for", dest="est", required=True, type=_arg(parse_duration_s, "--for"), help="estimate, e.g. 40m")
    run.add_argument("--title")
    run.add_argument("--project")
    run.add_argument("--queue", action="store_true", help="wait in the queue instead of being refused")
    run.add_argument("--lock", help="never run two jobs holding the same KEY at once")
    run.add_argument("--force", action="store_true", help="ignore the ledger (not the reserve, not locks)")
    run.add_argument("--agent", default="none", choices=["none", "claude"],
                     help="digest the output of this agent kind (claude: stream-json); none: a plain command")
    run.add_argument("--max-cost-usd", type=_arg(parse_usd, "--max-cost-usd"), default=None,
                     help="stop the job once its spend passes this (agent sessions: policy default)")
    run.add_argument("--max-duration", type=_arg(parse_duration_s, "--max-duration"), default=None,
                     help="stop the job once it has run this long")
    run.add_argument("--max-iterations", type=_arg(parse_count, "--max-iterations"), default=None,
                     help="stop an agent session after this many turns")
    run.add_argument("--wait", action="store_true",
                     help="wait until the job ends: its output as it comes (or --tail N at the end), then the "
                          "done line on stderr; exit with the job's own code")
    run.add_argument("--tail", type=_arg(parse_count, "--tail"), default=None, metavar="N",
                     help="with --wait: print only the last N lines of the output, once the job ended")
    run.add_argument("--json", action="store_true", help="one JSON object (with --wait: once the job ended)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")

    note = sub.add_parser("note", help="reserve memory for foreground work")
    note.add_argument("--mem", required=True, type=_arg(parse_size_gb, "--mem"))
    note.add_argument("--cpus", type=_arg(parse_cpus, "--cpus"), default=None)
    note.add_argument("--for", dest="est", required=True, type=_arg(parse_duration_s, "--for"))
    note.add_argument("--project")
    note.add_argument("--force", action="store_true")
    owner = note.add_mutually_exclusive_group()
    owner.add_argument("--owner", type=_arg(parse_pid, "--owner"), metavar="PID",
                       help="free the note when this process ends (default: the agent session that asks, "
                            "else the calling shell)")
    owner.add_argument("--until-expiry", action="store_true",
                       help="no owner: only --for's end or res release frees it")
    note.add_argument("--json", action="store_true")
    note.add_argument("title")

    st = sub.add_parser("status", help="what runs, what waits, what agents may use")
    st.add_argument("id", nargs="?")
    st.add_argument("--json", action="store_true")
    st.add_argument("--all", action="store_true", help="also entries that finished over 5 minutes ago")

    wt = sub.add_parser("wait", help="wait until a job is done; exit with its own code (README: exit codes)")
    wt.add_argument("id")
    wt.add_argument("--timeout", type=_arg(parse_duration_s, "--timeout"), default=None,
                    help="give up after this long (exit 124)")
    wt.add_argument("--json", action="store_true")

    rl = sub.add_parser("release", help="remove a queued entry or a note; --stop a running job")
    rl.add_argument("id")
    rl.add_argument("--stop", action="store_true")
    rl.add_argument("--json", action="store_true")

    rc = sub.add_parser("reconcile", help="run one reconcile pass (or show its plan with --dry-run)")
    _reconcile_args(rc)

    ob = sub.add_parser("observe", help="print the world as the planner sees it")
    ob.add_argument("--json", action="store_true")

    sv = sub.add_parser("serve", help="the reconciler loop")
    sv.add_argument("-v", "--verbose", action="store_true")
    sv.add_argument("--standby", action="store_true",
                    help="if a loop already runs for this state directory, wait and take over when it ends")

    it = sub.add_parser("init", help="lay down the annotated desired-state files (queue.toml, game.toml)")
    it.add_argument("--force", action="store_true")

    gm = sub.add_parser("game", help="game mode: the user's bigger reserve, agents yield CPU and IO")
    gm.add_argument("action", choices=["on", "off", "status"])
    gm.add_argument("--for", dest="length", type=_arg(parse_duration_s, "--for"), default=None,
                    help="how long (default: the policy's game_hours)")

    hk = sub.add_parser("hook", help="Claude Code PreToolUse hook for Bash (reads JSON on stdin)")
    hk.add_argument("--print-config", action="store_true", help="print the settings.json snippet")

    hs = sub.add_parser("hist", help="what past jobs of each kind used, and what to ask for")
    hs.add_argument("--project")
    hs.add_argument("--changes", action="store_true",
                    help="the changes to the policy, game and queue files: by res (and who asked) or outside it")

    cl = sub.add_parser("clean", help="stale agent scratch and dead litter in /tmp (lists; --yes removes)")
    cl.add_argument("--yes", action="store_true")

    sub.add_parser("adopt", help="move running agent sessions (claude) into the agents slice")

    sub.add_parser("shell-init", help="print the alias line that starts new agent sessions in the slice")

    se = sub.add_parser("service", help="res serve as a user service: install, uninstall, status")
    se.add_argument("action", choices=["install", "uninstall", "status"])

    sub.add_parser("doctor", help="check what res needs from this machine; one line per gap, with the fix")
    return p


def _reconcile_args(rc: argparse.ArgumentParser) -> None:
    rc.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    rc.add_argument("--json", action="store_true")
    rc.add_argument("--world", help="plan against a snapshot from `res observe --json`")


# ---------------------------------------------------------------- helpers


def _policy():
    from reconciler.config.policy import PolicyError, load_policy

    try:
        return load_policy()
    except PolicyError as e:
        raise Fail(f"res: {e}") from None


def _project(cwd: str) -> str:
    d = cwd
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return os.path.basename(d) or d
        parent = os.path.dirname(d)
        if parent == d:
            return os.path.basename(cwd) or cwd
        d = parent


def _caller_env() -> dict[str, str]:
    """Our environment as the calling shell had it (environ.caller_environment: a pyenv shim's
    additions taken back)."""
    from reconciler.config.environ import caller_environment

    env = dict(os.environ)
    if "PYENV_ROOT" not in env:
        return env
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            parent = dict(kv.decode("utf-8", "surrogateescape").partition("=")[::2] for kv in f.read().split(b"\0") if kv)
    except OSError:
        parent = None
    return caller_environment(env, os.path.dirname(os.path.abspath(sys.argv[0])), parent)


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


def _decide(paths: Paths, request: dict, local, resume=None) -> tuple[int, str, dict | None]:
    """Ask the running loop; without one, run the passes here under the same lock. `resume`: what
    to run here instead of `local` when the loop took the request and ended before answering (it may
    have acted on it already)."""
    from reconciler.loop.client import NoAnswer, NoDaemon, Unanswered, ask

    fn = local
    # Until the loop has taken the request; once it has, it says within how long it answers (its
    # policy's answer_timeout_s), and the wait becomes that (loop.client.ask).
    timeout = 60.0
    try:
        answer = ask(paths.socket, request, timeout=timeout)
        if answer.get("hint"):
            print(answer["hint"], file=sys.stderr)
        return answer["code"], answer["line"], answer.get("data")
    except NoAnswer:
        fn = resume or local
    except NoDaemon:
        pass
    except Unanswered as e:
        if e.accepted:  # written, not decided: say so, so nothing starts behind the caller's back
            raise Fail(f"res: the reconciler loop took {e.accepted} but did not decide it; it may "
                       f"still start (res status {e.accepted}; res release {e.accepted} withdraws it)") from None
        raise Fail("res: the reconciler loop did not answer in time; see res status") from None
    import asyncio

    return asyncio.run(_with_engine(paths, fn))


def _quiet_logs() -> None:
    """A one-shot command says what matters in its own lines; the passes' log records (meant for
    `res serve`'s log) must not reach stderr as extra, unprefixed lines."""
    import logging

    logging.getLogger("res").addHandler(logging.NullHandler())


async def _with_engine(paths: Paths, fn):
    from reconciler.loop.tick import with_engine

    _quiet_logs()
    return await with_engine(paths, _policy(), fn)


# ---------------------------------------------------------------- commands


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
    fields = dict(title=title,
                  project=a.project or _project(cwd), mem_gb=a.mem, est_s=a.est,
                  created=time.time(), queue=a.queue, lock=a.lock, force=a.force, cmd=cmd, cwd=cwd, env=env,
                  agent=a.agent, max_cost_usd=a.max_cost_usd, max_duration_s=a.max_duration,
                  max_iterations=a.max_iterations, **_given(cpus=a.cpus))
    if a.tail is not None and not a.wait:
        raise Fail("res: --tail goes with --wait", 2)
    if not a.wait:
        return _submit(paths, "job", fields, a.json)
    code, line, data = _submit_answer(paths, "job", fields)
    state = (data or {}).get("state")
    if state not in ("queued", "running", "starting", "exited") or code != 0:
        _print_answer(code, line, data, a.json)
        return code
    return _wait_for_job(paths, data["id"], line, state, a)


def _wait_for_job(paths: Paths, job_id: str, line: str, state: str, a) -> int:
    """`res run --wait`: the job's output as it comes (stdout), res's own lines on stderr (as
    `systemd-run --wait` does), the job's exit code."""
    from reconciler.loop.waiting import LogFollower, tail_lines, wait_for

    def say(text: str) -> None:
        if not a.json:
            print(text, file=sys.stderr, flush=True)

    log = paths.log(job_id)
    say(line)  # started, or queued (once: position, est. start, what it waits for)
    started = (lambda: say(f"{job_id} started; log {log}")) if state == "queued" else None
    quiet = a.json or a.tail is not None
    follow = LogFollower(log, on_start=started, echo=not quiet)
    code, done, data = wait_for(paths, _policy, job_id, None, on_idle=follow.poll)
    if not quiet:
        follow.poll()  # the rest, up to the line the unit's own stop step wrote
    elif a.tail is not None and not a.json:
        sys.stdout.buffer.write(tail_lines(log, a.tail))
        sys.stdout.flush()
    if a.json:
        out = dict(data or {"id": job_id}, exit_code=code, line=done)
        if a.tail is not None:
            out["tail"] = tail_lines(log, a.tail).decode("utf-8", "replace")
        print(json.dumps(out))
    else:
        print(done, file=sys.stderr)
    return code


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
    fields = dict(title=_check_title(a.title), project=a.project or _project(os.getcwd()), mem_gb=a.mem,
                  est_s=a.est, created=time.time(), force=a.force, owner_pid=owner, owner_name=name,
                  **_given(cpus=a.cpus))
    return _submit(paths, "note", fields, a.json)


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
        _say(line, code)


def _submit_answer(paths: Paths, kind: str, fields: dict) -> tuple[int, str, dict | None]:
    async def local(engine, resume=False):
        from reconciler.commands import requests as ops

        decided = await ops.submit(engine, engine.tick, kind, fields, resume=resume)
        hint = ops.request_hint(engine, kind, fields)
        if hint:
            print(hint, file=sys.stderr)
        return decided

    from reconciler.observed.procs import process_chain

    paths.ensure()
    return _decide(paths, {"op": "submit", "kind": kind, "fields": fields, "who": process_chain(os.getpid())}, local,
                   resume=lambda engine: local(engine, resume=True))


def cmd_release(a, paths: Paths) -> int:
    def local(engine):
        from reconciler.commands import requests as ops

        return ops.release(engine, engine.tick, a.id, a.stop)

    from reconciler.observed.procs import process_chain

    code, line, data = _decide(paths, {"op": "release", "id": a.id, "stop": a.stop, "who": process_chain(os.getpid())},
                               local)
    _print_answer(code, line, data, a.json)
    return code


def _say(line: str, code: int) -> None:
    print(line, file=sys.stderr if code == 1 else sys.stdout)


def cmd_reconcile(a, paths: Paths) -> int:
    import asyncio

    policy = _policy()
    _quiet_logs()
    if a.dry_run:
        from reconciler.core.models import World
        from reconciler.loop.tick import dry_run

        world = None
        if a.world:
            try:
                with open(a.world) as f:
                    world = World.model_validate_json(f.read())
            except (OSError, ValueError) as e:
                raise Fail(f"res: --world {a.world}: {' '.join(str(e).split())[:300]}") from None
        plan, _ = asyncio.run(dry_run(paths, policy, world))
        return _print_plan(plan, a.json)
    if a.world:
        raise Fail("res: --world only plans (add --dry-run)", 2)
    from reconciler.loop.tick import PassFailed, pass_now

    try:
        return _print_plan(pass_now(paths, policy), a.json)
    except PassFailed as e:
        _say(e.line, e.code)
        return e.code
    except TimeoutError:
        raise Fail("res: the reconciler loop did not answer in time; see res status") from None


def _print_plan(plan, as_json: bool) -> int:
    """The plan on stdout; what kept the pass from acting on everything (a broken desired file, an
    unobservable runtime, a failed action) one `res: ` line each on stderr, and exit 1."""
    from reconciler.render.lines import render_plan

    if as_json:
        print(plan.model_dump_json(indent=2))
    else:
        print(render_plan(plan.model_copy(update={"notices": []})))
    for n in plan.notices:
        print(f"res: {' '.join(n.split())}", file=sys.stderr)
    return 1 if plan.notices else 0


def cmd_observe(a, paths: Paths) -> int:
    import asyncio

    from reconciler.loop.tick import dry_run
    from reconciler.core.quantities import fmt_gb

    _quiet_logs()

    _, world = asyncio.run(dry_run(paths, _policy()))
    if a.json:
        print(world.model_dump_json(indent=2))
    else:
        print(f"memory {world.mem_available_gb:.1f} GB available of {world.mem_total_gb:.1f} GB; {world.nproc} cpus")
        for jid, o in sorted(world.jobs.items()):
            print(f"  {jid:<6} {o.state:<12} {o.mem_used_gb:.2f} GB" + (f"  exit {o.exit.result}/{o.exit.status}" if o.exit else ""))
        if world.agents_slice is not None:
            from reconciler.core.game import slice_values

            sl = world.agents_slice
            print(f"  {sl.name}: {fmt_gb(sl.mem_used_gb)} in use; "
                  + slice_values({"MemoryHigh": sl.memory_high, "CPUWeight": sl.cpu_weight, "IOWeight": sl.io_weight}))
        for sess in world.sessions or []:
            where = sess.scope or ("in the slice" if sess.in_slice else "outside the agents slice")
            print(f"  claude pid {sess.pid}: {where}" + (f", {len(sess.children)} child processes" if sess.children else ""))
        for e in world.errors:
            print(f"res: {e}")
    return 0


def cmd_status(a, paths: Paths) -> int:
    """From the running loop when there is one (it has the models loaded: a fraction of the time,
    and the policy the loop enforces); else read here."""
    from reconciler.loop.client import NoDaemon, ask

    try:
        answer = ask(paths.socket, {"op": "status", "id": a.id, "json": a.json, "all": a.all}, timeout=3)
        if answer.get("code") == 2:  # a loop from before the status op: read here
            raise KeyError("status")
        out, code, problem = answer["line"], answer["code"], answer.get("problem")
    except (NoDaemon, TimeoutError, OSError, ValueError, KeyError):
        out, code, problem = _status_here(a, paths)
    print(out, file=sys.stderr if code else sys.stdout)
    if problem:
        print(f"res: {problem}", file=sys.stderr)
    return code


def _status_here(a, paths: Paths) -> tuple[str, int, str | None]:
    from reconciler.commands.status import queue_problem, status

    out, code = status(paths, _policy(), a.id, a.json, a.all)
    return out, code, (queue_problem(paths) if a.id and code == 0 else None)


def cmd_wait(a, paths: Paths) -> int:
    """Exits with the job's own code; 124 timeout, 125 never ran, 1 error (README: exit codes)."""
    from reconciler.loop.waiting import wait_for

    _quiet_logs()
    code, line, data = wait_for(paths, _policy, a.id, a.timeout)
    if a.json:
        print(json.dumps(dict(data or {"id": a.id}, exit_code=code, line=line)))
    else:
        print(line, file=sys.stderr if line.startswith("res: ") else sys.stdout)
    return code


def cmd_serve(a, paths: Paths) -> int:
    import asyncio
    import logging

    from reconciler.loop.serve import ServeBusy, ServeStopped, serve

    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # not a line per interval pass
    try:
        asyncio.run(serve(paths, _policy(), standby=a.standby))
    except (ServeBusy, ServeStopped) as e:
        raise Fail(f"res: {e}") from None
    return 0


def cmd_init(a, paths: Paths) -> int:
    from reconciler.desired.writer import Writer

    created = Writer(paths).init(force=a.force)
    for line in created:
        print(line)
    if not created:
        print(f"res: {paths.desired} already set up (--force to lay the templates down again)")
    return 0


def _print_lines(code: int, lines: list[str]) -> int:
    for line in lines:
        print(line, file=sys.stderr if code == 1 else sys.stdout)
    return code


def cmd_game(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_game as game

    policy = _policy()

    def decide() -> list[str]:
        """A pass now (the loop's, or one here); what kept it from acting on everything."""
        from reconciler.loop.tick import PassFailed, pass_here, pass_now

        _quiet_logs()
        try:
            return list(pass_now(paths, policy, timeout=30).notices)
        except PassFailed:
            return []
        except OSError:  # the loop did not answer in time: a pass here, under the same lock
            return list(pass_here(paths, policy).notices)

    code, lines = game(a, paths, policy, decide)
    for line in lines:  # what went wrong goes to stderr even when the command succeeded
        print(line, file=sys.stderr if code == 1 or line.startswith("res: ") else sys.stdout)
    return code


def cmd_hook(a, paths: Paths) -> int:
    from reconciler.commands.hook import print_config, run

    if a.print_config:
        print(print_config())
        return 0
    return run()


def cmd_hist(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_hist as hist

    return _print_lines(*hist(a, paths))


def cmd_clean(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_clean as clean

    return _print_lines(*clean(a, paths, _policy()))


def cmd_adopt(a, paths: Paths) -> int:
    from reconciler.commands.adopt import cmd_adopt as adopt

    _quiet_logs()
    return _print_lines(*adopt(paths, _policy()))


def cmd_shell_init(a, paths: Paths) -> int:
    from reconciler.commands.adopt import shell_init

    print(shell_init(_policy()))
    return 0


def cmd_service(a, paths: Paths) -> int:
    from reconciler.commands.service import cmd_service as service

    _quiet_logs()
    return _print_lines(*service(a.action, paths, _policy()))


def cmd_doctor(a, paths: Paths) -> int:
    from reconciler.commands.doctor import cmd_doctor as doctor

    code, lines = doctor(paths, _policy())
    print("\n".join(lines))  # the report is the output, gaps or not: stdout; the exit code says which
    return code


COMMANDS = {"run": cmd_run, "note": cmd_note, "status": cmd_status, "wait": cmd_wait, "release": cmd_release,
            "reconcile": cmd_reconcile, "observe": cmd_observe, "serve": cmd_serve, "init": cmd_init,
            "game": cmd_game, "hook": cmd_hook, "hist": cmd_hist, "clean": cmd_clean,
            "adopt": cmd_adopt, "shell-init": cmd_shell_init, "service": cmd_service, "doctor": cmd_doctor}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        a = build_parser().parse_args(_join_negative(argv))
        code = COMMANDS[a.cmd](a, Paths.default())
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:
        # `res status | head`: the reader had enough. No "Broken pipe" line; the shell's code for it.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except Fail as f:
        print(f.line, file=sys.stderr)
        return f.code
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(_disk_full(e.filename), file=sys.stderr)
            return 1
        print(f"res: {e.filename + ': ' if getattr(e, 'filename', None) else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:
        if not _ours(e):
            raise  # a bug: the traceback is what a report needs
        text = " ".join(str(e).split()) or type(e).__name__
        if any(m in text for m in ("database or disk is full", "No space left on device", "disk I/O error")) \
                and _little_space_left():  # SQLite calls a full disk under its WAL "disk I/O error"
            print(_disk_full(None), file=sys.stderr)
            return 1
        print(f"res: {text}", file=sys.stderr)
        return 1


def _little_space_left() -> bool:
    try:
        st = os.statvfs(Paths.default().root)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


def _disk_full(filename) -> str:
    where = filename or str(Paths.default().root)
    return f"res: the disk is full where res keeps {where}; nothing was changed: free some space, then try again"


# Errors whose message is already the one line a user needs: a state.db that cannot be used, a desired
# file the writer refuses, a broken policy, an unreachable runtime, SQLite's own.
_OUR_ERRORS = ("StoreError", "DesiredError", "PolicyError", "RuntimeUnavailable")


def _ours(e: Exception) -> bool:
    mod = type(e).__module__ or ""
    return (mod.startswith("reconciler.") and type(e).__name__ in _OUR_ERRORS) or mod == "sqlite3"


def reconcile_main(argv: list[str] | None = None) -> int:
    """`reconcile` is `res reconcile`."""
    return main(["reconcile", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
