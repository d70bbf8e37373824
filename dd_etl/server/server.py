"""The server process: one SparkSession kept between commands, one command at a time.

``python -m dd_etl.server.server DIRECTORY DIGEST [quick|full]``, started by a
client that found no server for its digest (``identity``). It holds a lock for its
digest, so two clients starting one at once end up with one; listens on its
socket; runs each command as ``dd-etl`` would, on the caller's streams,
environment and working directory; and exits after its idle time, when asked to
(``dd-etl server stop``), or when a command needs Spark settings other than its
session's (the client then starts a new server). A scheduled tick tells it when
the next one is due (``warm_until``): its idle time then counts from that instant,
so a schedule less frequent than the idle time still meets a warm JVM. A command
arriving while another runs is turned away and runs in its caller's process.

Its JVM compiles ``quick`` (``dd_etl.spark.QUICK_COMPILER``) unless started
``full``: a command too large for the quick compiler raises ``NeedsFullCompiler``
before its first large Spark job, and the client starts it over on a ``full``
server.

A client that goes away in the middle of a command (Ctrl-C, killed) takes the
server with it, at once: a run is crash-safe, and stopping is what its own process
would have done. Spark's JVM exits when the server does (its standard input
closes).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, cast, get_args

from dd_etl.errors import INTERNAL_ERROR
from dd_etl.server import identity, protocol

ACCEPT_SECONDS = 1.0
"""How often the listener looks at the idle clock between connections."""
REQUEST_SECONDS = 10.0
"""How long a connected client may take to say what it wants."""
Compiler = Literal["quick", "full"]
"""How a server's JVM compiles (``dd_etl.spark.QUICK_COMPILER``)."""


@dataclass
class _Command:
    connection: socket.socket
    request: dict[str, Any]
    fds: list[int]


@dataclass
class _State:
    started: float = field(default_factory=time.time)
    last_active: float = field(default_factory=time.monotonic)
    warm_until: float = 0.0
    """Wall-clock time (``time.time()``) of the next scheduled command, if one said."""
    commands: int = 0
    busy: bool = False
    stopping: bool = False


class Server:
    def __init__(
        self, files: identity.Server, lock: int, idle_seconds: float, compiler: Compiler = "quick"
    ) -> None:
        self.files = files
        self.compiler = compiler
        self.lock: int | None = lock
        self.idle_seconds = idle_seconds
        self.state = _State()
        self.pending: queue.Queue[_Command | None] = queue.Queue()
        self.guard = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def serve(self) -> None:
        """Serve until idle, stopped or restarted; then leave the socket to the next
        server before Spark shuts down."""
        from dd_etl.spark import compile_quickly, settings_must_match

        settings_must_match()
        if self.compiler == "quick":
            compile_quickly()
        self.files.socket.unlink(missing_ok=True)  # a server killed before left it
        self.listener.bind(str(self.files.socket))
        os.chmod(self.files.socket, 0o600)
        self.listener.listen(16)
        self.listener.settimeout(ACCEPT_SECONDS)
        self.state.last_active = time.monotonic()  # idle from when it first listens
        threading.Thread(target=self._accept, name="accept", daemon=True).start()
        _log(f"serving on {self.files.socket} (pid {os.getpid()})")
        while (command := self.pending.get()) is not None:
            restart = self._run(command)
            with self.guard:
                if restart is not None or self.state.stopping:
                    break
        self.leave()

    def leave(self) -> None:
        """Stop listening and give up the socket and lock, once: a server started
        after may hold them already."""
        with self.guard:
            lock, self.lock = self.lock, None
        if lock is None:
            return
        with contextlib.suppress(OSError):
            self.listener.close()
        with contextlib.suppress(OSError):
            self.files.socket.unlink()
        os.close(lock)

    def _accept(self) -> None:
        while not self._idled_out():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                self._answer(connection)
            except Exception as e:  # a client's failure is not the server's
                _log(f"a request failed: {e!r}")
                connection.close()

    def _idled_out(self) -> bool:
        """Whether the server has waited its idle time for a command (questions about
        its status do not count) since its last one or the next scheduled one's due
        time, whichever is later; and so stops."""
        with self.guard:
            idle = min(
                time.monotonic() - self.state.last_active, time.time() - self.state.warm_until
            )
            if self.state.busy or idle <= self.idle_seconds:
                return False
            _log(f"idle for {idle:.0f}s: exiting")
            self.state.stopping = True
            self.pending.put(None)
            return True

    def _answer(self, connection: socket.socket) -> None:
        if _peer_uid(connection) not in (None, os.getuid()):
            connection.close()
            return
        connection.settimeout(REQUEST_SECONDS)
        request, fds = protocol.receive(connection, max_fds=3)
        connection.settimeout(None)
        kind = request.get("kind")
        with self.guard:
            if kind in ("command", "warm"):
                due = float(request.get("warm_until") or 0.0)
                self.state.warm_until = max(self.state.warm_until, due)
            if kind == "command" and not (self.state.busy or self.state.stopping):
                self.state.busy = True
                self.pending.put(_Command(connection, request, fds))
                return
            if kind == "stop" and request.get("installation") in (None, identity.installation()):
                _log("asked to stop")
                self.state.stopping = True
                if not self.state.busy:
                    self.pending.put(None)
            reply = self._status() if kind in ("status", "warm") else {"busy": kind == "command"}
        for fd in fds:
            os.close(fd)
        protocol.send(connection, reply)
        connection.close()

    def _status(self) -> dict[str, Any]:
        from dd_etl.spark import compiler, running_settings

        settings = running_settings()
        return {
            "pid": os.getpid(),
            "digest": self.files.digest,
            "installation": identity.installation(),
            "started": self.state.started,
            "commands": self.state.commands,
            "busy": self.state.busy,
            "idle": round(time.monotonic() - self.state.last_active, 1),
            "warm_until": self.state.warm_until or None,
            "master": settings[0] if settings else None,
            "compiler": compiler(),
        }

    def _run(self, command: _Command) -> Compiler | None:
        """Run one command; how the server that must make way for this one compiles,
        or None if it stays."""
        connection = command.connection
        started = time.monotonic()
        try:
            protocol.send(connection, {"started": True})
        except OSError:
            for fd in command.fds:
                os.close(fd)
            self._finished()
            return None  # gone before it began: nothing to do
        done = threading.Event()
        threading.Thread(target=self._watch, args=(connection, done), daemon=True).start()
        _log(f"running {command.request.get('args')}")
        code, restart = _run_command(command.request, command.fds)
        done.set()
        if restart is not None:
            self.leave()  # the next server binds the socket while this one exits
        outcome = f"exit {code}" if restart is None else f"starts over on a {restart} server"
        _log(f"{command.request.get('args')}: {outcome} in {time.monotonic() - started:.1f}s")
        reply: dict[str, object] = (
            {"exit": code} if restart is None else {"restart": True, "compiler": restart}
        )
        self._finished()
        with contextlib.suppress(OSError):
            protocol.send(connection, reply)
            connection.shutdown(socket.SHUT_RDWR)
        connection.close()
        return restart

    def _finished(self) -> None:
        """Count the command before its client hears the end of it: a status asked
        right after must show it."""
        with self.guard:
            self.state.busy = False
            self.state.commands += 1
            self.state.last_active = time.monotonic()

    def _watch(self, connection: socket.socket, done: threading.Event) -> None:
        """The client sends nothing after its request: anything but the end of the
        command waking this up means the client is gone."""
        with contextlib.suppress(OSError):
            connection.recv(1)
        if not done.is_set():
            _log("the client went away during its command: exiting with it")
            self.leave()
            os.kill(os.getpid(), signal.SIGKILL)


def _run_command(request: dict[str, Any], fds: list[int]) -> tuple[int, Compiler | None]:
    """Run ``dd-etl ARGS`` as the caller's own process would: its streams, environment
    and directory. Returns the exit status, and how the server it must start over on
    compiles, if it must (its Spark settings are not this one's, or it is too
    large for a quick compiler)."""
    from dd_etl import failpoints
    from dd_etl.cli import consoles
    from dd_etl.cli.render import DEBUG
    from dd_etl.cli.root import app
    from dd_etl.spark import NeedsFullCompiler, SettingsDiffer, command_movable

    args = [str(a) for a in request["args"]]
    saved = (sys.stdin, sys.stdout, sys.stderr, sys.argv, dict(os.environ), os.getcwd())
    path, modules = list(sys.path), set(sys.modules)
    encoding = request.get("encoding") or "utf-8"
    streams = [
        _stream(fds[0], "r", encoding),
        _stream(fds[1], "w", encoding),
        _stream(fds[2], "w", encoding),
    ]
    sys.stdin, sys.stdout, sys.stderr = streams
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["dd-etl", *args]
    DEBUG["on"] = False
    failpoints.rearm()
    consoles.refit()
    command_movable(True)
    try:
        os.chdir(request["cwd"])
        app(args=args, prog_name="dd-etl")
        return 0, None
    except SystemExit as e:
        return _exit_status(e.code), None
    except NeedsFullCompiler:
        return 0, "full"
    except SettingsDiffer:
        return 0, "quick"
    except BaseException:  # what a process would print; the server goes on
        traceback.print_exc(file=sys.stderr)
        return INTERNAL_ERROR, None
    finally:
        command_movable(False)
        for stream in streams:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        sys.stdin, sys.stdout, sys.stderr, sys.argv = saved[:4]
        os.environ.clear()
        os.environ.update(saved[4])
        os.chdir(saved[5])
        sys.path[:] = path
        _forget_user_modules(set(sys.modules) - modules)
        consoles.refit()


def _forget_user_modules(imported: set[str]) -> None:
    """Modules a command imported from outside the installation (a pipeline's Python
    views) are imported afresh by the next command, as its own process would: the
    user may have changed them."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, identity.PACKAGE}
    roots = {os.path.join(os.path.realpath(r), "") for r in roots}
    for name in imported:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and not os.path.realpath(file).startswith(tuple(roots)):
            del sys.modules[name]


def _stream(fd: int, mode: Literal["r", "w"], encoding: str) -> TextIO:
    lines = mode == "w" and os.isatty(fd)  # as Python sets up a terminal's streams
    buffering = 1 if lines else -1
    return open(fd, mode, buffering=buffering, encoding=encoding, errors="backslashreplace")


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _peer_uid(connection: socket.socket) -> int | None:
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    peer = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", peer)[1])


def _take_lock(files: identity.Server) -> int | None:
    """The lock of ``files``'s digest, or None if another server holds it."""
    fd = os.open(files.lock, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", file=sys.__stderr__, flush=True)


def main() -> None:
    files = identity.Server(Path(sys.argv[1]), sys.argv[2])
    given = sys.argv[3] if len(sys.argv) > 3 else "quick"
    if given not in get_args(Compiler):
        sys.exit(f"unknown compiler {given!r}: expected one of {get_args(Compiler)}")
    lock = _take_lock(files)
    if lock is None:
        return  # another server for this digest is starting or serving
    server = Server(files, lock, identity.idle_seconds(os.environ), cast(Compiler, given))
    try:
        server.serve()
    finally:
        server.leave()


if __name__ == "__main__":
    main()
