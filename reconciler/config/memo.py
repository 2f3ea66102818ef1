"""Values derived from objects that are never changed in place (a parsed queue table, a Request),
made once per object. A pass reads the whole queue every time; under a crowd, doing the same
derivation again for thousands of unchanged entries was most of its cost."""
from __future__ import annotations

from typing import Any, Callable


class ByIdentity:
    """`get(obj, make)`: `make(obj)` the first time this very object is asked for, the same value
    after. Kept by the object's identity, with the object itself, so its id is not reused while the
    entry lives; dropped whole past `limit` entries. `make` raising keeps nothing."""

    def __init__(self, limit: int = 50_000):
        self.limit = limit
        self._known: dict[int, tuple[Any, Any]] = {}

    def peek(self, obj: Any) -> Any | None:
        """The value made for this very object, None if none was."""
        known = self._known.get(id(obj))
        return known[1] if known is not None and known[0] is obj else None

    def get(self, obj: Any, make: Callable[[Any], Any]) -> Any:
        known = self._known.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        value = make(obj)
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known[id(obj)] = (obj, value)
        return value

    def clear(self) -> None:
        self._known.clear()
