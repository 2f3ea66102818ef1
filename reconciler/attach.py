"""Streaming a job's output into its digest (DESIGN §5.4): read the log past the committed byte offset,
push complete lines, and hand back the record to commit — offset and digest state together, in one
compare-and-set on the holder, so a crash between reading and committing re-reads the same lines and
counts each of them once."""
from __future__ import annotations

import os
from pathlib import Path

from .digest import make_digest
from .models import JobRecord
from .pricing import PricingError, PricingTable, load_pricing
from .resources import shipped
from .runtime import read_output

CHUNK = 4 << 20


class AttachError(Exception):
    """Reading or digesting a job's output failed; the attachment is given up and retried."""


def pricing_override_path() -> Path:
    if os.environ.get("RES_PRICING_FILE"):
        return Path(os.environ["RES_PRICING_FILE"])
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "res" / "pricing.toml"


def load_pricing_files() -> tuple[PricingTable | None, str | None]:
    """The shipped table merged with the user's override; (None, one-line error) if either is broken."""
    shipped_path = shipped("policies") / "pricing.toml"
    override_path = pricing_override_path()
    try:
        shipped_text = shipped_path.read_text()
        try:
            override_text = override_path.read_text()
        except FileNotFoundError:
            override_text = None
        return load_pricing(shipped_text, override_text, shipped_name=str(shipped_path),
                            override_name=str(override_path)), None
    except PricingError as e:
        return None, str(e)
    except (OSError, UnicodeDecodeError) as e:
        return None, f"pricing table unreadable: {' '.join(str(e).split())}"


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").split("\n")


def ingest(rec: JobRecord, log_path: Path, pricing: PricingTable | None, final_rc: int | None = None,
           final: bool = False) -> JobRecord:
    """The record with its log read on from `log_offset` to the last complete line (to the end of the
    file when `final`: the unit has ended, a last line without a newline is complete, and the digest
    is finished with `final_rc`). Nothing is committed here."""
    try:
        digest = make_digest(rec.request.agent, pricing, rec.digest)
        offset = rec.log_offset
        while True:
            data, new_offset = read_output(log_path, offset, CHUNK)
            if not data:
                break
            for line in _lines(data)[:-1]:
                digest.push(line)
            offset = new_offset
        if final:
            rest, _ = _read_rest(log_path, offset)
            if rest:
                digest.push(rest.decode("utf-8", "replace"))
                offset += len(rest)
            digest.finish(final_rc)
    except AttachError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of reading or digesting is an attach failure
        raise AttachError(" ".join(f"{type(e).__name__}: {e}".split())[:300]) from None
    return rec.model_copy(update={"log_offset": offset, "digest": digest.state})


def _read_rest(log_path: Path, offset: int) -> tuple[bytes, int]:
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)
