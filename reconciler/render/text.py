"""The small text helpers every line is made with: sizes, CPUs, money, spans and clock times as
people read them (`10.0 GB`, `2 cpus`, `$0.52`, `40 min`, `14:05`), and user-supplied text made safe
for one line (`one_line`, `quoted`, `lock_text`, `escaped`, `escaped_path`). Pure and import-light:
`res run` and `res status` show their lines with them."""
from __future__ import annotations

from reconciler.core.hist import flat
from reconciler.core.quantities import Zone, civil_date


def fmt_usd_pair(value: float, limit: float) -> tuple[str, str]:
    """Two amounts as $x.xx, with more digits where cents alone would show them equal."""
    for digits in (2, 4, 6):
        a, b = f"${value:.{digits}f}", f"${limit:.{digits}f}"
        if a != b:
            return a, b
    return a, b


def fmt_gb(gb: float) -> str:
    """`10.0 GB`; under 1 GB in MB (`28 MB`, not `0.0 GB`)."""
    if abs(gb) < 0.9995:
        return f"{round(gb * 1024):d} MB"
    return f"{gb:.1f} GB"


def fmt_cpus(cpus: float) -> str:
    cpus = round(float(cpus), 2)
    n = int(cpus) if cpus.is_integer() else cpus
    return f"{n} cpu" if n == 1 else f"{n} cpus"


def _finer(fmt, x: float, digits: int, plain: str) -> str | None:
    """`x` as `fmt` shows it (fmt_gb, fmt_cpus, or a bare figure) with `digits` decimals; None where
    that is no finer than `plain`: GB (and a bare figure) to 0.001 (1 MB), MB to 0.1, CPUs to 0.001."""
    if fmt is fmt_gb and plain.endswith(" MB"):
        return f"{x * 1024:.{digits}f} MB" if digits == 1 else None
    unit = " GB" if fmt is fmt_gb else " cpus" if fmt is fmt_cpus else ""
    return f"{x:.{digits}f}{unit}" if 2 <= digits <= 3 else None


def _reading(shown: str) -> tuple:
    """What a figure reads as: `3.0 GB` and `3 GB` alike."""
    figure, _, unit = shown.partition(" ")
    return float(figure), unit.removesuffix("s")


def apart(fmt, a: float, b: float) -> tuple[str, str]:
    """`fmt(a)`, `fmt(b)` (fmt_gb, fmt_cpus, or any one-figure format), unless they read the same though
    a and b differ: then both with as many more decimals as tell them apart (`2.97 GB`, `2.98 GB`, not
    `3.0 GB` twice). Apart by less than the finest step (_finer): noise, not a reason; as they were."""
    plain = fmt(a), fmt(b)
    if a == b or _reading(plain[0]) != _reading(plain[1]):
        return plain
    for digits in (1, 2, 3):
        sa, sb = _finer(fmt, a, digits, plain[0]), _finer(fmt, b, digits, plain[0])
        if sa is not None and sa != sb:
            return sa, sb
    return plain


def fmt_clock(ts: float, zone: Zone) -> str:
    """HH:MM of an epoch timestamp in `zone` (a conversion, not a clock read)."""
    minutes = int((ts + zone(ts)) // 60)
    return f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"


def fmt_day(ts: float, zone: Zone) -> str:
    """MM-DD of an epoch timestamp in `zone`."""
    _, month, day = civil_date(ts, zone)
    return f"{month:02d}-{day:02d}"


def fmt_span(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        h, m = divmod(round(seconds / 60), 60)
        return f"{h}h{m:02d}" if m else f"{h}h"
    return f"{seconds / 86400:.1f} d"


def one_line(text: str, limit: int | None = None) -> str:
    """User-supplied text (a title, a reason) as it may appear inside a one-line message: no
    newlines, no control characters (an escape sequence in a title must not reach an agent's
    terminal or parser): its flat form (core.hist.flat, the form a title's kind is read from), cut to
    `limit` characters with "…"."""
    text = flat(text)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def squeezed(text: str) -> str:
    """Text (an error a library raised, a unit's description) with every run of whitespace, newlines
    among them, as one space; other characters are kept as they are (unlike `one_line`, which also
    turns control characters into spaces)."""
    return " ".join(str(text).split())


def escaped(text: str) -> str:
    """User-supplied text shown whole, on one line: every character that is not printable (a newline,
    an escape sequence) as a visible escape (`\\n`, `\\x1b`), so no field can pose as another line or
    drive a terminal. Nothing is dropped: the text can be read back from it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def lock_text(lock: str, limit: int = 120, quote: str = '"') -> str:
    """A lock key as lines show it, quoted: one line, its scope (`KEY@<main tree>`) cut from the left
    when long, since the path's end names the repository."""
    shown = one_line(lock).replace(quote, '"' if quote == "'" else "'")
    if len(shown) > limit:
        key, at, scope = shown.partition("@")
        shown = one_line(shown, limit) if not at or len(key) > limit // 2 else f"{key}@…{scope[-(limit - len(key) - 2):]}"
    return quote + shown + quote


def quoted(text: str, limit: int = 60) -> str:
    return '"' + one_line(text, limit).replace('"', "'") + '"'


def escaped_path(path: str) -> str:
    """A path on one line: control characters and undecodable bytes escaped (`\\x1b`; a byte that
    was not UTF-8, read with surrogateescape, as the byte it was). Unlike `escaped`, every escape is
    one byte's `\\xNN`, as a path's bytes are."""
    return "".join(c if c.isprintable() else "\\x%02x" % (ord(c) & 0xFF) for c in path)
