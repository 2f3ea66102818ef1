"""The machine view's history (docs/watching.md), pure: `add` a sample, and the older ones are
averaged as they age: every sample for the last hour, one per minute up to 6 hours, one per 10
minutes up to 48 hours, then dropped; and the whole kept under MAX_COUNT samples and MAX_BYTES of
JSON (the oldest go first).

A sample: {"t": epoch s, "gb": {"sessions", "jobs", "you", "res", "cache"}, "budget", "reserve"}.
A bucket (a minute, ten minutes) is averaged only once all of it is past its line, so each is
averaged once, from samples of one resolution (no sample weighs more than another)."""
from __future__ import annotations

import json

FULL_S = 3600.0  # every sample this long
MINUTES_UNTIL_S = 6 * 3600.0  # then one a minute this long
TEN_MINUTES_UNTIL_S = 48 * 3600.0  # then one per 10 minutes this long, then none
MAX_COUNT = 2000  # 120 (an hour at one per 30 s) + 300 + 252 fit with room to spare
MAX_BYTES = 512 * 1024


def _mean(values: list) -> float | None:
    known = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(sum(known) / len(known), 3) if known else None


def average(samples: list[dict]) -> dict:
    """One sample standing for `samples`: at their mean time, each figure their mean (None: none known)."""
    if len(samples) == 1:
        return samples[0]
    keys: list[str] = []
    for s in samples:
        keys += [k for k in (s.get("gb") or {}) if k not in keys]
    return {"t": round(sum(s["t"] for s in samples) / len(samples), 3),
            "gb": {k: _mean([(s.get("gb") or {}).get(k) for s in samples]) for k in keys},
            "budget": _mean([s.get("budget") for s in samples]),
            "reserve": _mean([s.get("reserve") for s in samples])}


def _bucketed(samples: list[dict], width: float, older_than: float) -> list[dict]:
    """`samples` (by time) with each bucket of `width` seconds that ends at or before `older_than`
    averaged into one."""
    out: list[dict] = []
    group: list[dict] = []
    group_key = None
    for s in samples:
        key = s["t"] // width
        if (key + 1) * width > older_than:  # its bucket is not wholly past the line: kept as it is
            if group:
                out.append(average(group))
                group = []
            out.append(s)
            continue
        if key != group_key and group:
            out.append(average(group))
            group = []
        group_key = key
        group.append(s)
    if group:
        out.append(average(group))
    return out


def size_of(samples: list[dict]) -> int:
    """Bytes of `samples` as saved (a compact JSON list)."""
    return 1 + sum(_size(s) for s in samples) if samples else 2


def _size(sample: dict) -> int:
    """Its bytes in the list, with the comma (or the closing bracket) after it."""
    return len(json.dumps(sample, separators=(",", ":"))) + 1


def capped(samples: list[dict], max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> list[dict]:
    """The newest of `samples` that fit in `max_count` and `max_bytes`."""
    samples = samples[-max_count:] if max_count > 0 else []
    if len(json.dumps(samples, separators=(",", ":"))) <= max_bytes:
        return samples  # the usual case, told by one call of the C encoder
    sizes = [_size(s) for s in samples]
    total, first = 1 + sum(sizes), 0
    while first < len(samples) and total > max_bytes:
        total -= sizes[first]
        first += 1
    return samples[first:]


def aged(samples: list[dict], now: float) -> list[dict]:
    """`samples` downsampled as of `now`."""
    kept = sorted((s for s in samples if s["t"] > now - TEN_MINUTES_UNTIL_S and s["t"] <= now), key=lambda s: s["t"])
    kept = _bucketed(kept, 60.0, now - FULL_S)
    return _bucketed(kept, 600.0, now - MINUTES_UNTIL_S)


def add(samples: list[dict], sample: dict, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> list[dict]:
    """`samples` with `sample` (the newest: its time is now), aged and capped; a new list. Samples
    after it (a clock set back) are dropped: the history is a cache, and it must stay in order."""
    return capped(aged([*samples, sample], sample["t"]), max_count, max_bytes)


def since(samples: list[dict], t: float) -> list[dict]:
    return [s for s in samples if s["t"] >= t]


def valid(sample) -> bool:
    """A sample as `add` makes them (what a saved file must hold)."""
    return (isinstance(sample, dict) and isinstance(sample.get("t"), (int, float)) and not isinstance(sample["t"], bool)
            and isinstance(sample.get("gb"), dict))
