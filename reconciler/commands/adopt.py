"""`res adopt` and `res shell-init`. Adoption itself is a plan action (core/sessions.py
decides, the executor moves): `res adopt` asks for a pass now and reports what it did to sessions."""
from __future__ import annotations

from reconciler.config.paths import Paths


def shell_init(policy) -> str:
    import shutil

    from reconciler.core.sessions import shell_init_line

    return shell_init_line(policy.rules(), shutil.which("systemd-run") or "systemd-run")


def adopt_report(plan, agents_slice: str) -> tuple[int, list[str]]:
    """One line per session moved or resized, one `res:` line per action that failed (retried next
    pass) and per other notice of the pass."""
    from reconciler.render.reasons import session_moved

    failed = {n.split(" ", 2)[1]: n for n in plan.notices if n.startswith(("adopt ", "set "))}
    lines, code, reported = [], 0, set()
    for a in plan.actions:
        if a.kind == "adopt" or (a.kind == "set" and a.id.endswith(".scope")):
            if a.id in failed:
                continue
            if a.kind == "adopt":
                lines.append(f"adopted {session_moved(a.detail)} into {a.id}")
            else:
                lines.append(f"{a.id}: {a.reason}")
    for n in plan.notices:
        line = f"res: {' '.join(n.split())}"
        if n.startswith(("adopt ", "set ")):
            line += "; retried on the next pass"
        if line not in reported:
            reported.add(line)
            lines.append(line)
            code = 1
    # (not "every session is in it": one in a service or a container is left where it is; status names it)
    return code, lines or [f"no agent session to move into {agents_slice}"]


def cmd_adopt(paths: Paths, policy) -> tuple[int, list[str]]:
    from reconciler.loop.oneshot import PassFailed, pass_now

    try:
        plan = pass_now(paths, policy, adopt=True)
    except PassFailed as e:
        return 1, [e.line]
    except TimeoutError:
        return 1, ["res: the reconciler loop did not answer in time (stopped or stuck?); it adopts sessions at its "
                   "next pass"]
    return adopt_report(plan, policy.agents_slice)
