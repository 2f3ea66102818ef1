"""Who is at the other end of a loopback TCP connection: the uid that owns the peer's socket, from
/proc/net/tcp (the page's server, loop/web.py, answers only its own user).

The kernel's format (one line per IPv4 socket of this network namespace):

    sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
     3: 0100007F:BC0B 0100007F:C6BA 01 00000000:00000000 00:00000000 00000000  1000        0 4711 ...

An address is the 32-bit IPv4 address as the host stores it, in hex, a colon, the port in hex. `st`
01 is ESTABLISHED. A socket in TIME_WAIT (and an orphaned one closing) is a kernel mini-socket whose
uid reads 0 and whose inode is 0: never taken as anyone's, or a root loop would let it through.
Stdlib only."""
from __future__ import annotations

import socket
import struct

TCP_FILE = "/proc/net/tcp"
ESTABLISHED = "01"
READ_LIMIT = 64 << 20  # a machine with a million sockets has bigger problems than this check


def _address(field: str) -> tuple[str, int] | None:
    host, _, port = field.partition(":")
    try:
        if len(host) != 8:
            return None  # not IPv4
        return socket.inet_ntoa(struct.pack("=I", int(host, 16))), int(port, 16)
    except (ValueError, struct.error, OSError):
        return None


def owner_uid(text: str, local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The uid owning the established socket whose own address is `local` and whose peer is
    `remote` ((ip, port) each), in the text of /proc/net/tcp; None when there is none (closed
    already, a mini-socket, another namespace) or a line is not what the kernel writes."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        if fields[3] != ESTABLISHED or fields[9] == "0":
            continue
        if _address(fields[1]) == local and _address(fields[2]) == remote:
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None


def peer_uid(server: tuple[str, int], peer: tuple[str, int], path: str = TCP_FILE) -> int | None:
    """The uid of the process side that connected from `peer` to our `server` address (the client's
    own socket: its local address is `peer`, its remote is `server`). None: unknown (unreadable file,
    no such socket)."""
    try:
        with open(path, "rb") as f:
            text = f.read(READ_LIMIT).decode("ascii", "replace")
    except OSError:
        return None
    return owner_uid(text, peer, server)
