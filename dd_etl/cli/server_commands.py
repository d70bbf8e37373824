"""``dd-etl server status`` and ``dd-etl server stop``: the servers that keep Spark
running between commands (``dd_etl.server``)."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import typer
from rich.table import Table

from dd_etl.cli.consoles import err, out
from dd_etl.server import client, identity

app = typer.Typer(
    help="The servers that keep Spark running between commands (DD_ETL_SERVER=off: none)."
)


def _ask_all(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The answers of this user's servers to ``message`` (a dead one's socket, none)."""
    paths = identity.sockets(identity.directory(os.environ))
    return [a for a in (client.ask(p, message) for p in paths) if a is not None]


@app.command("status")
def server_status() -> None:
    """Each server of this user: its process, whether it runs a command, how many it
    ran, until when a schedule keeps it warm, how its JVM compiles (quick: C1 only,
    for small runs), and whether this installation and environment would use it."""
    servers = _ask_all({"kind": "status"})
    if not servers:
        err.print("no server running", highlight=False)
        return
    current = identity.digest(os.environ)
    table = Table(
        "pid", "state", "commands", "started", "idle", "warm until", "spark", "compiler",
        "used here",
    )  # fmt: skip
    for s in servers:
        warm = _time(s["warm_until"]) if s.get("warm_until") else ""
        table.add_row(
            str(s["pid"]), "running a command" if s["busy"] else "idle", str(s["commands"]),
            _time(s["started"]), f"{s['idle']:.0f}s", warm, s["master"] or "not started",
            s.get("compiler") or "", "yes" if s["digest"] == current else "no",
        )  # fmt: skip
    out.print(table)


def _time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")


@app.command("stop")
def server_stop() -> None:
    """Stop every server of this user: idle ones now, busy ones after their command."""
    err.print(f"stopped {len(_ask_all({'kind': 'stop'}))} server(s)", highlight=False)
