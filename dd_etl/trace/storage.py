"""What a trace needs from the place its batches are kept.

The trace's logic (compare-and-append, holds, fuelled merges) is written once
against this protocol. ``DeltaStorage`` keeps batches as parquet files written by
Spark and committed to a Delta log; tests add an in-memory model with the same
contract to check that logic quickly and exhaustively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from dd_etl.trace.batch import DataFile, batch_id_of_path
from dd_etl.trace.errors import TraceError
from dd_etl.trace.placement import BULK, Placement
from dd_etl.trace.spine import HashRange
from dd_etl.trace.state import Merge, TraceState

U_contra = TypeVar("U_contra", contravariant=True)


class StaleVersion(TraceError):
    """The stored trace moved past the version a commit was computed against: the
    trace retries against the newer state, so only a storage used on its own sees it."""


@dataclass(frozen=True, slots=True)
class Commit:
    """A new state and the file actions that make the stored data match it."""

    state: TraceState
    add: tuple[DataFile, ...] = ()
    remove: tuple[DataFile, ...] = ()
    txn_version: int | None = None  # application transaction version, for appends
    operation: str = "state"


@dataclass
class Snapshot:
    version: int
    state: TraceState
    files: dict[str, list[DataFile]] = field(default_factory=dict)  # batch id -> files
    stamp: object = None
    """The store's mark of ``version`` as this snapshot saw it (``Storage.stamp``)."""

    def after(self, version: int, commit: Commit, stamp: object = None) -> Snapshot:
        """The snapshot our own ``commit`` produced, without reading it back."""
        removed = {f.path for f in commit.remove}
        files: dict[str, list[DataFile]] = {}
        for batch_id, batch_files in self.files.items():
            kept = [f for f in batch_files if f.path not in removed]
            if kept:
                files[batch_id] = kept
        for f in commit.add:
            files.setdefault(batch_id_of_path(f.path), []).append(f)
        for batch_files in files.values():
            batch_files.sort(key=lambda f: f.path)
        return Snapshot(version, commit.state, files, stamp)


class Storage(Protocol[U_contra]):
    def load(self, known: Snapshot | None = None) -> Snapshot:
        """The stored trace at its latest version: ``known`` itself when its stamp
        shows that nothing was committed since (a trace is read again before each
        of its commits, and most often nothing else wrote to it)."""
        ...

    def stamp(self, version: int) -> object:
        """What tells a later ``load`` that ``version`` is still the latest, as
        stored now (None: the store cannot tell, and loads in full)."""
        ...

    def commit(self, expected_version: int, commit: Commit) -> int:
        """Atomically store ``commit`` as the version after ``expected_version``.

        Raises ``StaleVersion`` when the stored trace is no longer at ``expected_version``.
        """
        ...

    def write_batch(
        self,
        state: TraceState,
        batch_id: str,
        updates: U_contra,
        at_most: int | None = None,
        distinct: bool = False,
        placement: Placement = BULK,
    ) -> list[DataFile]:
        """Write updates as files of a new batch that no reader sees until committed.

        ``at_most`` is the caller's bound on the number of updates, when it knows
        one (it counted them anyway): the store then lays the files out without
        counting them again, and writes nothing at all for a bound of 0.
        ``distinct``: no two updates share data and time, so none need summing.
        ``placement``: where the interval's work runs (the driver, or executors).
        """
        ...

    def merge_slice(
        self, state: TraceState, merge: Merge, inputs: Sequence[DataFile], hashes: HashRange
    ) -> list[DataFile]:
        """Write the consolidated updates of ``inputs`` whose key hash is in ``hashes``,
        times advanced by ``merge.since``, as staged files of the merged batch."""
        ...

    def discard(self, files: Sequence[DataFile]) -> None:
        """Delete files that will never be committed."""
        ...

    def exists(self, file: DataFile) -> bool: ...
