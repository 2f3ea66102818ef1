"""The user manager on the bus: the one connection a SystemdRuntime keeps (runtime/systemd.py).

Low-level dbus-fast `Message` calls on org.freedesktop.systemd1 /org/freedesktop/systemd1
(interface org.freedesktop.systemd1.Manager); no introspection. Here: which bus (the session's, else
the private manager `res serve` started for the state directory), connecting and reconnecting (a new
event loop, a broken connection), a call and its failures (an error reply is DBusCallError, no answer
or a broken connection RuntimeUnavailable), the results of queued jobs (JobRemoved) waited for, and
the unit signals that tell watch()'s callback of a job unit's change. It knows job units only by the
prefix of their names. dbus_fast (about 90 ms) is imported here and by the modules of the systemd
runtime only: callers import them lazily.
"""
from __future__ import annotations

import asyncio
import collections
import os
import re
from pathlib import Path

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from reconciler.render.text import squeezed
from reconciler.runtime import RuntimeUnavailable

SYSTEMD = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT_PATH = "/org/freedesktop/systemd1/unit"
PROPERTIES = "org.freedesktop.DBus.Properties"

CALL_TIMEOUT_S = 10.0


class DBusCallError(RuntimeError):
    """An error reply from the bus: `name` is the D-Bus error name."""

    def __init__(self, name: str, text: str):
        super().__init__(f"{name}: {text}")
        self.name = name
        self.text = text


def bus_label_escape(text: str) -> str:
    """A unit name as systemd puts it in an object path: every byte but [A-Za-z0-9] as _XX (and a
    leading digit too)."""
    out = []
    for i, b in enumerate(text.encode()):
        c = chr(b)
        out.append(c if (c.isascii() and c.isalnum() and not (i == 0 and c.isdigit())) else f"_{b:02x}")
    return "".join(out)


def bus_label_unescape(label: str) -> str:
    return re.sub(r"_([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), label)


def default_bus_address() -> str | None:
    """The user bus: DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus if it exists."""
    addr = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if addr:
        return addr
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.exists(os.path.join(runtime, "bus")):
        return f"unix:path={os.path.join(runtime, 'bus')}"
    return None


class ManagerBus:
    """The connection to the user manager and the calls on it: the base of SystemdRuntime, which adds
    what a runtime does with them (start, stop, observe, the user's side)."""

    def __init__(self, unit_prefix: str, bus_address: str | None = None, state_root: Path | None = None):
        self.prefix = unit_prefix
        self._address = bus_address
        self._state_root = state_root  # where a private manager of this state directory is recorded
        self.address: str | None = None  # the bus connected to
        self._bus: MessageBus | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manager_env: dict[str, str] = {}
        self._manager_cgroup = ""
        self._unit_re = re.compile(rf"^{re.escape(unit_prefix)}-(r-[0-9]+)\.service$")
        # JobRemoved: results that arrived before anyone waited for them, and waiters.
        self._job_results: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._job_waiters: dict[str, asyncio.Future] = {}
        # watch(): told when a job unit of ours changes state; our units' object paths start so.
        self._watch = None
        self._unit_path_prefix = f"{UNIT_PATH}/{bus_label_escape(unit_prefix + '-r-')}"

    # ------------------------------------------------------------------ connection

    async def connect(self) -> None:
        """Open the user bus and read what is cached per connection (the manager's environment and
        control group). Raises RuntimeUnavailable with one line."""
        if self._bus is not None and self._bus.connected and self._loop is asyncio.get_running_loop():
            return
        self._drop()
        if self._address:
            candidates = [self._address]
        else:
            # The session's own manager first; else the private one `res serve` started for this
            # state directory (reconciler/runtime/usermanager.py), if there is one.
            candidates = [a for a in (default_bus_address(), self._private_bus()) if a]
            candidates = list(dict.fromkeys(candidates))
        if not candidates:
            raise RuntimeUnavailable("systemd user manager unreachable: DBUS_SESSION_BUS_ADDRESS is not set "
                                     "and $XDG_RUNTIME_DIR/bus does not exist", absent=True)
        errors = []
        for address in candidates:
            try:
                await self._connect_to(address)
                self.address = address
                return
            except RuntimeUnavailable as e:
                errors.append(e)
        raise RuntimeUnavailable(str(errors[0]), absent=all(e.absent for e in errors))

    def _private_bus(self) -> str | None:
        if self._state_root is None:
            return None
        from reconciler.runtime.usermanager import bus_address

        return bus_address(self._state_root)

    async def _connect_to(self, address: str) -> None:
        bus = None
        try:
            bus = MessageBus(bus_address=address)
            await asyncio.wait_for(bus.connect(), CALL_TIMEOUT_S)
            self._bus, self._loop = bus, asyncio.get_running_loop()
            bus.add_message_handler(self._on_message)
            await self._call_raw("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                 "AddMatch", "s",
                                 [f"type='signal',sender='{SYSTEMD}',path='{SYSTEMD_PATH}',"
                                  f"interface='{MANAGER}',member='JobRemoved'"])
            env = await self._manager_property("Environment")
            self._manager_cgroup = await self._manager_property("ControlGroup")
            if self._watch is not None:
                await self._subscribe()
        except Exception as e:  # noqa: BLE001 - every way of not getting there is the same to callers
            self._bus = None
            if bus is not None:
                try:
                    bus.disconnect()
                except Exception:  # noqa: BLE001
                    pass
            what = e.text if isinstance(e, DBusCallError) else (str(e) or type(e).__name__)
            if isinstance(e, asyncio.TimeoutError):
                what = "no answer in time"
            # No manager there at all (no socket, nobody listening, no systemd on that bus), as opposed
            # to one that is slow or broken: only then may a private one be started beside it.
            absent = isinstance(e, (FileNotFoundError, ConnectionRefusedError)) or (
                isinstance(e, DBusCallError) and e.name in ("org.freedesktop.DBus.Error.ServiceUnknown",
                                                            "org.freedesktop.DBus.Error.NameHasNoOwner"))
            raise RuntimeUnavailable(squeezed(f"systemd user manager unreachable at {address}: {what}"),
                                     absent=absent) from None
        self._manager_env = dict(kv.split("=", 1) for kv in env if "=" in kv)

    def _drop(self) -> MessageBus | None:
        """Forget the connection (and what waits on it); return it if it belongs to this loop."""
        bus, self._bus = self._bus, None
        loop, self._loop = self._loop, None
        for fut in self._job_waiters.values():
            if not fut.done():
                fut.cancel()
        self._job_waiters.clear()
        self._job_results.clear()
        try:
            same = loop is asyncio.get_running_loop()
        except RuntimeError:
            same = False
        if bus is not None and not same:
            # Its event loop (an earlier asyncio.run) is gone, so it cannot be waited for the usual
            # way: disconnect() shuts the socket down at once, without a loop (the manager sees this
            # client gone), and the bus's file is closed when the bus is collected.
            bus.disconnect()
            return None
        return bus

    async def close(self) -> None:
        bus = self._drop()
        if bus is None:
            return
        try:
            bus.disconnect()
            await asyncio.wait_for(bus.wait_for_disconnect(), 2)
        except Exception:  # noqa: BLE001 - closing a broken connection is closing it
            pass

    async def watch(self, callback) -> None:
        """From now on (and across reconnects), call `callback(job_id, state)` whenever one of our job
        units changes its ActiveState ("inactive", "failed", …) or is collected ("removed"): what
        lets a loop act on a job's end at once instead of at its next timer."""
        self._watch = callback
        if self._bus is not None and self._bus.connected:
            await self._subscribe()

    async def _subscribe(self) -> None:
        """Unit signals are only sent to clients that called Subscribe; only our units' are kept."""
        for rule in (f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',member='PropertiesChanged',"
                     f"path_namespace='{UNIT_PATH}',arg0='org.freedesktop.systemd1.Unit'",
                     f"type='signal',sender='{SYSTEMD}',path='{SYSTEMD_PATH}',interface='{MANAGER}',member='UnitRemoved'"):
            await self._call_raw("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                 "AddMatch", "s", [rule])
        await self._call_raw(SYSTEMD, SYSTEMD_PATH, MANAGER, "Subscribe", "", [])

    def _unit_signal(self, msg: Message) -> None:
        job_id = state = None
        if msg.member == "PropertiesChanged" and (msg.path or "").startswith(self._unit_path_prefix):
            changed = msg.body[1] if len(msg.body) > 1 and isinstance(msg.body[1], dict) else {}
            if "ActiveState" in changed:
                m = self._unit_re.match(bus_label_unescape(msg.path.rsplit("/", 1)[1]))
                job_id, state = (m.group(1) if m else None), changed["ActiveState"].value
        elif msg.member == "UnitRemoved" and msg.body:
            m = self._unit_re.match(str(msg.body[0]))
            job_id, state = (m.group(1) if m else None), "removed"
        if job_id is not None:
            try:
                self._watch(job_id, state)
            except Exception:  # noqa: BLE001 - a watcher's failure must not break the connection
                pass

    def _on_message(self, msg: Message):
        if msg.message_type is MessageType.SIGNAL and self._watch is not None and msg.member in ("PropertiesChanged", "UnitRemoved"):
            self._unit_signal(msg)
            return None
        if (msg.message_type is MessageType.SIGNAL and msg.member == "JobRemoved"
                and msg.interface == MANAGER and len(msg.body) == 4):
            _, job, unit, result = msg.body
            waiter = self._job_waiters.pop(job, None)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(result)
            elif unit.startswith(self.prefix + "-"):
                # Our own job, finished before its caller got to wait for it (the reply and the
                # signal can arrive in one read).
                self._job_results[job] = result
                while len(self._job_results) > 256:
                    self._job_results.popitem(last=False)
        return None

    async def _call_raw(self, destination: str, path: str, interface: str, member: str, signature: str,
                        body: list):
        bus = self._bus
        if bus is None or not bus.connected:
            raise RuntimeUnavailable("systemd user manager: not connected")
        msg = Message(destination=destination, path=path, interface=interface, member=member,
                      signature=signature, body=body)
        reply = await asyncio.wait_for(bus.call(msg), CALL_TIMEOUT_S)
        if reply.message_type is MessageType.ERROR:
            text = reply.body[0] if reply.body else ""
            raise DBusCallError(reply.error_name or "unknown", str(text))
        return reply.body

    async def _ensure(self) -> None:
        """Connect if needed: first use, a broken connection, or a new event loop (asyncio.run again)."""
        if self._bus is None or not self._bus.connected or self._loop is not asyncio.get_running_loop():
            await self.connect()

    async def _manager(self, member: str, signature: str, body: list):
        """A Manager method call. Transport failures become RuntimeUnavailable; error replies raise
        DBusCallError."""
        await self._ensure()
        try:
            return await self._call_raw(SYSTEMD, SYSTEMD_PATH, MANAGER, member, signature, body)
        except (DBusCallError, RuntimeUnavailable):
            raise
        except asyncio.TimeoutError:
            raise RuntimeUnavailable(f"systemd user manager did not answer {member} in {CALL_TIMEOUT_S:g} s") from None
        except Exception as e:  # noqa: BLE001 - the connection broke
            raise RuntimeUnavailable(squeezed(f"systemd user manager: {member} failed: {e or type(e).__name__}")) from None

    async def _manager_or(self, what: str, member: str, signature: str, body: list):
        """A Manager call whose error reply becomes one line: `<what> failed: <systemd's text>`."""
        try:
            return await self._manager(member, signature, body)
        except DBusCallError as e:
            raise RuntimeError(squeezed(f"{what} failed: {e.text}")) from None

    async def _manager_property(self, name: str):
        body = await self._call_raw(SYSTEMD, SYSTEMD_PATH, PROPERTIES, "Get", "ss", [MANAGER, name])
        return body[0].value

    async def _wait_job(self, job: str, timeout: float) -> str | None:
        """The result of a queued job (JobRemoved), or None if it did not finish in `timeout`."""
        if job in self._job_results:
            return self._job_results.pop(job)
        fut = asyncio.get_running_loop().create_future()
        self._job_waiters[job] = fut
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._job_waiters.pop(job, None)
