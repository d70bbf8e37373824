"""Hands a ``dd-etl`` command that uses Spark to a server; the caller runs it in its
own process when the server does not take it (``dd_etl.cli.main``,
``dd_etl.dagster.step``).

Light on purpose (no Spark, no rich, no typer imported), since it runs before every
command. A command goes to the server of this installation and environment
(``identity``), started on first use; it runs in the caller's process instead when
the server is off (``DD_ETL_SERVER=off``), under ``--debug`` (Spark's own log lines
belong to a Spark of its own), when the server is busy with another command, or
when none could be started.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from dd_etl.server import identity, protocol

SERVED = frozenset(
    {"run", "status", "read", "changes", "verify", "compact", "rebuild", "explain", "restate"}
    | {"demo", "trace"}
)
"""Commands that start Spark or read traces: everything but ``ui`` (it becomes the
Dagster UI) and ``server``."""
START_SECONDS = 30.0
"""How long a new server may take to listen."""
INTERRUPTED = 75
"""Exit status when the server died during the command (``EX_TEMPFAIL``): the command
did not finish; run it again (a run completes an interrupted epoch)."""


def served(args: list[str]) -> bool:
    if not identity.enabled(os.environ) or "--debug" in args:
        return False
    command = next((a for a in args if not a.startswith("-")), None)
    return command in SERVED


def through_server(
    args: list[str], streams: Sequence[int] | None = None, warm_until: float | None = None
) -> int | None:
    """The command's exit status, run by the server on this process's standard streams
    (or on ``streams``, three descriptors); None if it is to run here. ``warm_until``:
    when the next command is due (a schedule's next tick), so the server stays."""
    try:
        files = identity.server_for(os.environ)
    except OSError:
        return None
    request = {
        "kind": "command",
        "args": args,
        "cwd": os.getcwd(),
        "env": {**_terminal_size(), **os.environ},
        "encoding": getattr(sys.stdout, "encoding", None),
        "warm_until": warm_until,
    }
    compiler = "quick"  # unless the command is too large for it (``server.Compiler``)
    for _ in range(3):  # a server may exit (idle, restart) just as we connect
        connection = connect(files) or start(files, compiler)
        if connection is None:
            return None
        passed = _standard_streams() if streams is None else contextlib.nullcontext(list(streams))
        with connection, passed as fds:
            try:
                protocol.send(connection, request, fds)
                reply, _ = protocol.receive(connection)
            except OSError:
                continue
            if reply.get("busy"):
                return None
            try:
                reply, _ = protocol.receive(connection)
            except OSError:
                sys.stderr.write(
                    "error: the dd_etl server stopped during the command (killed, or out of "
                    f"memory): run it again. Its log: {files.log}\n"
                )
                return INTERRUPTED
            if not reply.get("restart"):
                return int(reply["exit"])
            compiler = str(reply.get("compiler", "quick"))
    return None


def connect(files: identity.Server) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(files.socket))
    except OSError:
        connection.close()
        return None
    return connection


def start(files: identity.Server, compiler: str = "quick") -> socket.socket | None:
    """Start a server for ``files``, its JVM compiling as ``compiler`` says, and
    connect to it (or to the one another client started meanwhile); then ask the
    servers of older code to leave."""
    command = [sys.executable, "-m", "dd_etl.server.server", str(files.directory), files.digest]
    with open(files.log, "ab") as log:
        process = subprocess.Popen(
            [*command, compiler],
            cwd=os.path.dirname(identity.PACKAGE),  # what it imports dd_etl from, not the caller's
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        connection = connect(files)
        if connection is not None:
            stop_others(files)
            return connection
        if process.poll() not in (None, 0):
            return None
        time.sleep(0.02)
    return None


def stop_others(files: identity.Server) -> None:
    """Servers of this installation for another digest serve code or settings of
    before: they leave now if idle, after their command if not. The lock and log of a
    digest no server listens for go after a week unused."""
    for path in identity.sockets(files.directory):
        if path != files.socket:
            ask(path, {"kind": "stop", "installation": identity.installation()})
    week_ago = time.time() - 7 * 24 * 3600
    for path in [*files.directory.glob("*.lock"), *files.directory.glob("*.log")]:
        with contextlib.suppress(OSError):
            if not path.with_suffix(".sock").exists() and path.stat().st_mtime < week_ago:
                path.unlink()


def keep_warm(until: float) -> dict[str, Any] | None:
    """Ask the running server of this installation and environment to stay until
    ``until`` (a wall-clock time) and its idle time after; starts none. Its status,
    or None if none runs or servers are off."""
    if not identity.enabled(os.environ):
        return None
    try:
        files = identity.server_for(os.environ)
    except OSError:
        return None
    return ask(files.socket, {"kind": "warm", "warm_until": until})


def ask(path: os.PathLike[str], message: dict[str, Any]) -> dict[str, Any] | None:
    """One request and its answer; None if no server answers at ``path``."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(5.0)
    with connection:
        try:
            connection.connect(os.fspath(path))
            protocol.send(connection, message)
            return protocol.receive(connection)[0]
        except OSError:
            return None


def _terminal_size() -> dict[str, str]:
    """The terminal's size, as the variables that tell it to a process whose own
    standard streams are not the terminal (the server's)."""
    for fd in (1, 2, 0):
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        return {"COLUMNS": str(size.columns), "LINES": str(size.lines)}
    return {}


@contextlib.contextmanager
def _standard_streams() -> Iterator[list[int]]:
    """This process's standard input, output and error, with a closed one replaced by
    the null device (a descriptor must be passed for each)."""
    opened: list[int] = []
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            opened.append(os.open(os.devnull, os.O_RDWR))
            fds.append(opened[-1])
    try:
        yield fds
    finally:
        for fd in opened:
            os.close(fd)
