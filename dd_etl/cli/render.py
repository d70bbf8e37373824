"""How a ``dd-etl`` command fails: once, for every command, from the error's class.

A dd_etl error (``dd_etl.errors.DdEtlError``) is printed as its one-paragraph
message on standard error and the command exits with the error's ``exit_code``;
any other exception is a bug, printed as one line with exit status 70. An error
showing what a Spark Connect server lacks (``spark_connect_errors``), whatever
its class, and Spark running out of memory are instead the user's to set up:
status 3, saying what to set. The root command group catches what a command
raises (``RenderingGroup``), so commands raise and never render. ``--debug``
adds the stack trace.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, NoReturn

import typer
from rich.markup import escape
from typer.core import TyperGroup
from typer.exceptions import TyperException

from dd_etl.cli.consoles import err
from dd_etl.errors import INTERNAL_ERROR, DdEtlError
from dd_etl.lake.failures import store_failure
from dd_etl.spark_connect_errors import lacking
from dd_etl.spark_memory import DRIVER_MEMORY, EXECUTOR_MEMORY, SparkOutOfMemory, exhausted

DEBUG = {"on": False}


def fail(message: str, code: int) -> NoReturn:
    """Print ``message`` as the command's error and exit with ``code``."""
    err.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def render(error: Exception) -> NoReturn:
    """Exit the command because of ``error``, with the status its class gives; what
    the Spark Connect server lacks, an object store's failure and Spark running out
    of memory where no step caught it, are the user's to act on, any other error a
    bug, shown by what caused it."""
    if DEBUG["on"]:
        traceback.print_exception(error, file=sys.stderr)
    server = connect_server()
    lacks = lacking(error, server) if server is not None else None
    if lacks is not None:
        fail(lacks.message, lacks.exit_code)
    if isinstance(error, DdEtlError):
        fail(error.message, error.exit_code)
    store = store_failure(error)
    if store is not None:
        fail(store.message, store.exit_code)
    said = root_cause(str(error))
    sign = exhausted(error)
    if sign is not None:
        fail(
            f"Spark ran out of memory ({sign}): raise {DRIVER_MEMORY} (on a cluster, "
            f"{EXECUTOR_MEMORY}) under spark.conf in the pipeline file, and run again. "
            f"Spark said: {said}",
            SparkOutOfMemory.exit_code,
        )
    fail(
        f"{type(error).__name__}: {said} (an internal error; `dd-etl --debug …` shows where)",
        INTERNAL_ERROR,
    )


def connect_server() -> str | None:
    """The Spark Connect server this process's Spark is a client of; None if it
    runs classic Spark, or none (then Spark is not imported to find that out)."""
    if "dd_etl.spark" not in sys.modules:
        return None
    from dd_etl.spark import running_settings

    settings = running_settings()
    return settings[0] if settings is not None and settings[0].startswith("sc://") else None


def root_cause(text: str) -> str:
    """The line of an error's text that says what went wrong: for an error from
    Spark's JVM, its deepest cause, not the py4j call that carried it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")]
    if causes:
        return causes[-1][:500]
    thrown = [line.removeprefix(": ") for line in lines[1:] if line.startswith(": ")]
    return (thrown[0] if thrown else lines[0] if lines else "")[:500]


class RenderingGroup(TyperGroup):
    """The root command group: renders whatever a command (or a sub-group's) raises."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):
            raise  # exits and usage errors: the command line's own
        except Exception as e:
            render(e)
