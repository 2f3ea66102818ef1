"""The zone clock times are shown in and the day begins in: the one input of the core that would
otherwise be read from the machine (the core takes it as an argument, `quantities.Zone`)."""
from __future__ import annotations

import time

from reconciler.core.quantities import Zone


def system_zone(ts: float) -> int:
    """The caller's zone as the C library sees it (`TZ`, else /etc/localtime), at `ts`."""
    return time.localtime(ts).tm_gmtoff


def zone_named(name: str) -> Zone:
    """An IANA zone (`Europe/Berlin`); empty: the caller's own. ValueError for a name no tzdata has."""
    if not name:
        return system_zone
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        info = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as Europe/Berlin)") from None

    def offset(ts: float) -> int:
        return int(datetime.fromtimestamp(ts, info).utcoffset().total_seconds())

    return offset


def zone_of(policy) -> Zone:
    return zone_named(getattr(policy, "time_zone", "") or "")
