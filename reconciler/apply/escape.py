"""A job's own `systemd-run` (docs/escaping.md): first on every job's PATH, it runs the real one and
marks the transient service it makes with the job that made it (`RES_ESCAPED_FROM=r-N` in the
unit's environment), so that a pass can tell whose memory a service outside res's slices is (the
view counts it as the job's project's). It changes nothing else: the same arguments, the same exit
code; `--scope` (the caller's own process moves, RES_ID and all) and a call outside a job go
straight through. Written by the executor before a job starts, only when missing or different."""
from __future__ import annotations

import os
from pathlib import Path

NAME = "systemd-run"

# POSIX sh: the real systemd-run is the first one on PATH after this file's own directory.
SCRIPT = r'''#!/bin/sh
# Written by res (docs/escaping.md): a job's systemd-run. It runs the real one with the same
# arguments, and marks the service it makes with the job that made it (RES_ESCAPED_FROM).
real=
old_ifs=$IFS
IFS=:
for d in $PATH; do
    [ -n "$d" ] || continue
    c=$d/systemd-run
    [ "$d" = "${0%/*}" ] && continue
    [ "$c" -ef "$0" ] && continue
    if [ -x "$c" ] && [ ! -d "$c" ]; then real=$c; break; fi
done
IFS=$old_ifs
[ -n "$real" ] || { echo "systemd-run: command not found" >&2; exit 127; }
[ -n "${RES_ID:-}" ] || exec "$real" "$@"
for a in "$@"; do
    case $a in
        --scope|-h|--help|--version) exec "$real" "$@" ;;
        --) break ;;
    esac
done
exec "$real" "--setenv=RES_ESCAPED_FROM=$RES_ID" "$@"
'''


def ensure(bin_dir: Path) -> Path:
    """The job's systemd-run in `bin_dir` (0700, written only when missing or different); its path."""
    path = bin_dir / NAME
    try:
        if path.read_text() == SCRIPT and os.access(path, os.X_OK):
            return path
    except OSError:
        pass
    bin_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = bin_dir / f".{NAME}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
    try:
        os.write(fd, SCRIPT.encode())
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def first_on_path(env: dict[str, str], bin_dir: Path) -> dict[str, str]:
    """`env` with `bin_dir` first on its PATH (once). An environment without a PATH (an entry written
    by hand) is left as it is: the job then gets the manager's own PATH, which this would replace."""
    path = env.get("PATH")
    here = str(bin_dir)
    if not path or path.split(":")[:1] == [here]:
        return env
    return {**env, "PATH": f"{here}:{path}"}
