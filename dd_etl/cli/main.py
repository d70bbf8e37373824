"""The ``dd-etl`` command: hands a command that uses Spark to the dd_etl server
(``dd_etl.server.client``), and runs it in this process when the server does not
take it, as it runs every other command.

Light on purpose: the command line itself (typer, rich, and what the commands
import) is imported only to run a command here, since this runs before every
command.
"""

from __future__ import annotations

import sys

from dd_etl.server import client


def main() -> None:
    args = sys.argv[1:]
    try:
        code = client.through_server(args) if client.served(args) else None
    except KeyboardInterrupt:  # the server went with the connection
        sys.stderr.write("\nAborted!\n")
        sys.exit(130)
    if code is not None:
        sys.exit(code)
    from dd_etl.cli.root import app

    app(args=args, prog_name="dd-etl")
