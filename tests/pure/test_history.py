"""The machine view's history (core/history.py): every sample for an hour, minute averages to 6 h,
10-minute averages to 48 h, then dropped; capped by count and bytes; in order."""
from __future__ import annotations

import json

from reconciler.core import history as h

T0 = 1796256000.0  # a whole hour


def s(t: float, you: float = 1.0, budget: float | None = 5.0) -> dict:
    return {"t": t, "gb": {"sessions": 0.0, "jobs": 2.0, "you": you, "res": 0.1, "cache": 3.0},
            "budget": budget, "reserve": 4.0}


def fill(start: float, end: float, step: float, you=lambda t: 1.0) -> list[dict]:
    out: list[dict] = []
    t = start
    while t <= end:
        out = h.add(out, s(t, you(t)))
        t += step
    return out


def test_the_last_hour_is_kept_whole():
    got = fill(T0, T0 + 3000, 30)
    assert len(got) == 101 and [x["t"] for x in got] == [T0 + 30 * i for i in range(101)]


def test_past_an_hour_one_sample_per_minute_their_average():
    got = h.add([s(T0, you=1.0), s(T0 + 30, you=3.0, budget=None)], s(T0 + 3720))
    assert got[0] == {"t": T0 + 15, "gb": {"sessions": 0.0, "jobs": 2.0, "you": 2.0, "res": 0.1, "cache": 3.0},
                      "budget": 5.0, "reserve": 4.0}  # an unknown figure is left out of its mean
    assert len(got) == 2


def test_a_minute_is_averaged_only_once_it_is_wholly_past_the_hour():
    # T0 is a whole minute; at T0 + 3630 the minute [T0, T0+60) is only half past the hour.
    got = h.add([s(T0, you=1.0), s(T0 + 45, you=3.0)], s(T0 + 3630))
    assert [x["t"] for x in got] == [T0, T0 + 45, T0 + 3630]
    got = h.add(got, s(T0 + 3660))
    assert [x["t"] for x in got] == [T0 + 22.5, T0 + 3630, T0 + 3660] and got[0]["gb"]["you"] == 2.0


def test_the_ages_of_a_long_run():
    now = T0 + 50 * 3600
    raw = [s(T0 + 30 * i, you=30 * i / 3600) for i in range(50 * 120)]
    got = h.add(raw, s(now, you=50.0))
    ts = [x["t"] for x in got]
    assert ts == sorted(ts)
    assert min(ts) > now - 48 * 3600  # past 48 h: dropped
    full = [t for t in ts if t > now - 3600]
    minutes = [t for t in ts if now - 6 * 3600 < t <= now - 3600 - 60]
    tens = [t for t in ts if t <= now - 6 * 3600 - 600]
    assert len(full) == 120  # every 30 s
    assert abs(len(minutes) - 5 * 60) <= 2 and all(b - a == 60 for a, b in zip(minutes, minutes[1:]))
    # (the oldest bucket is partly past 48 h: its mean time is of what is left of it)
    assert abs(len(tens) - 42 * 6) <= 2 and all(b - a == 600 for a, b in zip(tens[1:], tens[2:]))
    assert len(got) < h.MAX_COUNT and h.size_of(got) < h.MAX_BYTES
    # An average is of its time: the 10-minute sample of hour 10 says about 10.
    ten = min(got, key=lambda x: abs(x["t"] - (T0 + 10 * 3600)))
    assert abs(ten["gb"]["you"] - 10.0) < 0.1


def test_added_one_at_a_time_it_ages_as_all_at_once():
    """Each bucket is averaged once, from samples of one resolution: adding a sample every 30 s for 7 h
    gives what ageing the whole 7 h at once gives."""
    end = T0 + 7 * 3600
    one_by_one = fill(T0, end, 30, you=lambda t: (t - T0) / 3600)
    at_once = h.add([s(T0 + 30 * i, you=30 * i / 3600) for i in range(7 * 120)], s(end, you=7.0))
    assert [x["t"] for x in one_by_one] == [x["t"] for x in at_once]
    assert all(abs(a["gb"]["you"] - b["gb"]["you"]) < 0.002 for a, b in zip(one_by_one, at_once))
    assert [x["t"] for x in one_by_one][:2] == [T0 + 285, T0 + 885]  # 10-minute averages at the start


def test_count_and_bytes_are_capped_the_oldest_going_first():
    got: list[dict] = []
    for i in range(50):
        got = h.add(got, s(T0 + i), max_count=10)
    assert [x["t"] for x in got] == [T0 + i for i in range(40, 50)]
    one = len(json.dumps(s(T0), separators=(",", ":"))) + 1
    got = h.capped([s(T0 + i) for i in range(50)], max_bytes=2 + 5 * one)
    assert [x["t"] for x in got] == [T0 + i for i in range(45, 50)]
    assert h.size_of(got) == len(json.dumps(got, separators=(",", ":")))


def test_a_clock_set_back_drops_what_was_after_it():
    got = h.add([s(T0), s(T0 + 30), s(T0 + 60)], s(T0 + 40))
    assert [x["t"] for x in got] == [T0, T0 + 30, T0 + 40]


def test_since_and_valid():
    samples = [s(T0), s(T0 + 60)]
    assert h.since(samples, T0 + 1) == [samples[1]]
    assert h.valid(s(T0)) and not h.valid({"t": "x", "gb": {}}) and not h.valid({"t": True, "gb": {}})
    assert not h.valid([1]) and not h.valid({"t": 1.0})
