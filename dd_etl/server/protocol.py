"""What a client and a server say over the socket: one JSON message each way per
connection, each framed by its length; a command's message carries the client's
standard streams along (file descriptors passed over the Unix socket), so the
server writes straight to the caller's terminal, pipe or file."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Sequence
from typing import Any

_LENGTH = struct.Struct("!I")


def send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    header = _LENGTH.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """The next message and the descriptors it carried; ``ConnectionError`` when the
    peer closed before sending a whole one."""
    fds: list[int] = []
    if max_fds:
        header, fds, _, _ = socket.recv_fds(sock, _LENGTH.size, max_fds)
    else:
        header = sock.recv(_LENGTH.size)
    header += _exactly(sock, _LENGTH.size - len(header)) if header else b""
    if len(header) < _LENGTH.size:
        raise ConnectionError("the peer closed the connection")
    (length,) = _LENGTH.unpack(header)
    return json.loads(_exactly(sock, length)), fds


def _exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count > 0:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)
