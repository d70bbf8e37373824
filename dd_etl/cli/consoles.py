"""The two consoles of ``dd-etl``: ``out`` for results on standard output, ``err``
for messages and progress on standard error. Not a terminal (a pipe, a file): wide
enough that tables and messages keep whole names."""

from __future__ import annotations

import sys

from rich.console import Console


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


out = _console(stderr=False)
err = _console(stderr=True)


def refit() -> None:
    """Fit both consoles (width, colours, terminal or not) to the standard streams and
    environment of now: a server runs each command on its caller's. In place, since
    every command module holds them."""
    for console, stderr in ((out, False), (err, True)):
        console.__dict__.update(_console(stderr).__dict__)
