"""Errors a trace raises where it detects them; rendered once at the edge (CLI, Dagster).

A ``TraceError`` is about how a trace is used or what is stored: a trace that is
not there, a reader moving back, a read of compacted times, another writer. A
trace whose own invariants are broken (batches not contiguous, ``since`` past a
hold) is a bug of dd_etl: ``dd_etl.errors.InvariantViolation``.
"""

from __future__ import annotations

from dd_etl.errors import DdEtlError
from dd_etl.lattice import Antichain


class TraceError(DdEtlError):
    """Base class of trace errors: the trace cannot be read or written as asked."""

    exit_code = 3


class UpperMismatch(TraceError):
    """A compare-and-append stated an upper the trace is not at."""

    def __init__(self, trace: str, expected: Antichain, actual: Antichain) -> None:
        super().__init__(
            f"trace {trace!r}: append expected upper {expected!r} but the trace is at {actual!r}"
        )
        self.trace = trace
        self.expected = expected
        self.actual = actual


class HoldRegression(TraceError):
    """A reader tried to move its hold backwards."""

    def __init__(self, trace: str, reader: str, kind: str, old: Antichain, new: Antichain) -> None:
        super().__init__(
            f"trace {trace!r}: reader {reader!r} may not move its {kind} hold back "
            f"from {old!r} to {new!r}"
        )


class SinceViolation(TraceError):
    """A read asked for a time the trace has already compacted away."""

    def __init__(self, trace: str, time: object, since: Antichain) -> None:
        super().__init__(
            f"trace {trace!r}: cannot read as of {time}: times before {since!r} have been compacted"
        )


class UnknownReader(TraceError):
    """A reader's hold is not in the trace: never registered, or dropped."""

    def __init__(self, trace: str, reader: str) -> None:
        super().__init__(f"trace {trace!r}: no reader named {reader!r} is registered")


class ReleasedReader(TraceError):
    """A reader's handle was used after it released its hold."""

    def __init__(self, trace: str, reader: str) -> None:
        super().__init__(
            f"trace {trace!r}: reader {reader!r} released its hold; open the reader "
            "again to hold the trace"
        )


class ReaderInUse(TraceError):
    """A reader was opened twice on one trace: its hold has one owner."""

    def __init__(self, trace: str, reader: str) -> None:
        super().__init__(
            f"trace {trace!r}: reader {reader!r} is open already; its hold is moved by "
            "the handle that opened it"
        )


class CommitConflict(TraceError):
    """Another writer kept committing to the trace while we retried."""


class TraceNotFound(TraceError):
    """No dd_etl trace at a path: nothing there, or a Delta table of another tool."""

    def __init__(self, uri: str) -> None:
        super().__init__(f"no dd_etl trace at {uri}")
