"""``dd-etl``: the command line. Errors are rendered once, for every command, as one
readable paragraph (``--debug`` shows the stack trace, and Spark's own log lines);
the exit status comes from the error's class and tells scripts what went wrong:

0 ok · 1 ``verify`` found a mismatch · 2 invalid pipeline file, definition or
arguments · 3 a source's data or a trace cannot be read or taken in (nothing was
committed) · 4 needs a ``rebuild`` (history lost, definition changed) · 70 internal
error · 75 the server running the command stopped before it finished (run it again).

Pipeline commands keep standard output for results: logs and progress go to
standard error, so ``dd-etl read … --format csv`` can be piped.

``app`` (``root``) is imported on first use, so that the ``dd-etl`` command
(``main``), which hands most commands to a server, imports no typer or rich.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dd_etl.cli.root import app

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("dd_etl.cli.root"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
