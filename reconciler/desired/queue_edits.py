"""queue.toml's new text for an append or a removal, made from the text the writer read: a plain
text edit where the result reads back as intended (the common case: no parse and re-serialise on
every `res run`), else tomlkit's (the user's comments and layout kept), each checked against the
intended data (`verify`). Text in, text out: the Writer (desired/writer.py) takes the lock, reads the
file, commits what these make; apart from it so that the edits can be read and tested as edits.

Import-light, as the writer: tomllib and tomlkit are imported inside the functions that need them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.desired.note import QueueFile
from reconciler.desired.reader import DesiredError
from reconciler.desired.toml_in import KINDS, known_table
from reconciler.desired.toml_out import entry_text, head_of, remove_plain, set_next_id, to_tomlkit


def appended_plain(path: Path, q: QueueFile, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> str | None:
    import tomllib

    text = set_next_id(q.text, next_id)
    if text is None:
        return None
    # Read the pieces back: each new table alone, and the part before the first table (which in
    # plain text holds nothing but comments and next_id).
    blocks = []
    for kind, entry in entries:
        block = entry_text(kind, entry)
        got = tomllib.loads(block)
        if got != {kind: [entry]}:
            raise DesiredError(f"{path}: the new entry would not read back as written; nothing was changed")
        known_table(block, kind, got[kind][0])  # a reader in this process (the loop's) needs not parse it again
        blocks.append(block)
    if tomllib.loads(head_of(text)) != {"next_id": next_id}:
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(blocks)

def appended_tomlkit(path: Path, q: QueueFile, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> str:
    import tomlkit

    assert q.data is not None
    try:
        doc = tomlkit.parse(q.text)
        doc["next_id"] = next_id
        for kind, entry in entries:
            table = tomlkit.table()
            for k, v in entry.items():
                table.append(k, to_tomlkit(v))
            if kind in doc:
                if not isinstance(doc[kind], tomlkit.items.AoT):
                    raise DesiredError(
                        f"{path}: {kind} is written as an inline array; write its entries as [[{kind}]]"
                        " tables so they can be added to; nothing was changed"
                    )
                doc[kind].append(table)
            else:
                aot = tomlkit.aot()
                aot.append(table)
                doc.append(kind, aot)
        new_text = tomlkit.dumps(doc)
    except DesiredError:
        raise
    except Exception as e:
        raise DesiredError(f"{path}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
    expected = dict(q.data)
    expected["next_id"] = next_id
    for kind in KINDS:
        new = [entry for k, entry in entries if k == kind]
        if new:
            expected[kind] = list(q.data.get(kind, [])) + new
    verify(path, new_text, expected)
    return new_text

def verify(path: Path, new_text: str, expected: dict[str, Any]) -> None:
    import tomllib

    try:
        got = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:
        got = None
    norm = {k: v for k, v in expected.items() if v != []}
    if got != norm:
        raise DesiredError(f"{path}: the edit would not read back as intended (unusual formatting?); nothing was changed")


def removed_plain(path: Path, q: QueueFile, found: set[str], next_id: int, expected: dict[str, Any]) -> str | None:
    done = remove_plain(q.text, found)
    text = done[0] if done is not None else None
    if text is not None and next_id != q.data.get("next_id"):
        text = set_next_id(text, next_id)
    if text is None:
        return None
    try:
        verify(path, text, expected)
    except DesiredError:
        return None
    return text

def removed_tomlkit(path: Path, q: QueueFile, doomed: dict[str, set[int]], next_id: int, expected: dict[str, Any]) -> str:
    import tomlkit

    try:
        doc = tomlkit.parse(q.text)
        for kind, idx in doomed.items():
            arr = doc[kind]
            for i in sorted(idx, reverse=True):
                del arr[i]
            if len(arr) == 0:
                del doc[kind]
        if doc.get("next_id") != next_id:
            doc["next_id"] = next_id
        new_text = tomlkit.dumps(doc)
    except Exception as e:
        raise DesiredError(f"{path}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
    verify(path, new_text, expected)
    return new_text
