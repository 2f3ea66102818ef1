"""`res reconcile [--dry-run] [--json] [--world FILE]` and `res observe`: a pass, or its plan shown
for review, and the world as a pass sees it."""
from __future__ import annotations

import json
import sys

from reconciler.commands.base import Fail, quiet_logs, say, the_policy
from reconciler.config.paths import Paths


def cmd_reconcile(a, paths: Paths) -> int:
    import asyncio

    policy = the_policy()
    quiet_logs()
    if a.dry_run:
        from reconciler.core.models import World, parse_json
        from reconciler.loop.oneshot import dry_run

        world = None
        if a.world:
            try:
                with open(a.world) as f:
                    world = parse_json(World, f.read())
            except OSError as e:
                from reconciler.core.invalid import quoted

                raise Fail(f"res: --world {quoted(a.world)}: {e.strerror or e}") from None
            except ValueError as e:  # not JSON, or not a world (pydantic's ValidationError is a ValueError)
                errors = getattr(e, "errors", None)
                if callable(errors) and errors()[0].get("type") != "json_invalid":  # (its value: the whole file)
                    from reconciler.core.invalid import first

                    said = first(errors(), World)[1]
                else:
                    said = "not JSON text"
                from reconciler.core.invalid import quoted

                raise Fail(f"res: --world {quoted(a.world)}: {said} (make one with res observe --json)") from None
        plan, _ = asyncio.run(dry_run(paths, policy, world))
        return _print_plan(plan, a.json)
    if a.world:
        raise Fail("res: --world only plans (add --dry-run)", 2)
    from reconciler.loop.oneshot import PassFailed, pass_now

    try:
        return _print_plan(pass_now(paths, policy), a.json)
    except PassFailed as e:
        say(e.line, e.code)
        return e.code
    except TimeoutError:
        raise Fail("res: the reconciler loop did not answer in time (stopped or stuck?); its pass, if it runs, "
                   "is its own; see res status") from None


def _print_plan(plan, as_json: bool) -> int:
    """The plan on stdout; what kept the pass from acting on everything (a broken desired file, an
    unobservable runtime, a failed action) one `res: ` line each on stderr, and exit 1."""
    import dataclasses

    from reconciler.render.lines import render_plan

    if as_json:
        print(json.dumps(plan.as_data(), indent=2, ensure_ascii=False))
    else:
        print(render_plan(dataclasses.replace(plan, notices=[])))
    for n in plan.notices:
        print(f"res: {' '.join(n.split())}", file=sys.stderr)
    return 1 if plan.notices else 0


def cmd_observe(a, paths: Paths) -> int:
    import asyncio

    from reconciler.core.models import dump_json
    from reconciler.render.text import fmt_gb
    from reconciler.loop.oneshot import dry_run

    quiet_logs()

    _, world = asyncio.run(dry_run(paths, the_policy()))
    if a.json:
        print(dump_json(world, indent=2))
    else:
        print(f"memory {world.mem_available_gb:.1f} GB available of {world.mem_total_gb:.1f} GB; {world.nproc} cpus")
        for jid, o in sorted(world.jobs.items()):
            print(f"  {jid:<6} {o.state:<12} {o.mem_used_gb:.2f} GB" + (f"  exit {o.exit.result}/{o.exit.status}" if o.exit else ""))
        if world.agents_slice is not None:
            from reconciler.render.game import slice_values

            sl = world.agents_slice
            print(f"  {sl.name}: {fmt_gb(sl.mem_used_gb)} in use; "
                  + slice_values({"MemoryHigh": sl.memory_high, "CPUWeight": sl.cpu_weight, "IOWeight": sl.io_weight}))
        for sess in world.sessions or []:
            where = sess.scope or ("in the slice" if sess.in_slice else "outside the agents slice")
            print(f"  claude pid {sess.pid}: {where}" + (f", {len(sess.children)} child processes" if sess.children else ""))
        for e in world.errors:
            print(f"res: {e}")
    return 0
