"""`res agent-rules`: the lines an agent's instructions file (CLAUDE.md, AGENTS.md) needs so that
agents on a shared machine use `res`. The figures are the policy's (heavy_mem_gb, heavy_cpus,
heavy_minutes). Pure."""
from __future__ import annotations

# What `res doctor` takes for an instructions file that tells agents about res.
MENTIONS_RES = r"(?<![\w/.-])res (run|note|wait|status|release|agent-rules)\b|`res`"


def _figure(x: float) -> str:
    return f"{x:g}"


def agent_rules(policy) -> list[str]:
    gb, cores, minutes = _figure(policy.heavy_mem_gb), _figure(policy.heavy_cpus), _figure(policy.heavy_minutes)
    return [
        "## Shared machine: heavy work goes through `res`",
        "",
        f"- Heavy work (over ~{gb} GB of memory, ~{cores} cores or ~{minutes} minutes: builds, test suites, e2e, "
        "training) runs through `res run --mem SIZE --for TIME -- COMMAND` (`--wait` streams its output and "
        "exits with its code); never bare `systemd-run`, never a long command in the foreground. Not sure of "
        "the size? `--mem auto --cpus auto --for auto` takes what earlier runs of that command here needed.",
        "- A big step that must run in the foreground takes a note first: `res note --mem SIZE --for TIME \"what\"`.",
        "- Exit 3 means busy: the line says who holds what and until when. Do other work and retry after the "
        "time it prints (or add `--queue` to wait in line); never poll in a tight loop.",
        "- No big scratch files in /tmp when it is RAM-backed (tmpfs): use a directory on disk.",
        "- When your session ends, release what you still hold: `res status` lists it, `res release r-N` frees it.",
    ]
