"""An HTTP proxy between dd_etl and the S3 server that misbehaves on request: it
answers 503, answers slowly, resets the connection before or after passing a
request on (after: the store did what was asked, the client never hears so),
or says yes to a create-only write of an object that exists (a store without
conditional writes: it would have overwritten the object; the header is signed,
so the proxy cannot drop it).

Each fault is a ``Fault`` rule: which requests (method, a part of the path),
what to do, how many times. Requests no rule takes pass through unchanged.
"""

from __future__ import annotations

import http.client
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlparse

Action = Literal["503", "slow", "reset_before", "reset_after", "no_conditions"]


@dataclass
class Fault:
    action: Action
    method: str = ""  # any method when empty
    path: str = ""  # a part of the path the request must have
    times: int = 1  # how many requests it takes (-1: all)
    seconds: float = 2.0  # how slow a slow answer is
    hits: int = field(default=0, init=False)

    def takes(self, method: str, path: str) -> bool:
        if self.times >= 0 and self.hits >= self.times:
            return False
        return (not self.method or method == self.method) and self.path in path


@dataclass
class FaultyProxy:
    endpoint: str
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str, Action | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fault_for(self, method: str, path: str) -> Fault | None:
        with self._lock:
            fault = next((f for f in self.faults if f.takes(method, path)), None)
            if fault is not None:
                fault.hits += 1
            self.seen.append((method, path, None if fault is None else fault.action))
            return fault


@contextmanager
def proxying(upstream: str) -> Iterator[FaultyProxy]:
    """A proxy of ``upstream`` (``http://host:port``) on a free port of 127.0.0.1."""
    target = urlparse(upstream)
    proxy = FaultyProxy("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = proxy.fault_for(self.command, self.path)
            action = None if fault is None else fault.action
            if action == "503":
                self._answer(503, b"<Error><Code>SlowDown</Code></Error>")
                return
            if action == "reset_before":
                self._reset()
                return
            if action == "slow" and fault is not None:
                time.sleep(fault.seconds)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            connection = http.client.HTTPConnection(str(target.hostname), target.port, timeout=60)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
            finally:
                connection.close()
            if action == "reset_after":
                self._reset()
                return
            if action == "no_conditions" and answer.status == 412:
                # as a store that ignores If-None-Match answers
                self._answer(200, b"", {"ETag": '"overwritten"'})
                return
            self.send_response_only(answer.status, answer.reason)
            dropped = ("transfer-encoding", "connection", "content-length")
            for k, v in answer.getheaders():
                if k.lower() not in dropped or (self.command == "HEAD" and k.lower() == dropped[2]):
                    self.send_header(k, v)  # a HEAD's length is the object's
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self._one_request_a_connection()
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _answer(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response_only(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self._one_request_a_connection()
            self.end_headers()
            self.wfile.write(data)

        def _one_request_a_connection(self) -> None:
            """No connection outlives its request: a client never finds one that the
            proxy has let go of in its pool."""
            self.send_header("Connection", "close")
            self.close_connection = True

        def _reset(self) -> None:
            """Close with a TCP reset: the client hears nothing back."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            # the socket itself: ``close`` would wait for the handler's files on it
            os.close(self.connection.detach())

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that hung up (a reset, a timeout): nothing to tell

    server = Server(("127.0.0.1", 0), Handler)
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
