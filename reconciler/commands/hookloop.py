"""The gate's questions to the loop, for `res hook` (commands/hook.py) once a command is heavy: would a
job of this size start now or when (`would_fit`: STUCK when a loop took the question and did not
answer in time), a booking in place for a line admitted unchanged (`admit`: booked, waited for within
the gate's wait, withdrawn if not granted), its release by the command's post-tool event
(`release_booking`), a session announced (`ask_loop`). Apart from hook.py so that a light command,
which asks the loop nothing, does not load it (hook.py imports it only on the heavy path).
"""
from __future__ import annotations

import os
import time

from reconciler.config.stateroot import state_root

# The loop answers in a pass (tens of ms). One that has not in this long is stopped or stuck: the
# command runs as it is (every heavy command of every agent would pay the wait), and the agent is told
# once per session.
ASK_TIMEOUT_S = 1.0
ANNOUNCE_TIMEOUT_S = 1.0
STUCK = object()  # would_fit's answer when a loop is there and did not answer in time
STUCK_CONTEXT = ("res: the reconciler loop (res serve) did not answer within 1 s, so heavy commands run as "
                 "they are, outside res, until it answers again (`res status` says what holds it)")


def shortened(command: str) -> str:
    """The command on one line of at most 80 characters, for a deny's line."""
    text = " ".join(command.split())
    return text if len(text) <= 80 else text[:79] + "…"


def ask_loop(environ, request: dict, timeout: float) -> dict | None:
    """The loop's answer, or None: no loop, an old one, an error, no answer in time (the gate then
    leaves it to `res run --start-within`; a session is found by the loop's own look)."""
    from reconciler.loop.client import ask

    try:
        answer = ask(os.path.join(state_root(environ), "serve.sock"), request, timeout=timeout)
    except Exception:  # noqa: BLE001 - the hook never gets in the way
        return None
    return answer if isinstance(answer, dict) and answer.get("code") == 0 else None


ADMIT_ASK_S = 2.0  # one booking's answer from the loop
ADMIT_RETRY_S = 1.0  # between tries while it would start within the gate's wait
ADMIT_MARGIN_S = 5.0  # the hook's own start and its last answers, before the CLI's timeout for it


def admit(call, environ, heavy, project: str, wait_s: float, answer: dict | None, ask_again) -> tuple | None:
    """Admission in place (docs/agent-hooks.md): the line passes unchanged, its size booked before it
    runs under the call's request id (a gated note owned by the agent's session, held for twice its
    estimate at most), released by its post-tool event. The booking waits its turn in the queue, as a
    rewritten job does (--queue --start-within): granted within the gate's wait, the line runs; not by
    then, it is withdrawn and the busy line comes back as a deny (its start_by keeps a pass from
    granting it later, whatever becomes of this hook). ("admit", context), ("deny", reason), or None
    (nothing to book it under, or no loop to book it with: it runs as it is)."""
    from reconciler.core.agentclis import GATE_HOOK_TIMEOUT_S
    from reconciler.core.hooks import hold_id

    held = hold_id(call)
    if held is None or not isinstance(answer, dict):
        return None
    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Submit
    from reconciler.observed.procs import note_owner

    owner, name = note_owner(os.getppid())
    sock = os.path.join(state_root(environ), "serve.sock")
    within = min(wait_s, GATE_HOOK_TIMEOUT_S - ADMIT_MARGIN_S)
    give_up = time.monotonic() + within
    now = time.time()
    # gated: its size and time are the gate's guess, as a gated job's are: others are told its end is
    # a guess (not a promise to plan on), and it is held until twice its estimate (Record.expires).
    # Its command as the gate's rewrite would run it: asked again after a refusal, it keeps its place.
    fields = {"title": f"{heavy.fingerprint} (in place)", "project": project, "mem_gb": heavy.mem_gb,
              "cpus": heavy.cpus, "est_s": max(int(heavy.est_s), 30), "gated": True, "queue": True,
              "created": now, "start_by": now + within, "owner_pid": owner, "owner_name": name, "request_id": held,
              "cmd": ["bash", "-c", call.command]}
    try:
        got = ask(sock, Submit("note", fields), timeout=ADMIT_ASK_S + 0.5)
    except Exception:  # noqa: BLE001 - no loop, or none that answers: the command runs as it is
        return None
    if not isinstance(got, dict):
        return None
    data = got.get("data") if isinstance(got.get("data"), dict) else {}
    entry, state = data.get("id"), data.get("state")
    while got.get("code") == 0 and state == "queued" and isinstance(entry, str):
        if time.monotonic() + ADMIT_RETRY_S > give_up:
            state = _withdraw_booking(sock, entry)
            break
        time.sleep(ADMIT_RETRY_S)
        state = _entry_state(sock, entry) or state
    if got.get("code") == 0 and state == "running":
        mark_held(environ, held)
        booked = f"{heavy.mem_gb:g} GB and {heavy.cpus:g} cpus"
        return "admit", (f"res: this is heavy work ({heavy.source}); res booked {booked} for it while it "
                         "runs (it runs as it is, in this session)")
    if got.get("code") == 0:  # withdrawn unstarted: who holds what now, as the gate says it
        now_said = ask_again()
        line = str((now_said or {}).get("line") or answer.get("line") or "busy")
    else:
        line = str(got.get("line") or answer.get("line") or "busy")
    return "deny", (f"res: not run: `{shortened(call.command)}` is heavy work ({heavy.source}) and would wait "
                    f"more than {within:g} s for memory or CPUs; {line}")


def _entry_state(sock: str, entry: str) -> str | None:
    """The entry's state as the loop has it now (None: no answer)."""
    import json

    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Status

    try:
        got = ask(sock, Status(entry, json=True), timeout=ADMIT_ASK_S)
        return json.loads(got["line"]).get("state") if isinstance(got, dict) and got.get("code") == 0 else None
    except Exception:  # noqa: BLE001 - asked again a moment later, or given up on at the deadline
        return None


def _withdraw_booking(sock: str, entry: str) -> str | None:
    """A booking not granted within the wait is withdrawn (its start_by ends it even if this is not
    heard): None; "running" if it was granted by now (it stays, and the line runs)."""
    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Release

    if _entry_state(sock, entry) == "running":
        return "running"
    try:  # (a grant in the moment between: released with it, and refused; the agent asks again)
        ask(sock, Release(entry, stop=False), timeout=ADMIT_ASK_S)
    except Exception:  # noqa: BLE001
        pass
    return None


def held_marker(environ, held: str) -> str:
    """The file that says this hook booked `held` (`<state>/hook-held/<request id>`): the post-tool
    event of every other command (nearly all: light ones) asks the loop nothing."""
    return os.path.join(state_root(environ), "hook-held", held)


def mark_held(environ, held: str) -> None:
    try:
        os.makedirs(os.path.dirname(held_marker(environ, held)), mode=0o700, exist_ok=True)
        os.close(os.open(held_marker(environ, held), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        pass  # not marked: the booking ends at its estimate's end, or its session's


def release_booking(environ, ran) -> None:
    """The post-tool event of a command admitted in place (docs/agent-hooks.md): the booking its
    pre-tool event made under its request id (core.hooks.hold_id) is released; none there (a command
    that was not booked, or was released already): nothing, not even a question to the loop. Answered
    or not, the hook says nothing. Asked only where something was ever booked in place (hook.main
    looks for `<state>/hook-held` first: the post-tool event of a light command imports nothing)."""
    from reconciler.core.hooks import hold_id
    from reconciler.loop.protocol import ReleaseRequest

    held = hold_id(ran)
    if held is None:
        return
    try:
        os.unlink(held_marker(environ, held))
    except OSError:
        return  # not booked by this hook (a light command), or released already
    ask_loop(environ, ReleaseRequest(held).to_wire(), ANNOUNCE_TIMEOUT_S)


def would_fit(environ, size: dict):
    """The loop's answer to "would a job of this size start now, or when?" (loop op `gate`): a dict;
    None when no loop listens (or an old or broken one answered nothing usable); STUCK when one took
    the question and did not answer within ASK_TIMEOUT_S."""
    from reconciler.loop.client import NoDaemon, Unanswered, ask
    from reconciler.loop.protocol import Gate

    try:
        answer = ask(os.path.join(state_root(environ), "serve.sock"), Gate(size), timeout=ASK_TIMEOUT_S)
    except (Unanswered, TimeoutError):
        return STUCK
    except NoDaemon:
        return None
    except Exception:  # noqa: BLE001 - the hook never gets in the way
        return None
    got = answer.get("answer") if isinstance(answer, dict) and answer.get("code") == 0 else None
    return got if isinstance(got, dict) else None
