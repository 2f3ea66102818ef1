"""JSON with comments (Gemini CLI's settings files, read by it with strip-json-comments): where the
comments are, and the text with them blanked out. One home for the installer (which edits such files
keeping the comments) and the gate's rules reader (which only reads them). Pure, import-light."""
from __future__ import annotations


def comment_spans(text: str) -> list[tuple[int, int]]:
    """The spans of `//` (to the end of the line, the newline not included) and `/* */` comments outside
    strings: what strip-json-comments, which Gemini CLI reads its settings with, takes out."""
    found, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            found.append((i, j))
            i = j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ValueError(f"line {text.count(chr(10), 0, i) + 1}: a /* comment that is never closed")
            found.append((i, j + 2))
            i = j + 2
        else:
            i += 1
    return found


def blanked(text: str, comments: list[tuple[int, int]]) -> str:
    """`text` with each comment's characters made spaces (newlines kept): same offsets, plain JSON."""
    if not comments:
        return text
    out, at = [], 0
    for s, e in comments:
        out.append(text[at:s])
        out.append("".join("\n" if ch == "\n" else " " for ch in text[s:e]))
        at = e
    out.append(text[at:])
    return "".join(out)
