"""The commands `res` dispatches to here (cli.COMMANDS) that take the parsed arguments and hand the
work to the module that does it: status (the loop's answer, else read here), serve, init, game, hook,
hist, clean, adopt, shell-init, service, doctor, agent-rules. Each is a few lines: call, print the
lines, return the exit code. Apart from cli.py so that the parser and its dispatch stay what `res
run` loads, and each of these is imported only when it is the command asked for.
"""
from __future__ import annotations

import os
import sys

from reconciler.commands.base import Fail, print_lines, quiet_logs, the_policy
from reconciler.config.paths import Paths


def cmd_status(a, paths: Paths) -> int:
    """From the running loop when there is one (commands/status.py); else read here."""
    from reconciler.commands.status import ASK_TIMEOUT_S, Unanswered, ask_loop, show
    from reconciler.loop.client import answer_wait_s

    answered = None
    if not getattr(a, "loop_unanswered", False):  # entry.py's quick path asked it already
        try:
            answered = ask_loop(paths.socket, a.id, a.json, a.all, timeout=min(ASK_TIMEOUT_S, answer_wait_s()))
        except Unanswered:
            pass
    return show(*(answered or _status_here(a, paths)))


def _status_here(a, paths: Paths) -> tuple[str, int, str | None]:
    from reconciler.ops.status import queue_problem, status

    out, code = status(paths, the_policy(), a.id, a.json, a.all)
    return out, code, (queue_problem(paths) if a.id and code == 0 else None)


def cmd_serve(a, paths: Paths) -> int:
    import asyncio
    import logging

    from reconciler.loop.serve import ServeBusy, ServeStopped, serve

    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # not a line per interval pass
    try:
        asyncio.run(serve(paths, the_policy(), standby=a.standby))
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


def cmd_game(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_game as game

    policy = the_policy()

    def decide() -> list[str]:
        """A pass now (the loop's, or one here); what kept it from acting on everything."""
        from reconciler.loop.oneshot import PassFailed, pass_here, pass_now

        quiet_logs()
        try:
            return list(pass_now(paths, policy).notices)
        except PassFailed:
            return []
        except TimeoutError:  # the loop took the request and did not answer by this call's deadline
            return ["res: the reconciler loop did not answer in time (stopped or stuck?); game mode is written "
                    "and applies at its next pass"]
        except OSError:  # no loop after all: a pass here, under the same lock
            return list(pass_here(paths, policy).notices)

    code, lines = game(a, paths, policy, decide)
    for line in lines:  # what went wrong goes to stderr even when the command succeeded
        print(line, file=sys.stderr if code == 1 or line.startswith("res: ") else sys.stdout)
    return code


def cmd_hook(a, paths: Paths) -> int:
    from reconciler.commands.hook import print_config, run

    if a.action == "install":
        from reconciler.commands.hookinstall import install

        code, lines = install(a.agent or "all", a.scope or "user", a.uninstall)
        for line in lines:  # each on its own stream: a failed CLI does not send the others' lines to stderr
            print(line, file=sys.stderr if line.startswith("res: ") else sys.stdout)
        return code
    if a.scope or a.uninstall or a.agent == "all":
        raise Fail("res: --user, --project, --uninstall and --agent all go with `res hook install`", 2)
    if a.print_config:
        print(print_config())
        return 0
    return run(a.agent)


def cmd_hist(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_hist as hist

    return print_lines(*hist(a, paths))


def cmd_clean(a, paths: Paths) -> int:
    from reconciler.commands.usercmds import cmd_clean as clean

    return print_lines(*clean(a, paths, the_policy()))


def cmd_adopt(a, paths: Paths) -> int:
    from reconciler.commands.adopt import cmd_adopt as adopt

    quiet_logs()
    return print_lines(*adopt(paths, the_policy()))


def cmd_shell_init(a, paths: Paths) -> int:
    if a.shims:
        from reconciler.commands.hook import res_program
        from reconciler.commands.shim import shell_init_shims

        print(shell_init_shims(os.environ, res_program()))
        return 0
    from reconciler.commands.adopt import shell_init

    print(shell_init(the_policy()))
    return 0


def cmd_service(a, paths: Paths) -> int:
    from reconciler.commands.service import cmd_service as service

    quiet_logs()
    return print_lines(*service(a.action, paths, the_policy()))


def cmd_doctor(a, paths: Paths) -> int:
    from reconciler.commands.doctor import cmd_doctor as doctor

    code, lines = doctor(paths, the_policy())
    print("\n".join(lines))  # the report is the output, gaps or not: stdout; the exit code says which
    return code


def cmd_agent_rules(a, paths: Paths) -> int:
    from reconciler.render.rules import agent_rules

    print("\n".join(agent_rules(the_policy())))
    return 0
