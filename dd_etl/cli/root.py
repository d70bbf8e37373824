"""The root of the ``dd-etl`` command line: the pipeline commands, ``dd-etl trace …``
and the demo, under one group that renders every error once (``dd_etl.cli.render``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from dd_etl.cli.consoles import out
from dd_etl.cli.dagster_step import app as dagster_step_app
from dd_etl.cli.pipeline_commands import app as pipeline_app
from dd_etl.cli.render import DEBUG, RenderingGroup
from dd_etl.cli.server_commands import app as server_app
from dd_etl.cli.trace_commands import app as trace_app

app = typer.Typer(
    cls=RenderingGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Incremental ETL on Spark and Delta.",
)
app.add_typer(pipeline_app)
app.add_typer(trace_app, name="trace")
app.add_typer(server_app, name="server")
app.add_typer(dagster_step_app)


@app.callback()
def main(
    debug: Annotated[
        bool,
        typer.Option("--debug", help="Show the stack trace of errors and Spark's own log lines."),
    ] = False,
) -> None:
    DEBUG["on"] = debug
    if debug:
        from dd_etl.spark import SPARK_LOGS_ENV

        os.environ[SPARK_LOGS_ENV] = "1"


@app.command()
def demo(
    root: Annotated[Path, typer.Option(help="Where the demo writes its source and trace.")] = Path(
        "traces/demo"
    ),
    epochs: Annotated[int, typer.Option(min=1)] = 6,
) -> None:
    """Run the demo: a change stream of taxi trips kept in a Delta trace, then verified."""
    from dd_etl.demo import DemoConfig, run_demo
    from dd_etl.spark import session

    if not run_demo(session("dd_etl-demo"), DemoConfig(root=root, epochs=epochs), out):
        raise typer.Exit(1)
