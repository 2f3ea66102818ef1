"""The loop's socket protocol, typed once: every request a client sends and the answers the loop gives,
as records both ends use (the clients: commands/ and loop/tick.py, loop/waiting.py, loop/client.py;
the loop: loop/serve.py reads a line, loop/answers.py answers it through its table of handlers).

On the wire a request is one line of UTF-8 JSON, an object whose `op` names it (REQUESTS); the loop
answers with one line of JSON, `{"code", "line", …}` (Answer); a submit may say `{"accepted",
"answer_within"}` before it (Accepted), and `watch` streams one view a line instead. A record's
to_wire() is its JSON object and from_wire() reads one back; read_request() checks a line before
anything of it is used, and says what is wrong in the words its caller is shown.

What goes on the wire is what went before the records: a key a client left out is still left out, and
a None it sent as null still is (Key.always), so a loop and a client of different versions read each
other as before. Import-light (json alone): `res run`, `res status` and the gate load it with the client."""
from __future__ import annotations

import json

_NUM = (int, float)
_NONE = type(None)


class Key:
    """One key of a request: the types its value may have, whether it is required, and whether a None
    goes on the wire as null (`always`) or is left out."""

    __slots__ = ("types", "required", "always")

    def __init__(self, types: tuple, required: bool = False, always: bool = False):
        self.types, self.required, self.always = types, required, always


class Request:
    """A request: its `op` and its KEYS, in the order they go on the wire. Positional arguments in
    that order, or by name; a key not given is None."""

    __slots__ = ()
    op = ""
    KEYS: dict = {}

    def __init__(self, *args, **named):
        if len(args) > len(self.KEYS):
            raise TypeError(f"{type(self).__name__} takes {len(self.KEYS)} values, not {len(args)}")
        given = dict(zip(self.KEYS, args))
        for key, value in named.items():
            if key not in self.KEYS or key in given:
                raise TypeError(f"{type(self).__name__}: {key} is not one of its keys, or given twice")
            given[key] = value
        for key, spec in self.KEYS.items():
            if spec.required and key not in given:
                raise TypeError(f"{type(self).__name__} needs {key}")
            setattr(self, key, given.get(key))

    def to_wire(self) -> dict:
        """The JSON object of its line: `op`, then each key that is required, always sent, or given."""
        wire = {"op": self.op}
        for key, spec in self.KEYS.items():
            value = getattr(self, key)
            if value is not None or spec.required or spec.always:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, obj: dict) -> Request:
        """The record of a checked request (read_request); on Request itself, of the class its op names."""
        if cls is Request:
            cls = REQUESTS[obj["op"]]
        return cls(**{key: obj.get(key) for key in cls.KEYS})

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and all(getattr(self, k) == getattr(other, k) for k in self.KEYS)

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self.KEYS)})"


class Submit(Request):
    """`res run`, `res note`, the gate's booking in place: an entry to write (its fields, as a queue
    entry's) and decide; `who`: the caller's process chain, for the record of who changed queue.toml."""

    __slots__ = ("kind", "fields", "who")
    op = "submit"
    KEYS = {"kind": Key((str,), required=True), "fields": Key((dict,), required=True), "who": Key((str, _NONE))}


class Release(Request):
    """`res release`, and a job withdrawn that did not start in time: an entry withdrawn, a job stopped."""

    __slots__ = ("id", "stop", "who")
    op = "release"
    KEYS = {"id": Key((str,), required=True), "stop": Key((bool, _NONE), always=True), "who": Key((str, _NONE))}


class ReleaseRequest(Request):
    """`res hook` after a command admitted in place ran: the booking made under its request id let go."""

    __slots__ = ("request_id", "who")
    op = "release_request"
    KEYS = {"request_id": Key((str,), required=True), "who": Key((str, _NONE))}


class Wait(Request):
    """`res wait`: answered once the entry is finished, or `timeout` seconds passed (None: no limit)."""

    __slots__ = ("id", "timeout")
    op = "wait"
    KEYS = {"id": Key((str,), required=True), "timeout": Key((*_NUM, _NONE), always=True)}


class Tick(Request):
    """`res reconcile`, `res adopt`: the plan of a pass begun after the request (`adopt`: that pass
    adopts agent sessions whatever the policy says)."""

    __slots__ = ("adopt",)
    op = "tick"
    KEYS = {"adopt": Key((bool, _NONE), always=True)}


class Status(Request):
    """`res status [ID] [--json] [--all]`, and the gate's look at its booking."""

    __slots__ = ("id", "json", "all")
    op = "status"
    KEYS = {"id": Key((str, _NONE), always=True), "json": Key((bool, _NONE), always=True), "all": Key((bool, _NONE))}


class Gate(Request):
    """`res hook`: would a heavy command of this size (mem_gb, cpus, est_s) start now, or when?"""

    __slots__ = ("size",)
    op = "gate"
    KEYS = {"size": Key((dict, _NONE), always=True)}


class Session(Request):
    """An agent session started (its CLI's SessionStart hook): a pass now adopts it."""

    __slots__ = ()
    op = "session"


class Watch(Request):
    """`res top`: the machine's view, one line each time it changes, until the caller hangs up."""

    __slots__ = ()
    op = "watch"


class Web(Request):
    """`res web`: the page's server started if it is not yet, and its address."""

    __slots__ = ()
    op = "web"


class Ping(Request):
    """`res service`: is this loop up, which process is it, and which code does it run?"""

    __slots__ = ()
    op = "ping"


# Every op, in the order a refusal of an unknown one lists them (loop/answers.HANDLERS has one handler each).
REQUESTS: dict[str, type] = {cls.op: cls for cls in (Submit, Release, ReleaseRequest, Wait, Tick, Status, Gate,
                                                     Session, Watch, Web, Ping)}


class _Unsaid:
    """An answer's key its op does not send (None would be sent as null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSAID"


UNSAID = _Unsaid()


class Answer:
    """The loop's answer: an exit code and its line (the caller prints it as it is), then what the op
    adds, each on the wire only when given: data (the entry as `--json` prints it: submit, release,
    release_request, wait), hint (submit), problem (status), plan (tick), answer (gate), code_id
    (ping), url (web)."""

    EXTRAS = ("data", "hint", "problem", "plan", "answer", "code_id", "url")
    __slots__ = ("code", "line") + EXTRAS

    def __init__(self, code: int, line: str, **extras):
        self.code, self.line = code, line
        for key in self.EXTRAS:
            setattr(self, key, extras.pop(key, UNSAID))
        if extras:
            raise TypeError(f"an answer has no {', '.join(extras)}")

    def to_wire(self) -> dict:
        wire = {"code": self.code, "line": self.line}
        for key in self.EXTRAS:
            value = getattr(self, key)
            if value is not UNSAID:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, obj: dict) -> Answer:
        return cls(obj.get("code"), obj.get("line"), **{k: obj[k] for k in cls.EXTRAS if k in obj})

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.to_wire() == other.to_wire()

    __hash__ = None

    def __repr__(self) -> str:
        return f"Answer({self.to_wire()!r})"


class Accepted:
    """Before a submit's answer: the id the request was written under, and how long its answer may
    take (loop/client.ask keeps the id: a caller that gives up can name its entry)."""

    __slots__ = ("accepted", "answer_within")

    def __init__(self, accepted: str, answer_within: float):
        self.accepted, self.answer_within = accepted, answer_within

    def to_wire(self) -> dict:
        return {"accepted": self.accepted, "answer_within": self.answer_within}

    @classmethod
    def from_wire(cls, obj: dict) -> Accepted:
        return cls(obj.get("accepted"), obj.get("answer_within"))

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.to_wire() == other.to_wire()

    __hash__ = None


def request_line(request) -> bytes:
    """A request (a record, or its JSON object) as the line a client sends: UTF-8, not \\u escapes (a
    caller's command and environment go in it), an undecodable byte of the caller's kept as it was."""
    wire = request.to_wire() if isinstance(request, Request) else request
    return json.dumps(wire, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"


def answer_line(answer) -> bytes:
    """An answer, a line said before it, or a view of `watch` (a record or its JSON object) as the
    line the loop sends."""
    wire = answer if isinstance(answer, dict) else answer.to_wire()
    return json.dumps(wire).encode() + b"\n"


# ---------------------------------------------------------------- checking a request's line

# What a submit's fields must be before anything reads them (the writer checks every value after).
SUBMIT_FIELDS: dict[str, tuple] = {
    "title": (str,), "project": (str,), "cwd": (str,), "cmd": (list,), "auto": (list,), "env": (dict,),
    "lock": (str, _NONE), "gated": (bool,), "book_gb": (*_NUM, _NONE), "mem_gb": _NUM, "cpus": _NUM,
    "est_s": _NUM, "created": _NUM, "queue": (bool,), "request_id": (str, _NONE),
    "answer_by": (*_NUM, _NONE), "start_by": (*_NUM, _NONE),
}
_TYPE_WORDS = {str: "text", dict: "an object", list: "a list", bool: "true or false", int: "a number",
               float: "a number", _NONE: "null"}


def _types(kinds: tuple) -> str:
    return " or ".join(dict.fromkeys(_TYPE_WORDS.get(k, k.__name__) for k in kinds))


def _what(value) -> str:
    return _TYPE_WORDS.get(type(value), type(value).__name__) if not isinstance(value, bool) else "true or false"


def read_request(line: bytes) -> tuple[dict, str | None]:
    """(the request's JSON object, None), or ({}, what is wrong with it in one line): not UTF-8, not
    JSON, nested past any request res sends, not an object, an op res does not know, a key of the
    wrong type, an id that is not an entry's. What a request may carry is checked here, before any of
    it is used (Request.from_wire then reads it)."""
    import re

    from reconciler.core.invalid import quoted

    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return {}, f"the request is not UTF-8 text (byte {e.start})"
    try:
        req = json.loads(text)
    except RecursionError:
        return {}, "the request is nested deeper than any request res sends"
    except ValueError as e:
        return {}, f"the request is not JSON (at character {getattr(e, 'pos', '?')})"
    if not isinstance(req, dict):
        return {}, f"the request is {_what(req)}, not a JSON object"
    op = req.get("op")
    if not isinstance(op, str):
        return {}, "the request has no op" if op is None else f"the request's op is {_what(op)}, not text"
    if op not in REQUESTS:
        return {}, f"unknown request {quoted(op)[:40]} (res sends {', '.join(REQUESTS)})"
    for key, spec in REQUESTS[op].KEYS.items():
        if key not in req:
            if spec.required:
                return {}, f"a {op} request without {key}"
            continue
        value, kinds = req[key], spec.types
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return {}, f"a {op} request's {key} is {_what(value)}, not {_types(kinds)}"
        if key == "id" and isinstance(value, str) and not re.fullmatch(r"r-[1-9][0-9]{0,9}", value):
            return {}, f"a {op} request's id {quoted(value)[:40]} is not an entry id (r-12)"
        if key == "request_id" and op == "release_request":
            from reconciler.core.models import REQUEST_ID_PATTERN

            if not re.fullmatch(REQUEST_ID_PATTERN, value):
                return {}, f"a {op} request's request_id {quoted(value)[:40]} is not a request id"
        if key == "timeout" and value is not None and not (0 <= value < 10**9):
            return {}, f"a {op} request's timeout is not a number of seconds from 0"
    if op == "submit":
        if req["kind"] not in ("job", "note"):
            return {}, "a submit request's kind is neither job nor note"
        for key, value in req["fields"].items():
            kinds = SUBMIT_FIELDS.get(key)
            if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                return {}, f"a submit request's {key} is {_what(value)}, not {_types(kinds)}"
            if key in ("cmd", "auto") and not all(isinstance(v, str) for v in value):
                return {}, f"a submit request's {key} holds something other than text"
            if key == "env" and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                return {}, "a submit request's env holds something other than text"
    return req, None
