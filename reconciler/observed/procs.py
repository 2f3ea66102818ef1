"""The process table from /proc (stdlib and core.agents only, import-light: `res note` uses
parse_stat): names, parents, owners, cgroups. Which of them are agents is core.agents' rule."""
from __future__ import annotations

import os

from reconciler.core.agents import agent_name, is_session


class Proc:
    __slots__ = ("pid", "ppid", "name", "uid", "state")

    def __init__(self, pid: int, ppid: int, name: str, uid: int, state: str = "R"):
        self.pid, self.ppid, self.uid, self.state = pid, ppid, uid, state
        self.name = name  # comm: the executable's (or script's) file name, at most 15 characters


def parse_stat(text: str) -> tuple[str, int, str]:
    """(comm, ppid, state) from the text of /proc/PID/stat; comm may hold spaces and parentheses."""
    name = text[text.index("(") + 1: text.rindex(")")]
    rest = text[text.rindex(")") + 2:].split()
    return name, int(rest[1]), rest[0]


def note_owner(start: int) -> tuple[int, str]:
    """(pid, name) of the process whose exit frees a note made by `start`'s child: the nearest agent
    session among `start` and its ancestors (agents run each command in a shell that exits at once),
    else `start` itself (a person's interactive shell)."""
    found = nearest_agent(start)
    if found is not None:
        return found
    try:
        with open(f"/proc/{start}/stat") as f:
            return start, parse_stat(f.read())[0]
    except (OSError, ValueError):
        return start, "?"


def nearest_agent(start: int, hops: int = 64) -> tuple[int, str] | None:
    """(pid, agent CLI name) of the nearest agent session among `start` and its ancestors, or None."""
    for pid, _comm, agent in _ancestry(start, hops):
        if agent is not None:
            return pid, agent
    return None


def _ancestry(pid: int, hops: int):
    """(pid, comm, agent CLI name or None) of `pid` and its ancestors, nearest first, as far as /proc
    tells (at most `hops`)."""
    cur = pid
    for _ in range(hops):
        try:
            with open(f"/proc/{cur}/stat") as f:
                comm, ppid, _ = parse_stat(f.read())
            with open(f"/proc/{cur}/cmdline", "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        except (OSError, ValueError):
            return
        yield cur, comm, agent_name(comm, argv)
        if ppid <= 1:
            return
        cur = ppid


def process_chain(pid: int, hops: int = 6) -> str:
    """Who is asking, as `res pid 812 < bash pid 811 < claude pid 4121`: the process and its
    ancestors, up to the first agent CLI (or `hops` of them)."""
    parts = []
    for cur, comm, agent in _ancestry(pid, hops):
        parts.append(f"{agent or comm} pid {cur}")
        if agent is not None:
            break
    return " < ".join(parts) or f"pid {pid}"


def start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22): with the pid, it names
    one process for good (a pid is reused, the pair is not). None if there is no such process, or it
    has ended and only waits to be reaped (a zombie runs nothing and holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        rest = text[text.rindex(")") + 2:].split()
        return None if rest[0] in ("Z", "X") else rest[19]
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """A process `pid` runs (a zombie only waits to be reaped: it runs nothing, holds nothing)."""
    return start_time(pid) is not None


def processes() -> dict[int, Proc]:
    """Every process that can be read now (ones that end while being read are skipped)."""
    out: dict[int, Proc] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                name, ppid, state = parse_stat(f.read())
            uid = entry.stat().st_uid
        except (OSError, ValueError):
            continue
        pid = int(entry.name)
        if state in ("Z", "X"):
            continue  # ended, only not reaped yet: nothing to move
        out[pid] = Proc(pid, ppid, name, uid, state)
    return out


def descendants(procs: dict[int, Proc], pid: int) -> list[int]:
    """Every descendant of `pid` in the table, parents before children."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], list(sorted(children.get(pid, [])))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(sorted(children.get(child, [])))
    return out


def inside_session(procs: dict[int, Proc], pid: int) -> bool:
    """Whether any ancestor of `pid` (as far as the table knows) is an agent session
    (core.agents.is_session, by its process name)."""
    seen, cur = set(), procs[pid].ppid if pid in procs else 0
    while cur in procs and cur not in seen:
        if is_session(procs[cur].name):
            return True
        seen.add(cur)
        cur = procs[cur].ppid
    return False


def cgroup_of(pid: int) -> str | None:
    """The systemd cgroup of `pid` (see cgroup.process_unit_cgroup); None if it is gone."""
    from reconciler.observed.cgroup import process_unit_cgroup

    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return process_unit_cgroup(f.read())
    except OSError:
        return None


def in_place_use(bookings: dict[str, tuple[int, float]]) -> dict[str, float]:
    """GB that each of the gate's bookings in place (commands/hookloop.py `admit`: booking id -> (its
    owner, the agent CLI's pid; when it was made, epoch)) uses now: the anonymous memory of the owner's
    descendants that started at or after it (a process started after several bookings of one owner
    counts to the latest of them). Anonymous memory is what a command holds and MemAvailable no longer
    counts: file pages are cache the kernel can take back, so this reads low rather than high. A
    booking whose owner is gone, or none of whose processes could be read: 0."""
    uptime_at = _boot_epoch()
    hz, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    out = {job_id: 0.0 for job_id in bookings}
    by_owner: dict[int, list[tuple[float, str]]] = {}
    for job_id, (owner, since) in bookings.items():
        by_owner.setdefault(owner, []).append((since, job_id))
    table = processes() if by_owner else {}
    for owner, marks in by_owner.items():
        marks.sort()
        for pid in descendants(table, owner):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    text = f.read()
                with open(f"/proc/{pid}/statm") as f:
                    resident, shared = (int(v) for v in f.read().split()[1:3])
                started = uptime_at + int(text[text.rindex(")") + 2:].split()[19]) / hz
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            ahead = [job_id for since, job_id in marks if since <= started + _START_SLACK_S]
            if ahead:
                out[ahead[-1]] += max(0, resident - shared) * page / 2**30
    return out


_START_SLACK_S = 0.05  # a process's start is known to a clock tick; the booking's time to the call


def _boot_epoch() -> float:
    """When the machine booted, epoch seconds, to a hundredth (what /proc/PID/stat's start times count from)."""
    import time

    with open("/proc/uptime") as f:
        return time.time() - float(f.read().split()[0])
