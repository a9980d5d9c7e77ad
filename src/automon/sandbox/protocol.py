"""The sandbox's two inner protocols, both length-prefixed JSON (never pickle: a reply is data):
parent <-> worker over the worker's stdin / stdout, and worker <-> zygote over a Unix socket that
also carries file descriptors (a program's source memfd and its ends of the call pipes).

Standard library only, no automon imports (see limits.py)."""

from __future__ import annotations

import json
import socket
import struct

_HEADER = struct.Struct("!Q")
MAX_MESSAGE = 256 << 20          # one parent <-> worker message
# The longest program text (characters) the sandbox runs (a solution, or one with its visible tests
# appended): far past any real one; a longer one is reported as failed, not run. pool.py sizes its
# requests so that they stay under MAX_MESSAGE.
MAX_PROGRAM = 16 << 20


def send_msg(f, obj) -> None:
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = f.read(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def read_msg(f):
    """Read one message written by send_msg; EOFError when the stream ends first, ValueError
    when it is not a well-formed message."""
    (n,) = _HEADER.unpack(_read_exact(f, _HEADER.size))
    if n > MAX_MESSAGE:
        raise ValueError(f"protocol message of {n} bytes")
    return json.loads(_read_exact(f, n).decode("utf-8"))


_SOCK_LEN = struct.Struct("!I")


def sock_send(sock: socket.socket, obj, fds: list[int] = ()) -> None:
    """Worker <-> zygote: one message, with file descriptors."""
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    msg = _SOCK_LEN.pack(len(data)) + data
    sent = socket.send_fds(sock, [msg], list(fds)) if fds else sock.send(msg)
    if sent < len(msg):
        sock.sendall(msg[sent:])


def sock_recv(sock: socket.socket):
    """One message and the fds sent with it; EOFError when the other side is gone."""
    data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
    if not data:
        raise EOFError
    while len(data) < _SOCK_LEN.size or len(data) < _SOCK_LEN.size + _SOCK_LEN.unpack_from(data)[0]:
        more = sock.recv(1 << 16)
        if not more:
            raise EOFError
        data += more
    return json.loads(data[_SOCK_LEN.size:]), fds
