"""Sizes, durations, money and counts: parsing what a person typed, and the arithmetic of them. Pure
and import-light: used on the hot path (`res run`). Their text (`10.0 GB`, `14:05`, `40 min`) is made
in render/text.py.

Clock times are reckoned in a zone the caller passes in (`Zone`: epoch seconds -> seconds east of UTC),
never the zone of the machine the code runs on, so a replayed decision reads the same anywhere.
"""
from __future__ import annotations

import math
import re
from typing import Callable

Zone = Callable[[float], int]  # epoch seconds -> the zone's offset from UTC then, in seconds (east +)


def UTC(ts: float) -> int:  # noqa: N802 (a zone, named as zones are)
    return 0

GIB = 1024**3
# Anything bigger than this is a typo, not a request (64 TiB).
MAX_GB = 65536.0
MAX_SECONDS = 365 * 86400

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([MmGgTt]?)(?:[iI]?[bB])?\s*$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_DUR_UNITS = {"": 60, "s": 1, "m": 60, "h": 3600, "d": 86400}


class BadValue(ValueError):
    """A user-supplied value that cannot be used; the message is one line for the user."""


def parse_size_gb(text: str, what: str = "--mem") -> float:
    """'10G' -> 10.0, '512M' -> 0.5, '2.5' -> 2.5 (plain figures are GB). Must be > 0."""
    m = _SIZE.match(str(text))
    if not m:
        raise BadValue(f"{what} {text!r}: not a size (use e.g. 512M, 10G or 2.5)")
    value, unit = float(m.group(1)), m.group(2).upper()
    gb = value / 1024 if unit == "M" else value * 1024 if unit == "T" else value
    if gb <= 0:
        raise BadValue(f"{what} {text!r}: must be more than 0")
    if gb < 1 / 1024:
        raise BadValue(f"{what} {text!r}: must be at least 1M")
    if gb > MAX_GB or not math.isfinite(gb):
        raise BadValue(f"{what} {text!r}: absurdly large (more than {MAX_GB:.0f} GB)")
    return round(gb, 6)


def parse_duration_s(text: str, what: str = "--for") -> int:
    """'90s' -> 90, '40m' -> 2400, '4h' -> 14400, '1d' -> 86400; a plain number is minutes."""
    m = _DURATION.match(str(text))
    if not m:
        raise BadValue(f"{what} {text!r}: not a duration (use e.g. 90s, 40m, 4h, 1d)")
    seconds = float(m.group(1)) * _DUR_UNITS[m.group(2)]
    if seconds < 1:
        raise BadValue(f"{what} {text!r}: must be at least 1s")
    if seconds > MAX_SECONDS:
        raise BadValue(f"{what} {text!r}: longer than a year")
    return int(round(seconds))


def parse_cpus(text: str, what: str = "--cpus") -> float:
    try:
        cpus = float(text)
    except ValueError:
        raise BadValue(f"{what} {text!r}: not a number") from None
    if not math.isfinite(cpus) or cpus <= 0:
        raise BadValue(f"{what} {text!r}: must be more than 0")
    if cpus < 0.01:
        raise BadValue(f"{what} {text!r}: must be at least 0.01")
    if cpus > 4096:
        raise BadValue(f"{what} {text!r}: absurdly many")
    return cpus


def parse_pid(text: str, what: str = "--owner") -> int:
    if not str(text).strip().isdigit() or int(text) < 1 or int(text) > 1 << 22:
        raise BadValue(f"{what} {text!r}: not a process id")
    return int(text)


def parse_usd(text: str, what: str = "--max-cost-usd") -> float:
    """'0.50', '$2' -> USD; 0 means no limit."""
    try:
        usd = float(str(text).strip().lstrip("$"))
    except ValueError:
        raise BadValue(f"{what} {text!r}: not an amount in USD (e.g. 0.50)") from None
    if not math.isfinite(usd) or usd < 0:
        raise BadValue(f"{what} {text!r}: must be 0 (no limit) or more")
    if usd > 1e6:
        raise BadValue(f"{what} {text!r}: absurdly large")
    return usd


def parse_count(text: str, what: str = "--max-iterations") -> int:
    if not str(text).strip().isdigit():
        raise BadValue(f"{what} {text!r}: not a whole number")
    n = int(text)
    if n > 10**9:
        raise BadValue(f"{what} {text!r}: absurdly large")
    return n


def local_midnight(ts: float, zone: Zone) -> float:
    """The epoch second of the midnight before `ts` in `zone` (a DST change since then counted)."""
    midnight = ts - (ts + zone(ts)) % 86400
    return midnight + (zone(ts) - zone(midnight))


def civil_date(ts: float, zone: Zone) -> tuple[int, int, int]:
    """(year, month, day) of an epoch timestamp in `zone`, proleptic Gregorian (Howard Hinnant's
    civil_from_days: no datetime import on the paths that show dates)."""
    z = int((ts + zone(ts)) // 86400) + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


THROTTLE_USED = 0.85  # of the job's own --mem
THROTTLE_PRESSURE = 20.0  # memory.pressure some avg60, percent


def throttled(used_gb: float, mem_gb: float, pressure_avg60: float | None) -> bool:
    """A job at its own memory limit and stalling on it: the rule of the status warning and of `res
    wait`'s notice (here, import-light: a waiting client checks it every few seconds)."""
    return pressure_avg60 is not None and used_gb >= THROTTLE_USED * mem_gb and pressure_avg60 >= THROTTLE_PRESSURE
