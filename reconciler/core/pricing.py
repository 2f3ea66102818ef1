"""The pricing table (DESIGN §5.5): USD per 1M tokens per model, for the spend of agent sessions.

Pure: `load_pricing(shipped_text, override_text)` parses TOML *text*; the caller reads the files
(policies/pricing.toml, the user's override). The override is merged over the shipped table key by
key. A broken table is a `PricingError` with one line naming the source, the key and what is wrong:
never a silently weaker table, because the table is what a `--max-cost-usd` cap is measured with.

Lookup: a model id resolves to the longest table key that is a prefix of it followed by nothing, by a
date or a suffix (`claude-sonnet-4-5-20250929`, `claude-opus-4-6[1m]`, `claude-opus-4@20250514`,
`us.anthropic.claude-opus-4-1-20250805-v1:0`), but not by another version number: `claude-opus-4-9`
is not `claude-opus-4`. What resolves to nothing (an unknown or future model, no model at all) pays
the `[default]` rates, which must be at least the dearest rate of each kind in the table: never $0.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Mapping

PER_TOKEN = 1e-6  # rates are per 1M tokens
# No model call reports more tokens than this, nor costs more than MAX_USD (a whole session's restated
# total included): a count or a cost past them is a hostile or broken line, set aside by the digest
# (BadNumber), never a spend of 10**400 tokens that overflows, or an infinite one.
MAX_TOKENS = 10**12
MAX_USD = 1e9
ONE_HOUR_FACTOR = 1.6  # 1h cache writes cost 2× input, 5m writes 1.25× (Anthropic prompt caching)

RATE_KEYS = ("input", "output", "cache_write", "cache_read")
_OPTIONAL_KEYS = ("cache_write_1h",)
_MODEL_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SEGMENT = re.compile(r"[^-@\[:]*")
_DATE = re.compile(r"\d{6,}")


class BadNumber(ValueError):
    """A usage count or a reported cost that no real model call has (over MAX_TOKENS / MAX_USD, not
    finite): the line that carries it is set aside, one line naming why."""


class PricingError(Exception):
    """One line: the source (file or override), the key, and what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per 1M tokens. `long`: the rates for a prompt of more than `above` tokens; `fast`: the
    rates of a request the API answered in fast mode (its usage says `speed: "fast"`)."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float
    above: int | None = None  # set on a `long` tier only
    long: "Rates | None" = None
    fast: "Rates | None" = None

    def for_prompt(self, prompt_tokens: int) -> "Rates":
        long = self.long
        return long if long is not None and prompt_tokens > long.above else self

    def values(self) -> tuple[float, float, float, float, float]:
        return (self.input, self.output, self.cache_write, self.cache_read, self.cache_write_1h)


class PricingTable:
    """Immutable after load. `cost(model, usage)` for one API response's usage object."""

    __slots__ = ("models", "default", "inference_geo_us", "_cache", "_rates")

    def __init__(self, models: dict[str, Rates], default: Rates, inference_geo_us: float = 1.0):
        self.models = dict(models)
        self.default = default
        self.inference_geo_us = inference_geo_us  # the factor on a request run in the US only
        self._cache: dict[str, str | None] = {}  # model id -> its table key
        self._rates: dict[str, Rates] = {}  # model id -> its rates (the hot path: one lookup a message)

    def resolve(self, model: str | None) -> tuple[str | None, Rates]:
        """(the table key, its rates); (None, the default rates) for an unknown model."""
        key = self.key(model)
        return (key, self.models[key]) if key is not None else (None, self.default)

    def rates(self, model: str | None) -> Rates:
        if model is None:
            return self.default
        r = self._rates.get(model)
        if r is None:
            key = self.key(model)
            r = self.models[key] if key is not None else self.default
            if len(self._rates) < 4096:
                self._rates[model] = r
        return r

    def key(self, model: str | None) -> str | None:
        """The table key a model id resolves to (None: unknown), remembered per id."""
        if not model:
            return None
        try:
            return self._cache[model]
        except KeyError:
            key = self._key(model)
            if len(self._cache) < 4096:
                self._cache[model] = key
            return key

    def cost_tokens(self, model: str | None, input: int = 0, output: int = 0, cache_write: int = 0,
                    cache_read: int = 0, cache_write_1h: int = 0, requests: int = 1, fast: bool = False,
                    us_only: bool = False) -> float:
        """USD for one request, or for the summed usage of `requests` requests (an agent that reports
        only totals): a prompt-length tier is chosen per request, from the average prompt, never from
        the sum. `cache_write` is all cache-write tokens, `cache_write_1h` the part of them written for
        one hour (priced at that rate instead of the 5-minute one). `fast`: answered in fast mode
        (the model's fast rates, where it has them); `us_only`: run in the US only (× inference_geo_us)."""
        r = self.rates(model)
        if fast and r.fast is not None:
            r = r.fast
        elif r.long is not None:
            r = r.for_prompt((input + cache_write + cache_read) / max(1, requests))
        usd = _usd(r, input, output, cache_write, cache_read, cache_write_1h)
        return usd * self.inference_geo_us if us_only else usd

    def standard_cost(self, model: str | None, input: int = 0, output: int = 0, cache_write: int = 0,
                      cache_read: int = 0, cache_write_1h: int = 0) -> float:
        """USD at the model's standard rates, whatever the prompt's length: what a price table with no
        prompt-length tier for it would say."""
        return _usd(self.rates(model), input, output, cache_write, cache_read, cache_write_1h)

    def cost(self, model: str | None, usage: Mapping[str, Any]) -> float:
        """USD for an Anthropic API `usage` object."""
        return self.cost_tokens(model, *usage_tokens(usage))

    def _key(self, model: str | None) -> str | None:
        if not model:
            return None
        m = model.strip().lower()
        i = m.find("claude")
        if i > 0 and m[i - 1] in "./":  # us.anthropic.claude-…, anthropic/claude-…
            m = m[i:]
        best = None
        for key in self.models:
            if len(key) > len(m) or not m.startswith(key) or (best is not None and len(key) <= len(best)):
                continue
            rest = m[len(key):]
            if rest == "" or rest[0] in "@[:" or (rest[0] == "-" and _suffix(rest[1:])):
                best = key
        return best


def _usd(r: Rates, input: int, output: int, cache_write: int, cache_read: int, cache_write_1h: int) -> float:
    cw1h = cache_write_1h if cache_write_1h <= cache_write else cache_write
    return (input * r.input + output * r.output + (cache_write - cw1h) * r.cache_write
            + cw1h * r.cache_write_1h + cache_read * r.cache_read) * PER_TOKEN


def _suffix(rest: str) -> bool:
    """After `<key>-`: a date (20250929) or a word (latest, v1) is a suffix of the key's model; a
    segment that starts with a digit otherwise (9, 5x, 1-20250805) is another version."""
    seg = _SEGMENT.match(rest).group()
    return bool(seg) and (not seg[0].isdigit() or _DATE.fullmatch(seg) is not None)


def tokens(v: Any) -> int:
    """A token count from JSON: a non-negative int (or integral float); anything else (a string, a
    negative, null) counts 0; a count no model call has (over MAX_TOKENS, an infinite or NaN float)
    raises BadNumber."""
    t = type(v)
    if t is int:
        if v > MAX_TOKENS:
            raise BadNumber(f"a usage count of {_short(v)} tokens")
        return v if v > 0 else 0
    if t is float:
        if not v <= MAX_TOKENS:  # NaN and inf included
            raise BadNumber(f"a usage count of {_short(v)} tokens")
        return int(v) if v > 0 else 0
    return 0


def usd(v: Any) -> float | None:
    """A reported cost from JSON: a finite, non-negative number up to MAX_USD; None where it is no
    number (absent, a string); raises BadNumber for one past MAX_USD or not finite."""
    if type(v) not in (int, float):
        return None
    if not -MAX_USD <= v <= MAX_USD:
        raise BadNumber(f"a reported cost of {_short(v)} USD")
    return float(v) if v > 0 else 0.0


def _short(v: int | float) -> str:
    text = repr(v)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


# ---------------------------------------------------------------- loading


def usage_tokens(usage: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """(input, output, cache write, cache read, the part of the cache write for 1 hour) of an
    Anthropic API `usage` object (input_tokens, output_tokens, cache_creation_input_tokens,
    cache_read_input_tokens, optional cache_creation split); anything not a count is 0."""
    get = usage.get
    inp, out, cw, cr = (get("input_tokens"), get("output_tokens"), get("cache_creation_input_tokens"),
                        get("cache_read_input_tokens"))
    split = get("cache_creation")
    if (type(inp) is type(out) is type(cw) is type(cr) is int and min(inp, out, cw, cr) >= 0
            and max(inp, out, cw, cr) <= MAX_TOKENS):
        # the usual usage, read without a call per field
        if split is None:
            return inp, out, cw, cr, 0
        h = split.get("ephemeral_1h_input_tokens") if type(split) is dict else None
        if type(h) is int and h <= MAX_TOKENS:
            return inp, out, cw, cr, min(h if h > 0 else 0, cw)
    cw = tokens(cw)
    # dict first: what JSON gives, and an ABC check costs as much as the rest of this line
    cw1h = tokens(split.get("ephemeral_1h_input_tokens")) if type(split) is dict or isinstance(split, Mapping) else 0
    return tokens(inp), tokens(out), cw, tokens(cr), min(cw1h, cw)


def load_pricing(shipped_text: str, override_text: str | None = None, *,
                 shipped_name: str = "policies/pricing.toml", override_name: str = "pricing override") -> PricingTable:
    """Parse the shipped table and the user's override (TOML text), merge, validate."""
    shipped = _parse(shipped_text, shipped_name)
    _check_shape(shipped, shipped_name)
    override: dict[str, Any] = {}
    if override_text is not None and override_text.strip():
        override = _parse(override_text, override_name)
        _check_shape(override, override_name)
    merged = _merge(shipped, override)

    def source(*path: str) -> str:
        node: Any = override
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return shipped_name
            node = node[p]
        return override_name

    if "default" not in merged:
        raise PricingError(f"{shipped_name}: no [default] table (the rates for unknown models)")
    geo = merged.get("multipliers", {}).get("inference_geo_us", 1.0)
    if isinstance(geo, bool) or not isinstance(geo, (int, float)) or not 1.0 <= geo <= 10.0:
        raise PricingError(f"{source('multipliers', 'inference_geo_us')}: multipliers.inference_geo_us: "
                           f"must be a number from 1 to 10, got {geo!r}")
    models = {key: _rates(val, f"models.{key}", source("models", key)) for key, val in merged.get("models", {}).items()}
    default = _rates(merged["default"], "default", source("default"))
    if default.long is not None:
        raise PricingError(f"{source('default', 'long')}: default.long: the default rate has no prompt-length tier")
    if default.input <= 0 or default.output <= 0:
        kind = "input" if default.input <= 0 else "output"
        raise PricingError(f"{source('default', kind)}: default.{kind}: must be > 0 (unknown models never cost $0)")
    def blame(key: str, name: str) -> str:
        touched = source("default", name) == override_name or source("models", key) == override_name
        return override_name if touched else shipped_name

    _check_default_dearest(default, models, blame)
    return PricingTable(models, default, float(geo))


def _parse(text: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PricingError(f"{name}: {e}") from None


def _check_shape(doc: dict[str, Any], name: str) -> None:
    for key, val in doc.items():
        if key not in ("default", "models", "multipliers"):
            raise PricingError(f"{name}: unknown key {key!r} (expected [default], [models.<model-id>] and [multipliers])")
        if not isinstance(val, dict):
            raise PricingError(f"{name}: {key}: must be a table")
    for key in doc.get("multipliers", {}):
        if key != "inference_geo_us":
            raise PricingError(f"{name}: multipliers: unknown key {key!r} (expected inference_geo_us)")
    for key, val in doc.get("models", {}).items():
        if not _MODEL_KEY.match(key):
            raise PricingError(f"{name}: models.{key}: a model id is lower-case letters, digits, '.', '_' and '-'")
        if not isinstance(val, dict):
            raise PricingError(f"{name}: models.{key}: must be a table of rates")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _rate(table: dict[str, Any], key: str, where: str, src: str) -> float:
    if key not in table:
        raise PricingError(f"{src}: {where}: missing rate {key!r} (USD per 1M tokens)")
    v = table[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PricingError(f"{src}: {where}.{key}: must be a number (USD per 1M tokens), got {v!r}")
    if not math.isfinite(v) or v < 0:
        raise PricingError(f"{src}: {where}.{key}: must be a finite number >= 0, got {v!r}")
    return float(v)


def _rates(table: Any, where: str, src: str, tier: str = "") -> Rates:
    if not isinstance(table, dict):
        raise PricingError(f"{src}: {where}: must be a table of rates")
    allowed = set(RATE_KEYS) | set(_OPTIONAL_KEYS) | ({"above"} if tier == "long" else set() if tier else {"long", "fast"})
    for k in table:
        if k not in allowed:
            raise PricingError(f"{src}: {where}: unknown key {k!r} (expected {', '.join(sorted(allowed))})")
    vals = {k: _rate(table, k, where, src) for k in RATE_KEYS}
    vals["cache_write_1h"] = (_rate(table, "cache_write_1h", where, src) if "cache_write_1h" in table
                              else vals["cache_write"] * ONE_HOUR_FACTOR)
    above = None
    if tier == "long":
        above = table.get("above")
        if isinstance(above, bool) or not isinstance(above, int) or above <= 0:
            raise PricingError(f"{src}: {where}.above: must be a whole number of prompt tokens > 0, got {above!r}")
    long = _rates(table["long"], f"{where}.long", src, tier="long") if "long" in table else None
    fast = _rates(table["fast"], f"{where}.fast", src, tier="fast") if "fast" in table else None
    return Rates(vals["input"], vals["output"], vals["cache_write"], vals["cache_read"], vals["cache_write_1h"],
                 above=above, long=long, fast=fast)


def _check_default_dearest(default: Rates, models: dict[str, Rates], blame) -> None:
    """Each default rate must be at least the dearest of its kind (named in the error); so must the
    default's fast rates be of every fast rate (an unknown model in fast mode)."""
    names = ("input", "output", "cache_write", "cache_read", "cache_write_1h")
    fast_default = default.fast or default
    for i, name in enumerate(names):
        for fast in (False, True):
            dearest, where, owner = -1.0, "", ""
            for key, r in models.items():
                tiers = ((r.fast, ".fast"),) if fast else ((r, ""), (r.long, ".long"))
                for tier, suffix in tiers:
                    if tier is not None and tier.values()[i] > dearest:
                        dearest, where, owner = tier.values()[i], f"models.{key}{suffix}", key
            d = (fast_default if fast else default).values()[i]
            if d < dearest:
                what = f"default.fast.{name}" if fast and default.fast is not None else f"default.{name}"
                raise PricingError(f"{blame(owner, name)}: {what} {d:g} is below {where}.{name} {dearest:g}; "
                                   f"the rate for unknown models must be at least the dearest one")
