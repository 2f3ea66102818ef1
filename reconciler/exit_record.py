"""The exit record of a job, written by the job's own unit (DESIGN §5.4, §6).

Runs as the unit's ExecStopPost, `python3 -I -S exit_hook.py EXIT_PATH` (which imports this module, from
its cached bytecode) with RES_EXIT_RECORD=EXIT_PATH
in its environment (which wins: see runtime/jobunit.py), inside the unit's cgroup, after the main
process (and everything else in the unit) is gone, so the cgroup's peak is the job's peak. systemd passes how the job ended in SERVICE_RESULT, EXIT_CODE and EXIT_STATUS. Because the unit
writes the record itself, the exit is known even when no reconciler runs when the job ends.

Writes, atomically (a temporary file in the same directory, then os.replace) and mode 0600:

    {"result": "exit-code", "code": "exited", "status": "3", "peak_bytes": 123, "oom_kills": 0, "at": 1.7e9,
     "invocation": "…", "cpu_usec": 4567}

Stdlib only; of the package it loads only observed/mounts.py, by its path (it runs isolated, -I -S:
the package is not on sys.path). It runs between a job's end and the moment its unit is seen ended, so
it imports as little as it can: no `json` (it writes its one flat object itself), no `importlib`. Never raises and always exits 0: a missing value is written as null. When the job was
state directory's disk cannot take the record, it goes to RES_EXIT_FALLBACK (in the runtime
directory). When the job was killed at its memory limit it also prints one `res: killed at its memory limit …` line, which lands at
the end of the job's log.
"""
import os
import sys
import time


def _mounts():
    """observed/mounts.py, imported from its folder (this runs isolated: no package on sys.path),
    so from its cached bytecode rather than compiled from source at every job's end."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observed")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import mounts

    return mounts


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _json_string(s):
    """A JSON string in ASCII, as json.dumps writes one: a quote and a backslash escaped, anything
    outside printable ASCII (a control character, an undecodable byte kept as a surrogate) as \\uXXXX."""
    out = []
    for c in s:
        o = ord(c)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif c in _SHORT:
            out.append(_SHORT[c])
        elif 0x20 <= o < 0x7F:
            out.append(c)
        elif o > 0xFFFF:
            o -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 | (o >> 10), 0xDC00 | (o & 0x3FF)))
        else:
            out.append("\\u%04x" % o)
    return '"' + "".join(out) + '"'


def to_json(record):
    """The record (str, int, float, bool or None values) as one JSON object, as json.dumps writes it."""
    parts = []
    for key, value in record.items():
        if value is None:
            text = "null"
        elif value is True or value is False:
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(int(value))
        elif isinstance(value, float):
            text = repr(value) if value == value and abs(value) != float("inf") else "null"
        else:
            text = _json_string(str(value))
        parts.append("%s: %s" % (_json_string(key), text))
    return "{" + ", ".join(parts) + "}"


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(text):
    try:
        return int(text.split()[0])
    except (AttributeError, ValueError, IndexError):
        return None


def _keyed(text, key):
    """The number after `key` in a "key value" per line file (memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return _int(parts[1])
    return None


def _join(mount, root, path):
    root = root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(mount, path.lstrip("/"))


def memory_cgroup_dir():
    """(directory, version) of this process's memory cgroup, or (None, None)."""
    v1_path = v2_path = None
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    mounts = _mounts()
    v1, v2 = mounts.cgroup_mounts(mounts.parse_mountinfo(_read("/proc/self/mountinfo") or ""))
    v1_mount = (v1["memory"].path, v1["memory"].root) if "memory" in v1 else None
    v2_mounts = [(m.path, m.root) for m in v2]
    if v1_path is not None:
        mnt, root = v1_mount or ("/sys/fs/cgroup/memory", "/")
        return _join(mnt, root, v1_path), 1
    if v2_path is not None:
        for mnt, root in v2_mounts or [("/sys/fs/cgroup", "/")]:
            if "memory" in (_read(os.path.join(mnt, "cgroup.controllers")) or "").split():
                return _join(mnt, root, v2_path), 2
    return None, None


def measure(status):
    """(peak_bytes, oom_kills, limit_bytes) of this process's cgroup, as far as they can be read."""
    peak, ooms, limit = None, 0, None
    try:
        d, version = memory_cgroup_dir()
        if version == 1:
            limit = _int(_read(os.path.join(d, "memory.limit_in_bytes")))
            peak = _int(_read(os.path.join(d, "memory.max_usage_in_bytes")))
            ooms = _keyed(_read(os.path.join(d, "memory.oom_control")), "oom_kill")
            if ooms is None:  # kernels before 4.13: hitting the limit and dying of SIGKILL is the OOM kill
                failcnt = _int(_read(os.path.join(d, "memory.failcnt"))) or 0
                ooms = 1 if failcnt > 0 and status == "KILL" else 0
        elif version == 2:
            peak = _int(_read(os.path.join(d, "memory.peak")))
            ooms = _keyed(_read(os.path.join(d, "memory.events")), "oom_kill") or 0
            limit = _int(_read(os.path.join(d, "memory.max")))
    except Exception:
        pass
    return peak, ooms or 0, limit


def cpu_usec():
    """CPU time of this process's cgroup in microseconds (the unit's, everything in it), or None:
    cgroup v2's cpu.stat `usage_usec` (on a hybrid machine too: the unified hierarchy has it for
    every cgroup), else v1's cpuacct.usage (nanoseconds)."""
    try:
        v1_path = v2_path = None
        for line in (_read("/proc/self/cgroup") or "").splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if parts[0] == "0" and parts[1] == "":
                v2_path = parts[2]
            elif "cpuacct" in parts[1].split(","):
                v1_path = parts[2]
        mounts = _mounts()
        v1, v2 = mounts.cgroup_mounts(mounts.parse_mountinfo(_read("/proc/self/mountinfo") or ""))
        if v2_path is not None:
            for m in v2 or []:
                used = _keyed(_read(os.path.join(_join(m.path, m.root, v2_path), "cpu.stat")), "usage_usec")
                if used is not None:
                    return used
        if v1_path is not None and "cpuacct" in v1:
            ns = _int(_read(os.path.join(_join(v1["cpuacct"].path, v1["cpuacct"].root, v1_path), "cpuacct.usage")))
            if ns is not None:
                return ns // 1000
    except Exception:
        pass
    return None


def _mb(n):
    return "%d MB" % round(n / 1048576) if n < 1 << 30 else "%.1f GB" % (n / (1 << 30))


def tell_the_log(record, limit):
    """One line at the end of the job's own output (this script's stdout is the job's log) when the
    kernel killed it at its memory limit, so an agent that reads only the log knows why it ended."""
    oom = record["result"] == "oom-kill" or (record["oom_kills"] > 0 and record["code"] != "exited")
    if not oom:
        return
    size = " (%s)" % _mb(limit) if limit and limit < 1 << 60 else ""
    peak = ", peak %s" % _mb(record["peak_bytes"]) if record["peak_bytes"] else ""
    line = "res: killed at its memory limit%s%s; run it again with a bigger --mem\n" % (size, peak)
    try:
        os.write(1, line.encode())
    except OSError:
        pass


def write_atomic(path, record):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            data = (to_json(record) + "\n").encode()
            if os.write(fd, data) != len(data):
                raise OSError(28, "short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # never a 0-byte temp file left behind (a full disk)
        except OSError:
            pass
        raise


def main(argv):
    try:
        env = os.environ
        # The environment first: systemd 252 keeps Environment= intact across a daemon-reload but
        # mangles '$' and ';' in an ExecStopPost command line.
        path = env.get("RES_EXIT_RECORD") or (argv[1] if len(argv) > 1 else None)
        if not path:
            return 0
        status = env.get("EXIT_STATUS")
        record = {"result": env.get("SERVICE_RESULT"), "code": env.get("EXIT_CODE"), "status": status,
                  "peak_bytes": None, "oom_kills": 0, "at": time.time(), "invocation": env.get("INVOCATION_ID")}
        record["peak_bytes"], record["oom_kills"], limit = measure(status)
        record["cpu_usec"] = cpu_usec()
        tell_the_log(record, limit)
        try:
            write_atomic(path, record)
        except OSError:
            # The state directory's disk is full (or gone): the runtime directory (a tmpfs, as a
            # rule) keeps the record, so a full disk never costs the job its rc.
            fallback = env.get("RES_EXIT_FALLBACK")
            if not fallback:
                raise
            write_atomic(fallback, record)
    except BaseException:  # noqa: BLE001 - the job's end must never be made to fail by its bookkeeping
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
