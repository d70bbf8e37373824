"""How a ``dd-etl`` command fails: once, for every command, from the error's class.

A dd_etl error (``dd_etl.errors.DdEtlError``) is printed as its one-paragraph
message on standard error and the command exits with the error's ``exit_code``;
any other exception is a bug, printed as one line with exit status 70. The root
command group catches what a command raises (``RenderingGroup``), so commands
raise and never render. ``--debug`` adds the stack trace.
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

DEBUG = {"on": False}


def fail(message: str, code: int) -> NoReturn:
    """Print ``message`` as the command's error and exit with ``code``."""
    err.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def render(error: Exception) -> NoReturn:
    """Exit the command because of ``error``, with the status its class gives."""
    if DEBUG["on"]:
        traceback.print_exception(error, file=sys.stderr)
    if isinstance(error, DdEtlError):
        fail(error.message, error.exit_code)
    text = str(error).strip()
    first = text.splitlines()[0][:500] if text else ""
    fail(
        f"{type(error).__name__}: {first} (an internal error; `dd-etl --debug …` shows where)",
        INTERNAL_ERROR,
    )


class RenderingGroup(TyperGroup):
    """The root command group: renders whatever a command (or a sub-group's) raises."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):
            raise  # exits and usage errors: the command line's own
        except Exception as e:
            render(e)
