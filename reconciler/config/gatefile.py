"""gate.json: what the gate reads before every agent shell command (DESIGN §5.8), written by the loop
when it changes (the heavy table as the policy makes it, gate_wait_s, what history learned), so the
hook reads one small file and no database, no policy files, no pydantic.

Without it (no loop has run yet in this state directory) the hook reads the shipped table itself.
A gate.json that is a symlink, not a regular file, too big or not what the loop writes counts as
missing: the shipped table and the default wait.

Import-light: os and json at the top (the hook's hot path); tomllib only without a gate.json.
"""
from __future__ import annotations

import json
import os

MAX_BYTES = 8 << 20
DEFAULT_WAIT_S = 30.0  # policies/default.toml's gate_wait_s, for a state directory no loop wrote yet


def shipped_table_data() -> dict:
    """The `[heavy]` table of policies/heavy.toml, as shipped."""
    import tomllib

    # config.resources.shipped's rule, with os.path (no pathlib on the hook's path): the package's
    # installed copy, else the checkout's top-level policies/.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    installed = os.path.join(package, "policies")
    where = installed if os.path.isdir(installed) else os.path.join(os.path.dirname(package), "policies")
    with open(os.path.join(where, "heavy.toml"), "rb") as f:
        return tomllib.load(f)["heavy"]


def heavy_table(policy) -> dict:
    """The heavy table as the policy makes it (the shipped one, its additions and removals), as data."""
    from reconciler.core.gate import make_table, table_data

    return table_data(make_table(shipped_table_data(), policy.gate_heavy_add, policy.gate_heavy_remove))


def build(policy, records, table: dict | None = None, fingerprint_of=None) -> dict:
    """gate.json's content for this policy and these records. `table`: heavy_table(policy), when the
    caller keeps it; `fingerprint_of`: core.gate.line_fingerprint, or a caller's memory of it."""
    from reconciler.core.gate import line_fingerprint
    from reconciler.core.hist import learned

    return {"v": 1, "wait_s": policy.gate_wait_s, "heavy_mem_gb": policy.heavy_mem_gb,
            "table": heavy_table(policy) if table is None else table,
            "learned": learned(records, policy.heavy_mem_gb, policy.heavy_minutes, fingerprint_of or line_fingerprint)}


def write(path, data: dict) -> None:
    """Replace gate.json at once (a reader sees the old file or the new one, never half of one), 0600."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load(state_dir: str) -> dict:
    """What the gate goes by: gate.json in the state directory, else the shipped table and defaults."""
    return read(os.path.join(state_dir, "gate.json")) or {
        "v": 1, "table": shipped_table_data(), "learned": {}, "wait_s": DEFAULT_WAIT_S}


def read(path: str) -> dict | None:
    """gate.json as the loop wrote it, or None (missing, a symlink, not a regular file, too big, not
    JSON of the loop's shape)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_BYTES:
            return None
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("table"), dict) \
            or not isinstance(data.get("learned"), dict) or type(data.get("wait_s")) not in (int, float):
        return None
    return data
