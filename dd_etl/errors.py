"""dd_etl's errors: one base class, ``DdEtlError``, that every error of dd_etl derives
from. Each carries its exit status (``exit_code``, a class attribute: the kind of
error, for scripts) and a one-paragraph message that says where the problem is and
what to do.

They are raised where detected and rendered once, at the edge: the CLI prints the
message and exits with the status, Dagster fails the run with the message. This
module imports nothing of dd_etl, so every layer (trace, plan, sources, pipelines,
the CLI) can raise them.

Exit statuses (``dd-etl`` also exits 1 when ``verify`` finds a mismatch):

- 2: the pipeline file, a view's definition or the arguments are invalid;
- 3: a source's data or a trace cannot be read or taken in, or another tick holds
  the pipeline: nothing was committed, run again once it is fixed;
- 4: a ``rebuild`` is needed (a view's definition changed, a source lost history
  the pipeline had not read);
- 70: an internal error, a bug in dd_etl (``EX_SOFTWARE`` of ``sysexits.h``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

INTERNAL_ERROR = 70
"""Exit status of a bug in dd_etl, detected (``InvariantViolation``) or not (any
other exception reaching the edge)."""


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (of the Java exception, for an error from
    the JVM), at most 400 characters: Spark's errors go on with plans and traces."""
    text = str(getattr(e, "java_exception", None) or e).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return type(e).__name__


class DdEtlError(Exception):
    """Base of every error dd_etl raises: subclasses set ``exit_code`` to their kind.

    The base's own status is that of an internal error: an error no subclass
    classified cannot be blamed on the user.
    """

    exit_code: ClassVar[int] = INTERNAL_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @property
    def message(self) -> str:
        """The error as one paragraph: line breaks of quoted messages are folded."""
        return " ".join(str(self).split())


class InvariantViolation(DdEtlError):
    """dd_etl found one of its own invariants broken: a bug in dd_etl, never a
    problem of the data or the pipeline file. The message states the invariant and
    the evidence (the values that break it), so that a report can be acted on."""

    exit_code = INTERNAL_ERROR

    def __init__(self, invariant: str, evidence: str) -> None:
        self.invariant = invariant
        self.evidence = evidence
        super().__init__(
            f"internal error: {invariant} does not hold: {evidence}. This is a bug in "
            "dd_etl, not a problem of the data or the pipeline; please report it with "
            "this message."
        )


class PipelineError(DdEtlError):
    """Anything a user of a pipeline can act on; ``exit_code`` tells scripts the kind."""

    exit_code = 3


class SparkUnavailable(PipelineError):
    """The Spark a pipeline names cannot be reached (no Spark Connect server answers
    at its URL): nothing was read or committed; start it, or name another."""


class SparkServerLacks(PipelineError):
    """The Spark Connect server a pipeline runs on lacks what dd_etl asks of it
    (Delta Lake, a package of its Python workers, an operation): the server's
    setup is to change, not the pipeline. ``lacks`` names what is missing."""

    def __init__(self, server: str, lacks: str, message: str) -> None:
        self.server = server
        self.lacks = lacks
        super().__init__(message)


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a pipeline file: the key path, what is wrong, and its line."""

    key: str
    reason: str
    line: int | None = None

    def located(self, file: str) -> str:
        """The problem as ``file:line: key: reason``, so it can be found alone."""
        where = f"{file}:{self.line}" if self.line is not None else file
        return f"{where}: {self.key}: {self.reason}" if self.key else f"{where}: {self.reason}"


class ConfigError(PipelineError):
    """The pipeline file is invalid: names the file, the line, the key path and the reason.

    ``key``, ``reason`` and ``line`` are the first problem; ``more`` are the others
    found in the same check, listed after it in the message (``problems`` holds them
    all), so that one run shows everything to fix in the file."""

    exit_code = 2

    def __init__(
        self,
        file: Path | str,
        key: str,
        reason: str,
        line: int | None = None,
        more: Sequence[ConfigProblem] = (),
    ) -> None:
        self.file = str(file)
        self.key = key
        self.reason = reason
        self.line = line
        self.problems = (ConfigProblem(key, reason, line), *more)
        super().__init__("; ".join(p.located(self.file) for p in self.problems))


class StoreError(PipelineError):
    """An object store refused or failed a request, or lacks what dd_etl needs of
    it: ``store`` names the place, the message what to change. A commit whose
    outcome was in doubt was read back from the store first."""

    exit_code = 5

    def __init__(self, store: str, reason: str, fix: str) -> None:
        self.store = store
        super().__init__(f"the object store at {store} {reason}: {fix}")


class SourceError(PipelineError):
    """A source's data cannot be taken in (unreadable files, values of the wrong type)."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(f"source {source!r}: {reason}. Nothing was committed.")


class SinkError(PipelineError):
    """A sink's table is not dd_etl's to write: nothing was committed to it."""

    def __init__(self, view: str, kind: str, path: str, reason: str) -> None:
        self.view = view
        super().__init__(
            f"view {view!r}: the `{kind}:` table at {path} {reason}. Nothing was committed."
        )


class HistoryLost(PipelineError):
    """A source was rewritten so that the changes since the last run cannot be read."""

    exit_code = 4

    def __init__(self, pipeline: str, source: str, reason: str) -> None:
        self.source = source
        super().__init__(
            f"source {source!r} lost history the pipeline has not read yet: {reason}. "
            f"Nothing was committed. To take in the source's current contents as the "
            f"next epoch (the changes in between become one change), run "
            f"`dd-etl rebuild {pipeline} --source {source}`."
        )


class PlanError(DdEtlError, ValueError):
    """A dataflow that cannot be built: names the operator and what is wrong."""

    exit_code = 2


class NotDeterministic(PlanError):
    """An operator calls a function Spark marks non-deterministic: its rows
    could not be retracted by value."""


def error_texts(error: BaseException) -> Iterator[str]:
    """The texts of ``error`` and of the errors that caused it, outermost first:
    where a library's error says what it is (a store's, a server's)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        current = current.__cause__ or current.__context__
