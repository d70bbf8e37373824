"""``dd-etl``: the command line. Errors are rendered once, for every command, as one
readable paragraph (``--debug`` shows the stack trace, and Spark's own log lines);
the exit status comes from the error's class and tells scripts what went wrong:

0 ok · 1 ``verify`` found a mismatch · 2 invalid pipeline file, definition or
arguments · 3 a source's data or a trace cannot be read or taken in (nothing was
committed) · 4 needs a ``rebuild`` (history lost, definition changed) · 70 internal
error · 75 the server running the command stopped before it finished (run it again).

Pipeline commands keep standard output for results: logs and progress go to
standard error, so ``dd-etl read … --format csv`` can be piped.
"""

from dd_etl.cli.app import app

__all__ = ["app"]
