"""The command line (DESIGN §8): the parser, the dispatch to commands/, and how errors end.
Exit codes: 0 ok, 1 error (one line `res: …`), 2 usage, 3 busy.

Import-light at the top: `res run` parses, writes and asks the loop; the heavy libraries (pydantic,
dbus-fast, APScheduler) load only in the commands that use them.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys

from reconciler.commands.base import Fail
from reconciler.config.paths import Paths
from reconciler.core import agentclis, agents
from reconciler.core.quantities import BadValue, parse_count, parse_cpus, parse_duration_s, parse_pid, parse_size_gb, parse_usd


class _Formatter(argparse.HelpFormatter):
    """argparse's own, given the terminal's width from os: left to itself it imports shutil for it
    (~2 ms, with bz2 and lzma) on every command, help asked for or not."""

    def __init__(self, prog: str) -> None:
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except (OSError, ValueError):
            width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 80
        super().__init__(prog, width=max(width - 2, 20))


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2
        raise Fail(f"res: {_tidy(message)} (see: {self.prog} --help)", 2)


def _tidy(message: str) -> str:
    """argparse's message on one short line: a long quoted value (an invalid choice of 100,000
    characters) cut, whatever it holds escaped."""
    import re

    from reconciler.core.invalid import quoted

    def cut(m) -> str:
        return m.group(0) if len(m.group(0)) <= 62 else m.group(0)[:60] + "…'"

    message = re.sub(r"'(?:[^'\\]|\\.)*'", cut, " ".join(message.split()))
    message = re.sub(r"\\udc([89a-f][0-9a-f])", r"\\x\1", message)  # repr's escape of a byte that was not text
    return quoted(message)[1:-1] if any(0xDC80 <= ord(c) <= 0xDCFF for c in message) else message


# Text flags: the longest value each takes (what queue.toml and the views hold; README: commands).
# An id is `r-` and a number. A value that is not UTF-8 text (a byte the shell passed that no text
# has) is refused for all of them: queue.toml and state.db hold text only.
TEXT_FLAGS = {"title": ("--title", 200), "project": ("--project", 200), "lock": ("--lock", 200),
              "by": ("--by", 200), "task": ("--task", 200), "world": ("--world", 4096), "id": ("ID", 64),
              "request_id": ("--request-id", 64)}


def _checked_texts(a: argparse.Namespace) -> None:
    """Every text flag within its length and UTF-8; an id of the form ids have. Usage errors (exit 2)."""
    import re

    for attr, (flag, limit) in TEXT_FLAGS.items():
        value = getattr(a, attr, None)
        if not isinstance(value, str):
            continue
        if attr == "title" and a.cmd == "note":
            flag = "the title"
        if attr != "world" and any(0xDC80 <= ord(c) <= 0xDCFF for c in value):  # (a path may be any bytes)
            from reconciler.core.invalid import quoted

            raise Fail(f"res: {flag} {quoted(value)[:60]}: not UTF-8 text; give text (res keeps it in files that "
                       "hold text only)", 2)
        if len(value) > limit:
            raise Fail(f"res: {flag} is {len(value)} characters; at most {limit}", 2)
        if attr == "id" and not re.fullmatch(r"r-[1-9][0-9]{0,9}", value):
            from reconciler.core.invalid import quoted

            raise Fail(f"res: {quoted(value)[:60]}: not an entry id (ids look like r-12)", 2)
        if attr == "request_id" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", value):
            from reconciler.core.invalid import quoted

            raise Fail(f"res: --request-id {quoted(value)[:60]}: not a request id (letters, digits and . _ : -, "
                       "starting with a letter or digit; at most 64)", 2)


_VALUED = ("--mem", "--cpus", "--for", "--timeout", "--start-within")


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
        if len(text) > 64 or any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
            from reconciler.core.invalid import quoted

            raise argparse.ArgumentTypeError(f"{what} {quoted(text)[:40]}{'…' if len(text) > 36 else ''}: "
                                             f"not a value {what} takes")
        if text.strip().startswith("-"):
            raise argparse.ArgumentTypeError(f"{what} {text!r}: must be more than 0")
        try:
            return parse(text, what)
        except BadValue as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    conv.__name__ = what
    return conv


def _or_auto(conv):
    """A value, or `auto`: res sizes it (core/sizing.py, DESIGN §5.9)."""
    def either(text):
        return "auto" if text.strip() == "auto" else conv(text)

    either.__name__ = conv.__name__
    return either


def _asker_args(p) -> None:
    p.add_argument("--by", metavar="NAME", help="who asks (default: RES_BY, else the agent session and its pid, "
                                                "else the user); status and busy lines name it")
    p.add_argument("--task", help="what for (default: RES_TASK, else the git branch here)")
    p.add_argument("--request-id", metavar="ID", help="this request's name (letters, digits, . _ : -; at most 64): "
                                                      "asked again with it, the same request is answered, never a "
                                                      "second job (default: one made up, named if no answer comes)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line. `only`: the subcommand named first on the command line; only its parser is
    made (making all of them cost ~3 ms, on every `res run`, `res status` and `res wait`)."""
    p = _Parser(prog="res", description="Resources for coding agents on a shared workstation.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for name, help_text, fill in _COMMANDS:
        if only is None or name == only:
            made = sub.add_parser(name, help=help_text)
            if fill is not None:
                fill(made)
    return p


def _run_args(run: argparse.ArgumentParser) -> None:
    run.add_argument("--mem", required=True, type=_or_auto(_arg(parse_size_gb, "--mem")),
                     help="memory, e.g. 512M, 10G; auto: what earlier runs of this command here needed (else the "
                          "gate's table, else the policy's auto_mem_gb), and once more, bigger, if killed at it")
    run.add_argument("--cpus", type=_or_auto(_arg(parse_cpus, "--cpus")), default=None,
                     help="CPUs it keeps busy (default 0.5); its share when CPUs are contended; auto: as --mem auto")
    run.add_argument("--for", dest="est", required=True, type=_or_auto(_arg(parse_duration_s, "--for")),
                     help="estimate, e.g. 40m; auto: as --mem auto")
    run.add_argument("--title")
    run.add_argument("--project")
    run.add_argument("--queue", action="store_true", help="wait in the queue instead of being refused")
    run.add_argument("--lock", help="never run two jobs holding the same KEY at once (within this git repository, "
                                    "all its worktrees; outside git, this directory)")
    _asker_args(run)
    run.add_argument("--force", action="store_true", help="ignore the ledger (not the reserve, not locks)")
    run.add_argument("--on", choices=("local", "cluster"), default=None,
                     help="cluster: submit to Slurm; local: never leaves this machine (default: here, or the "
                          "cluster when the policy's overflow says so and it does not fit here now)")
    run.add_argument("--agent", default="none", choices=agents.agent_kinds(),
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
    run.add_argument("--start-within", type=_arg(parse_duration_s, "--start-within"), default=None, metavar="DURATION",
                     help="with --wait --queue: if it cannot start within this (by the plan's estimate, or by "
                          "then), withdraw it and exit 3 with the busy line")
    run.add_argument("--gated", action="store_true",
                     help="--mem is a guess (what `res hook` asks for): booked in the ledger, not enforced as a "
                          "memory limit; never sent to the cluster")
    run.add_argument("--tail", type=_arg(parse_count, "--tail"), default=None, metavar="N",
                     help="with --wait: print only the last N lines of the output, once the job ended")
    run.add_argument("--json", action="store_true", help="one JSON object (with --wait: once the job ended)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _note_args(note: argparse.ArgumentParser) -> None:
    note.add_argument("--mem", required=True, type=_arg(parse_size_gb, "--mem"))
    note.add_argument("--cpus", type=_arg(parse_cpus, "--cpus"), default=None)
    note.add_argument("--for", dest="est", required=True, type=_arg(parse_duration_s, "--for"))
    note.add_argument("--project")
    note.add_argument("--force", action="store_true")
    _asker_args(note)
    owner = note.add_mutually_exclusive_group()
    owner.add_argument("--owner", type=_arg(parse_pid, "--owner"), metavar="PID",
                       help="free the note when this process ends (default: the agent session that asks, "
                            "else the calling shell)")
    owner.add_argument("--until-expiry", action="store_true",
                       help="no owner: only --for's end or res release frees it")
    note.add_argument("--json", action="store_true")
    note.add_argument("title")


def _status_args(st: argparse.ArgumentParser) -> None:
    st.add_argument("id", nargs="?")
    st.add_argument("--json", action="store_true")
    st.add_argument("--all", action="store_true", help="also entries that finished over 5 minutes ago")


def _wait_args(wt: argparse.ArgumentParser) -> None:
    wt.add_argument("id")
    wt.add_argument("--timeout", type=_arg(parse_duration_s, "--timeout"), default=None,
                    help="give up after this long (exit 124)")
    wt.add_argument("--json", action="store_true")


def _release_args(rl: argparse.ArgumentParser) -> None:
    rl.add_argument("id")
    rl.add_argument("--stop", action="store_true")
    rl.add_argument("--json", action="store_true")


def _observe_args(ob: argparse.ArgumentParser) -> None:
    ob.add_argument("--json", action="store_true")


def _serve_args(sv: argparse.ArgumentParser) -> None:
    sv.add_argument("-v", "--verbose", action="store_true")
    sv.add_argument("--standby", action="store_true",
                    help="if a loop already runs for this state directory, wait and take over when it ends")


def _init_args(it: argparse.ArgumentParser) -> None:
    it.add_argument("--force", action="store_true")


def _game_args(gm: argparse.ArgumentParser) -> None:
    gm.add_argument("action", choices=["on", "off", "status"])
    gm.add_argument("--for", dest="length", type=_arg(parse_duration_s, "--for"), default=None,
                    help="how long (default: the policy's game_hours)")


def _hook_args(hk: argparse.ArgumentParser) -> None:
    hk.add_argument("action", nargs="?", choices=("install",),
                    help="install: write the hook into the agent CLIs' own settings (--uninstall: take it out)")
    hk.add_argument("--agent", choices=(*agentclis.CLIS, "all"), default=None,
                    help="the CLI whose hook input comes on stdin (default: told by its shape); with install, "
                         "which CLIs (default all)")
    where = hk.add_mutually_exclusive_group()
    where.add_argument("--user", dest="scope", action="store_const", const="user", help="install: the user's settings (default)")
    where.add_argument("--project", dest="scope", action="store_const", const="project", help="install: this checkout's settings")
    hk.add_argument("--uninstall", action="store_true", help="install: take out what install wrote")
    hk.add_argument("--print-config", action="store_true", help="print the settings.json snippet")


def _hist_args(hs: argparse.ArgumentParser) -> None:
    hs.add_argument("--project")
    hs.add_argument("--changes", action="store_true",
                    help="the changes to the policy, game and queue files: by res (and who asked) or outside it")


def _clean_args(cl: argparse.ArgumentParser) -> None:
    cl.add_argument("--yes", action="store_true")


def _service_args(se: argparse.ArgumentParser) -> None:
    se.add_argument("action", choices=["install", "uninstall", "status"])


def _reconcile_args(rc: argparse.ArgumentParser) -> None:
    rc.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    rc.add_argument("--json", action="store_true")
    rc.add_argument("--world", help="plan against a snapshot from `res observe --json`")


_COMMANDS = (  # (name, help, what fills its parser)
    ("run", "run a command as a job with reserved memory and CPUs", _run_args),
    ("note", "reserve memory for foreground work", _note_args),
    ("status", "what runs, what waits, what agents may use", _status_args),
    ("wait", "wait until a job is done; exit with its own code (README: exit codes)", _wait_args),
    ("release", "remove a queued entry or a note; --stop a running job", _release_args),
    ("reconcile", "run one reconcile pass (or show its plan with --dry-run)", _reconcile_args),
    ("observe", "print the world as the planner sees it", _observe_args),
    ("serve", "the reconciler loop", _serve_args),
    ("init", "lay down the annotated desired-state files (queue.toml, game.toml)", _init_args),
    ("game", "game mode: the user's bigger reserve, agents yield CPU and IO", _game_args),
    ("hook", "the gate: a shell-command hook for Claude Code, Codex and Gemini CLI (reads JSON on stdin)", _hook_args),
    ("hist", "what past jobs of each kind used, and what to ask for", _hist_args),
    ("clean", "stale agent scratch and dead litter in /tmp (lists; --yes removes)", _clean_args),
    ("adopt", "move running agent sessions (claude) into the agents slice", None),
    ("shell-init", "print the alias line that starts new agent sessions in the slice (--shims: the gate's PATH wrappers)",
     lambda p: p.add_argument("--shims", action="store_true", help="make the gate's wrappers for the heavy tools and print "
                              "the PATH line that puts them first (for agents without hooks)")),
    ("service", "res serve as a user service: install, uninstall, status", _service_args),
    ("doctor", "check what res needs from this machine; one line per gap, with the fix", None),
    ("agent-rules", "print the lines for an agent's instructions file (CLAUDE.md, AGENTS.md)", None),
    ("top", "the live view: memory and CPU by owner, the queue, locks, game mode, spend (keys: r s l g q)", None),
    ("web", "the address of the page the loop serves: memory, queue, spend, live (--open: in the browser)",
     lambda p: p.add_argument("--open", action="store_true", help="open it with xdg-open")),
)
_NAMES = {name for name, *_ in _COMMANDS}


# Each command's module is imported only when it is the one asked for (the hot path stays light).
COMMANDS = {"run": "run:cmd_run", "note": "run:cmd_note", "wait": "run:cmd_wait", "release": "run:cmd_release",
            "reconcile": "reconcile:cmd_reconcile", "observe": "reconcile:cmd_observe",
            "status": "handlers:cmd_status", "serve": "handlers:cmd_serve", "init": "handlers:cmd_init",
            "game": "handlers:cmd_game", "hook": "handlers:cmd_hook", "hist": "handlers:cmd_hist",
            "clean": "handlers:cmd_clean", "adopt": "handlers:cmd_adopt", "shell-init": "handlers:cmd_shell_init",
            "service": "handlers:cmd_service", "doctor": "handlers:cmd_doctor", "agent-rules": "handlers:cmd_agent_rules",
            "web": "web:cmd_web",
            "top": "top:cmd_top"}  # Textual is imported by commands/top.py alone


def _command(name: str):
    found = COMMANDS[name]
    if isinstance(found, str):
        import importlib

        module, _, fn = found.partition(":")
        found = getattr(importlib.import_module(f"reconciler.commands.{module}"), fn)
    return found


def main(argv: list[str] | None = None, loop_unanswered: bool = False) -> int:
    """`loop_unanswered`: entry.py asked the loop for `res status` and it listened without answering."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        argv = _join_negative(argv)
        a = build_parser(argv[0] if argv and argv[0] in _NAMES else None).parse_args(argv)
        _checked_texts(a)
        _bounded(a.cmd)
        a.loop_unanswered = loop_unanswered
        code = _command(a.cmd)(a, Paths.default())
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:
        from reconciler.commands.reader import reader_gone

        return reader_gone()
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
        if type(e).__module__ == "sqlite3":  # SQLite's own words never reach a user (issue 40)
            from reconciler.recorded.errors import store_error

            e = store_error(Paths.default().db, e)
        text = " ".join(str(e).split()) or type(e).__name__
        if any(m in text for m in ("database or disk is full", "No space left on device", "disk I/O error",
                                   "the disk is full", "failed to read or write it")) \
                and _little_space_left():  # SQLite calls a full disk under its WAL "disk I/O error"
            print(_disk_full(None), file=sys.stderr)
            return 1
        print(f"res: {text}", file=sys.stderr)
        return 1


# Commands that answer within the caller's answer wait (RES_ANSWER_WAIT_S, 60 s) whoever holds the loop
# or state.db: every wait of theirs for either ends by then (issue 40). `run`, `note` and `release`
# keep theirs in commands/base.decide, `wait` its --timeout; `serve`, `top`, `web` and `hook` are
# not asked for an answer (the hook has its own short limits).
BOUNDED = {"reconcile", "observe", "game", "adopt", "status", "hist", "clean", "init", "service", "doctor"}


def _bounded(cmd: str) -> None:
    if cmd not in BOUNDED:
        return
    import time

    from reconciler.loop.client import answer_wait_s
    from reconciler.config.deadline import wait_limits

    try:
        wait_s = answer_wait_s()
    except ValueError as e:
        raise Fail(f"res: {e}", 2) from None
    wait_limits(deadline=time.monotonic() + wait_s)


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
    if (type(e).__module__ or "") == "sqlite3":
        return True
    return any((c.__module__ or "").startswith("reconciler.") and c.__name__ in _OUR_ERRORS for c in type(e).__mro__)


def reconcile_main(argv: list[str] | None = None) -> int:
    """`reconcile` is `res reconcile`."""
    return main(["reconcile", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
