"""An HTTP proxy between dd_etl and the S3 server that misbehaves on request: it
answers 503, answers slowly, resets the connection before or after passing a
request on (after: the store did what was asked, the client never hears so),
or says yes to a create-only write of an object that exists (a store without
conditional writes: it would have overwritten the object; the header is signed,
so the proxy cannot drop it).

Each fault is a ``Fault`` rule: which requests (method, a part of the path),
what to do, how many times. Requests no rule takes pass through unchanged.

The proxy is a process of its own (``python -m tests.support.faulty_proxy
UPSTREAM``), steered by the test through ``/_faults`` (no bucket can be named so):
a client that holds the GIL while it waits on the network (deltalake does) would
otherwise stall a proxy running as threads of the same interpreter.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from tests.support.s3_server import dies_with_parent, kill_group

Action = Literal["503", "slow", "reset_before", "reset_after", "no_conditions"]
CONTROL = "/_faults"


@dataclass
class Fault:
    action: Action
    method: str = ""  # any method when empty
    path: str = ""  # a part of the path the request must have
    times: int = 1  # how many requests it takes (-1: all)
    seconds: float = 2.0  # how slow a slow answer is
    hits: int = 0

    def takes(self, method: str, path: str) -> bool:
        if self.times >= 0 and self.hits >= self.times:
            return False
        return (not self.method or method == self.method) and self.path in path


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    action: Action | None


@dataclass
class FaultyProxy:
    """The test's side: where the proxy listens, and its control path."""

    endpoint: str

    def inject(self, *faults: Fault) -> None:
        """Replace the proxy's rules."""
        body = json.dumps([asdict(f) for f in faults]).encode()
        request = urllib.request.Request(self.endpoint + CONTROL, data=body, method="PUT")
        urllib.request.urlopen(request, timeout=10).close()

    def faults(self) -> list[Fault]:
        """The rules, with how many requests each took."""
        return [Fault(**f) for f in self._state()["faults"]]

    def seen(self) -> list[Seen]:
        """Every request passed or faulted, in order."""
        return [Seen(**s) for s in self._state()["seen"]]  # type: ignore[arg-type]

    def _state(self) -> dict[str, list[dict[str, object]]]:
        with urllib.request.urlopen(self.endpoint + CONTROL, timeout=10) as answer:
            state: dict[str, list[dict[str, object]]] = json.load(answer)
            return state


@contextmanager
def proxying(upstream: str) -> Iterator[FaultyProxy]:
    """A proxy of ``upstream`` (``http://host:port``) on a free port of 127.0.0.1,
    in a process of its own, killed on exit."""
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.faulty_proxy", upstream],
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=dies_with_parent(),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the fault proxy did not start: {line!r}")
        yield FaultyProxy(line)
    finally:
        kill_group(process)


class _Rules:
    """The proxy process's side: rules and what was seen, shared by its threads."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            fault = next((f for f in self.faults if f.takes(method, path)), None)
            if fault is not None:
                fault.hits += 1
            self.seen.append(Seen(method, path, None if fault is None else fault.action))
            return fault

    def state(self) -> bytes:
        with self.lock:
            return json.dumps(
                {"faults": [asdict(f) for f in self.faults], "seen": [asdict(s) for s in self.seen]}
            ).encode()

    def replace(self, body: bytes) -> None:
        with self.lock:
            self.faults = [Fault(**f) for f in json.loads(body)]


def serve(upstream: str) -> None:
    target = urlparse(upstream)
    rules = _Rules()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _forward(self) -> None:
            body = self._body()
            if self.path == CONTROL:
                if self.command == "PUT":
                    rules.replace(body)
                self._answer(200, rules.state())
                return
            fault = rules.fault_for(self.command, self.path)
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

        def _body(self) -> bytes:
            """The request's body as sent: chunked (as the AWS SDKs send a body with
            a trailing checksum) passed on with its chunks and trailers unread."""
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""
            raw = bytearray()
            while True:
                size_line = self.rfile.readline()
                raw += size_line
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    break
                raw += self.rfile.read(size + 2)  # the chunk and its CRLF
            while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                raw += line  # trailers
            return bytes(raw + b"\r\n")

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
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1])
