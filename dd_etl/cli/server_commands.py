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


def _servers() -> list[dict[str, Any]]:
    directory = identity.directory(os.environ)
    answers = (client.ask(path, {"kind": "status"}) for path in sorted(directory.glob("*.sock")))
    return [a for a in answers if a is not None]


@app.command("status")
def server_status() -> None:
    """Each server of this user: its process, whether it runs a command, how many it
    ran, and whether this installation and environment would use it."""
    servers = _servers()
    if not servers:
        err.print("no server running", highlight=False)
        return
    current = identity.digest(os.environ)
    table = Table("pid", "state", "commands", "started", "idle", "spark", "used here")
    for s in servers:
        started = dt.datetime.fromtimestamp(s["started"], dt.UTC).isoformat(timespec="seconds")
        table.add_row(
            str(s["pid"]), "running a command" if s["busy"] else "idle", str(s["commands"]),
            started, f"{s['idle']:.0f}s", s["master"] or "not started",
            "yes" if s["digest"] == current else "no",
        )  # fmt: skip
    out.print(table)


@app.command("stop")
def server_stop() -> None:
    """Stop every server of this user: idle ones now, busy ones after their command."""
    directory = identity.directory(os.environ)
    stopped = [client.ask(p, {"kind": "stop"}) for p in sorted(directory.glob("*.sock"))]
    err.print(f"stopped {sum(1 for s in stopped if s is not None)} server(s)", highlight=False)
