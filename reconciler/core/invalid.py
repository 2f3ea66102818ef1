"""What is wrong with a value, in res's words (issue 40): a validation error of the models or the
policy (pydantic's error, as data) becomes `key = value: what is wrong; allowed: what is`, with the
field's own range, type and form. No library's wording reaches a user or an agent; every place that
validates what a person or an agent wrote (the policy, game.toml, a queue entry, a request, a record
of state.db) says it through here. Pure: data in, text out."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from typing import Any

# The forms a field's pattern allows, said in words (the patterns of models.py and config/policy.py).
PATTERN_WORDS = {
    r"^[A-Za-z0-9_]+$": "letters, digits and _ only",
    r"^[A-Za-z0-9_.:-]+\.slice$": "a slice name: letters, digits and _ . : - only, ending in .slice",
    r"^[A-Za-z0-9_.,-]*$": "letters, digits and _ . , - only",
    r"^[A-Za-z0-9_.-]*$": "letters, digits and _ . - only",
    r"^[A-Za-z0-9_.-]{1,64}$": "a word of 1 to 64 letters, digits and _ . -",
    r"^r-[1-9][0-9]{0,9}$": 'an id like "r-12" (r- and a number from 1)',
    r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}$": "up to 100 letters, digits and . _ : @ + -, starting with a letter or digit",
}

# The unit a key's figures are in, by how its name ends.
UNITS = (("_gb", "GB"), ("_cpus", "CPUs"), ("_s", "seconds"), ("_minutes", "minutes"), ("_hours", "hours"),
         ("_pct", "%"), ("_usd", "USD"), ("_until", "epoch seconds"))
_SPECIAL_UNITS = {"until": "epoch seconds", "created": "epoch seconds", "max_duration": "seconds",
                  "game_hours": "hours", "margin": "times", "cpu_overcommit": "times"}


def shown(value: Any, limit: int = 40) -> str:
    """A value as a person would write it in TOML: `-1`, `inf`, `"8G"`, `true`; escaped, one line, cut."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and not math.isfinite(value):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = quoted(value)
    elif isinstance(value, (list, tuple)):
        text = f"a list of {len(value)}"
    elif isinstance(value, dict):
        text = f"a table of {len(value)}"
    elif value is None:
        text = "nothing"
    elif isinstance(value, (bytes, bytearray)):
        text = quoted(bytes(value).decode("utf-8", "surrogateescape"))
    else:
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(s: str) -> str:
    """`s` in double quotes, printable: a control character or quote escaped (`\\n`, `\\"`), a byte
    that was not UTF-8 (a surrogate escape, as Python reads such an argument) as `\\xff`."""
    out = []
    for ch in s:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F or 0xD800 <= o <= 0xDFFF:
            out.append(json.dumps(ch)[1:-1] if o < 0x80 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _figure(x: Any) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}" if isinstance(x, float) else str(x)


def unit_of(key: str) -> str | None:
    key = key.rsplit(".", 1)[-1]
    if key in _SPECIAL_UNITS:
        return _SPECIAL_UNITS[key]
    for end, unit in UNITS:
        if key.endswith(end):
            return unit
    return None


def _bounds(metadata) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata or ():
        for name in ("ge", "gt", "le", "lt", "max_length", "min_length", "pattern"):
            v = getattr(m, name, None)
            if v is not None:
                out[name] = v
    return out


def _plain(annotation: Any) -> tuple[Any, list]:
    """The type under Optional / Annotated, and the metadata Annotated carried."""
    meta: list = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            args = typing.get_args(annotation)
            annotation, meta = args[0], meta + [a for a in args[1:]]
            for a in args[1:]:  # a pydantic Field inside Annotated keeps its constraints in .metadata
                meta += list(getattr(a, "metadata", ()) or ())
            continue
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(rest) == 1:
                annotation = rest[0]
                continue
        return annotation, meta


def allowed(field: Any, key: str) -> str | None:
    """What a field takes, in words (`a number of GB from 0 to 65536`, `true or false`, `one of "auto",
    "never"`, `letters, digits and _ only (at most 64 characters)`), from its annotation and
    constraints; None when nothing useful can be said."""
    if field is None:
        return None
    kind, meta = _plain(getattr(field, "annotation", None))
    b = _bounds(list(getattr(field, "metadata", ()) or ()) + meta)
    origin = typing.get_origin(kind)
    if kind is bool:
        return "true or false"
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(v) for v in typing.get_args(kind))
    if kind in (int, float):
        unit = unit_of(key)
        what = ("a whole number" if kind is int else "a number") + (f" of {unit}" if unit and unit != "%" else "")
        lo = f"{_figure(b['ge'])}" if "ge" in b else f"more than {_figure(b['gt'])}" if "gt" in b else None
        hi = f"{_figure(b['le'])}" if "le" in b else f"less than {_figure(b['lt'])}" if "lt" in b else None
        pct = " (%)" if unit == "%" else ""
        if lo is not None and hi is not None:
            if lo.startswith("more"):
                return f"{what} {lo} and up to {hi}{pct}"
            return f"{what} from {lo} to {hi}{pct}"
        if lo is not None:
            return f"{what} {'from ' + lo if not lo.startswith('more') else lo}{pct}"
        if hi is not None:
            return f"{what} up to {hi}{pct}"
        return what + pct
    if kind is str:
        form = PATTERN_WORDS.get(b.get("pattern", ""), "text of the allowed form" if "pattern" in b else "text")
        if "max_length" in b and "{" not in str(b.get("pattern", "")):
            form += f" (at most {b['max_length']} characters)"
        return form
    if origin in (list, tuple) or kind in (list, tuple):
        item = (typing.get_args(kind) or (None,))[0]
        inner, imeta = _plain(item) if item is not None else (None, [])
        ib = _bounds(imeta)
        what = "a list"
        if inner is str:
            what += " of words" if "pattern" in ib else " of texts"
            if "pattern" in ib and ib["pattern"] in PATTERN_WORDS:
                what += f" ({PATTERN_WORDS[ib['pattern']]})"
        elif inner is not None and typing.get_origin(inner) is typing.Literal:
            what += " of " + ", ".join(json.dumps(v) for v in typing.get_args(inner))
        if "max_length" in b:
            what += f", at most {b['max_length']} of them"
        return what
    if origin is dict or kind is dict:
        return "a table" + (f" of at most {b['max_length']} keys" if "max_length" in b else "")
    if isinstance(kind, type) and fields_of(kind):
        keys = fields_of(kind)
        return "a table with the keys " + ", ".join(keys) if keys else "a table"
    return None


class _Field:
    """A dataclass field as `allowed` reads it: its annotation (constraints inside Annotated)."""

    __slots__ = ("annotation", "metadata")

    def __init__(self, annotation: Any):
        self.annotation, self.metadata = annotation, ()


@functools.cache
def _dataclass_fields(model: type) -> dict[str, _Field]:
    try:
        hints = typing.get_type_hints(model, include_extras=True)
    except (NameError, TypeError):
        hints = {}
    return {f.name: _Field(hints.get(f.name)) for f in dataclasses.fields(model)}


def fields_of(model: Any) -> dict[str, Any]:
    """A pydantic model's or a dataclass's fields by name ({} for anything else)."""
    got = getattr(model, "model_fields", None)
    if isinstance(got, dict):
        return got
    if isinstance(model, type) and dataclasses.is_dataclass(model):
        return _dataclass_fields(model)
    return {}


def field_at(model: Any, loc: tuple) -> Any:
    """The field an error's location names, walking nested models ([cluster] partition); None if
    the location is not a field (an unknown key, an item of a list)."""
    field = None
    for part in loc:
        if isinstance(part, int):
            continue
        fields = fields_of(model)
        if part not in fields:
            return None
        field = fields[part]
        model = _plain(getattr(field, "annotation", None))[0]
    return field


def wrong(err: dict) -> str:
    """What is wrong, from the error's type (and the value's own words where a validator of ours
    made the error)."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "value_error":
        said = str(ctx.get("error") or err.get("msg") or "").removeprefix("Value error, ")
        return said or "not allowed"
    if kind in ("greater_than_equal", "greater_than"):
        return "negative" if isinstance(value, (int, float)) and value < 0 and ctx.get("ge", ctx.get("gt")) == 0 \
            else "too small"
    if kind in ("less_than_equal", "less_than"):
        return "too large"
    if kind == "finite_number":
        return "not a finite number"
    if kind in ("float_type", "float_parsing", "int_type", "int_parsing", "decimal_type", "decimal_parsing",
                "complex_type", "complex_str_parsing", "number_type"):
        return "not a number"
    if kind in ("int_from_float", "int_parsing_size"):
        return "not a whole number" if kind == "int_from_float" else "too large"
    if kind in ("bool_type", "bool_parsing"):
        return "not true or false"
    if kind in ("string_type", "str_type"):
        return "not text"
    if kind == "string_unicode":
        return "not valid UTF-8 text"
    if kind == "string_too_long":
        n = len(value) if isinstance(value, str) else None
        return f"too long ({n} characters)" if n is not None else "too long"
    if kind == "string_too_short":
        return "empty" if value == "" else "too short"
    if kind in ("too_long",):
        return "too many items"
    if kind in ("too_short",):
        return "too few items"
    if kind == "string_pattern_mismatch":
        return "not of the allowed form"
    if kind in ("literal_error", "enum"):
        return "not one of the allowed values"
    if kind in ("list_type", "tuple_type", "set_type", "iterable_type"):
        return "not a list"
    if kind in ("dict_type", "model_type", "dataclass_type", "model_attributes_type", "mapping_type"):
        return "not a table"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return "not a key res knows"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        return "missing"
    if kind == "json_invalid":
        return "not JSON"
    return "not a value res accepts here"


def explain(err: dict, model: Any = None, prefix: tuple = (), head: str | None = None) -> tuple[str | None, str]:
    """(the top-level key, `key = value: what is wrong; allowed: …`) for one validation error of
    `model` (a pydantic model or dataclass class). `prefix`: location parts to leave out of the name
    (a queue entry's index); `head`: what to name the value by instead of `key = value`
    (`RES_USER_RESERVE_GB="abc"`)."""
    loc = tuple(err.get("loc", ()))[len(prefix):]
    names = [str(p) for p in loc if not isinstance(p, int)]
    key = ".".join(names) or "value"
    kind = err.get("type", "")
    what = wrong(err)
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        parent = field_at(model, loc[:-1]) if len(loc) > 1 else None
        known = list(fields_of(_plain(parent.annotation)[0] if parent is not None else model))
        tail = f" (its keys: {', '.join(known)})" if known and len(known) <= 12 else ""
        return (names[0] if names else None), f"{key}: {what}{tail}"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        said = allowed(field_at(model, loc), key)
        return (names[0] if names else None), f"{key}: {what}" + (f"; give {said}" if said else "")
    said = None if kind == "value_error" else allowed(field_at(model, loc), key)
    index = "".join(f"[{p}]" for p in loc if isinstance(p, int))
    if head is None:
        head = f"{key}{index} = {shown(err.get('input'))}" if "input" in err and not isinstance(err.get("input"), dict) \
            else f"{key}{index}"
    return (names[0] if names else None), f"{head}: {what}" + (f"; allowed: {said}" if said else "")


def first(errors: list[dict], model: Any = None, prefix: tuple = ()) -> tuple[str | None, str]:
    """`explain` of the first error (pydantic orders them by field)."""
    if not errors:
        return None, "not a value res accepts here"
    return explain(errors[0], model, prefix)
