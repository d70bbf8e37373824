"""A trace: an indexed, compacting history of updates shared by several readers.

``Trace`` holds the logic that does not depend on where batches are stored:
compare-and-append, reader holds (each moved by its reader's handle,
``reader_handle.py``), fuelled merges and back-pressure. Every change
is a pure transition of ``TraceState`` committed through ``Storage.commit`` with
compare-and-set on the stored version; on conflict the state is reloaded and the
transition re-applied, so two writers racing on one trace never corrupt it: one
wins, and the other either finds its work already done (a no-op) or gets
``UpperMismatch`` naming the actual upper.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from dd_etl.failpoints import failpoint
from dd_etl.lattice import Antichain
from dd_etl.profiling import count_bytes
from dd_etl.trace.batch import DataFile, WrittenBatch
from dd_etl.trace.deferred import DeferredAppend
from dd_etl.trace.description import Description
from dd_etl.trace.errors import CommitConflict, ReaderInUse, TraceError, UpperMismatch
from dd_etl.trace.file_stats import hash_bounds
from dd_etl.trace.placement import BULK, Placement
from dd_etl.trace.reader_handle import HoldChange, ReaderHandle
from dd_etl.trace.spine import HASH_SPACE, HashRange, cursor_after, remaining_work
from dd_etl.trace.state import Merge, TraceState
from dd_etl.trace.storage import Commit, Snapshot, StaleVersion, Storage

U = TypeVar("U")

MAX_COMMIT_ATTEMPTS = 20
BACKPRESSURE_EFFORT = 4
"""When the spine holds more batches than it should, an append pays for merge work in
steps of this much fuel per appended record until the spine is back within bounds:
merging keeps pace with appends, so reads never degrade."""


def new_batch_id() -> str:
    return uuid.uuid4().hex


class Trace(Generic[U]):
    def __init__(self, storage: Storage[U]) -> None:
        self.storage = storage
        self._deferred: DeferredAppend | None = None
        self.snapshot = storage.load()
        self._readers: dict[str, ReaderHandle] = {}

    # ----------------------------------------------------------------- reading

    @property
    def snapshot(self) -> Snapshot:
        """The trace as its log holds it (``state`` adds a deferred append)."""
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        deferred = self._deferred
        self._state = snapshot.state if deferred is None else deferred.applied_to(snapshot.state)

    @property
    def state(self) -> TraceState:
        """The trace's state: as its log holds it, with the empty append deferred
        from there, if any (``trace/deferred.py``). Every transition starts from
        it, so the trace's next commit carries the deferred batch."""
        return self._state

    def defer(self, deferred: DeferredAppend | None) -> None:
        """Read the trace with ``deferred`` applied (where it holds for the log)."""
        self._deferred = deferred
        self.snapshot = self._snapshot

    def deferred_to(self, upper: Antichain) -> DeferredAppend:
        """The empty append that takes the trace, as its log holds it, to ``upper``,
        deferred (``defer``); the caller records it where later readers find it."""
        logged = self._snapshot.state
        deferred = DeferredAppend(logged.generation, logged.upper, upper)
        self.defer(deferred)
        return deferred

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def generation(self) -> str:
        """Which creation of the trace this is (``TraceState.generation``)."""
        return self.state.generation

    def reload(self) -> TraceState:
        self.snapshot = self.storage.load(self.snapshot)
        return self.state

    def files(self, batch_ids: Sequence[str] | None = None) -> list[DataFile]:
        ids = [b.id for b in self.state.batches] if batch_ids is None else batch_ids
        return [f for i in ids for f in self.snapshot.files.get(i, [])]

    # ---------------------------------------------------------------- commits

    def _apply(self, transition: Callable[[TraceState], Commit | None]) -> bool:
        """Commit ``transition(state)`` with compare-and-set, retrying against newer states.

        Returns False when the transition found nothing to do.
        """
        for _ in range(MAX_COMMIT_ATTEMPTS):
            commit = transition(self.state)
            if commit is None:
                return False
            commit.state.check()
            try:
                version = self.storage.commit(self.snapshot.version, commit)
            except StaleVersion:
                self.reload()
                continue
            self.snapshot = self.snapshot.after(version, commit, self.storage.stamp(version))
            count_bytes(written=sum(f.size for f in commit.add))
            return True
        raise CommitConflict(
            f"trace {self.name!r}: gave up after {MAX_COMMIT_ATTEMPTS} conflicting commits"
        )

    def _apply_state(self, change: Callable[[TraceState], TraceState]) -> bool:
        def transition(s: TraceState) -> Commit | None:
            new = change(s)
            return None if new == s else Commit(new)

        return self._apply(transition)

    # -------------------------------------------------------------- appending

    def compare_and_append(
        self,
        updates: U,
        lower: Antichain,
        upper: Antichain,
        meta: Mapping[str, str] | None = None,
        at_most: int | None = None,
        holds: HoldChange | None = None,
        distinct: bool = False,
        placement: Placement = BULK,
    ) -> bool:
        """Append the updates of ``[lower, upper)`` if the trace's upper is ``lower``,
        recording ``meta`` in the same commit. ``at_most`` bounds the number of
        updates when the caller knows it, so the storage need not count them.
        ``holds`` (made by readers' handles) moves their holds forward in the same
        commit, where a commit of their own would cost as much as the append's.
        ``distinct``: no two updates share data and time; ``placement``: where the
        interval's work runs (``Storage.write_batch``).

        A no-op returning False when the trace already reached ``upper`` (the
        interval was appended before, e.g. by a run that crashed after committing).
        Raises ``UpperMismatch`` when the trace is at any other upper.
        """
        state = self.reload()
        if not self._extends(state, lower, upper):
            return False
        batch_id = new_batch_id()
        files = self.storage.write_batch(state, batch_id, updates, at_most, distinct, placement)
        failpoint("append.files_written")
        return self._commit_append(WrittenBatch(batch_id, tuple(files)), lower, upper, meta, holds)

    def append_written(
        self,
        batch: WrittenBatch,
        lower: Antichain,
        upper: Antichain,
        meta: Mapping[str, str] | None = None,
        holds: HoldChange | None = None,
    ) -> bool:
        """``compare_and_append`` of a batch whose files were written already (with
        other traces' batches, by one Spark job): its files are committed, or
        deleted when the trace holds the interval already."""
        if not self._extends(self.reload(), lower, upper):
            self.storage.discard(batch.files)
            return False
        return self._commit_append(batch, lower, upper, meta, holds)

    def _extends(self, state: TraceState, lower: Antichain, upper: Antichain) -> bool:
        """Whether an append of ``[lower, upper)`` extends ``state``: False when the
        trace is at ``upper`` or past it; ``UpperMismatch`` at any other upper."""
        if upper.less_equal(state.upper):
            return False
        if lower != state.upper:
            raise UpperMismatch(self.name, lower, state.upper)
        return True

    def _commit_append(
        self,
        batch: WrittenBatch,
        lower: Antichain,
        upper: Antichain,
        meta: Mapping[str, str] | None,
        holds: HoldChange | None,
    ) -> bool:
        records = sum(f.records for f in batch.files)
        description = Description(lower, upper, Antichain.minimum(self.state.dims))

        def transition(s: TraceState) -> Commit | None:
            new = s.append(batch.id, description, records, meta)
            if new is s:
                return None
            if holds is not None:
                new = holds(new)
            return Commit(new, add=batch.files, txn_version=upper.epoch_bound(), operation="append")

        appended = self._apply(transition)
        if not appended:
            self.storage.discard(batch.files)
            return False
        failpoint("append.committed")
        while self.state.needs_backpressure():
            if not self.exert(max(records, 1) * BACKPRESSURE_EFFORT):
                break
        return True

    # ---------------------------------------------------------------- holds

    def open_reader(
        self, reader: str, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> ReaderHandle:
        """The handle through which ``reader``, and nobody else, moves its hold: the
        hold is registered at ``logical`` and ``physical`` (no earlier than what
        the trace still offers), or adopted as persisted when the reader holds
        the trace already (the same reader in a new process). A reader is open
        once per trace object (``ReaderInUse``) until its handle is released."""
        opened = self._readers.get(reader)
        if opened is not None and not opened.released:
            raise ReaderInUse(self.name, reader)
        self._apply_state(lambda s: s.register_reader(reader, logical, physical))
        handle = ReaderHandle(self, reader)
        self._readers[reader] = handle
        return handle

    def move_holds(self, holds: HoldChange) -> None:
        """Commit ``holds``, a change of readers' holds made by their handles
        (``ReaderHandle.downgraded``), several of them possibly in one commit."""
        self._apply_state(holds)

    def annotate(self, meta: Mapping[str, str]) -> None:
        self._apply_state(lambda s: s.annotate(meta))

    # ------------------------------------------------------------- merging

    def pending_work(self) -> int:
        """Records still to merge: merges in progress plus the next one planned."""
        work = sum(remaining_work(m.cursor, m.work) for m in self.state.merges)
        candidate = self.state.next_merge()
        if candidate is not None:
            i, j = candidate
            work += sum(b.records for b in self.state.batches[i : j + 1])
        return work

    def exert(self, fuel: int | None) -> int:
        """Spend up to ``fuel`` records of merge work (``None``: until the spine is
        settled, no merge running and none called for); returns the fuel used.

        Every merge the spine calls for is started (they touch disjoint batches),
        and fuel goes to the one closest to finishing first: small merges
        complete quickly and keep the batch count down while a large one
        progresses over many steps. Each step is committed on its own, so a
        crash loses at most the step in flight.
        """
        self.reload()
        spent = 0
        while fuel is None or spent < fuel:
            while self._begin_next_merge() is not None:
                pass
            if not self.state.merges:
                break
            merge = min(self.state.merges, key=lambda m: remaining_work(m.cursor, m.work))
            remaining = remaining_work(merge.cursor, merge.work)
            budget = remaining if fuel is None else fuel - spent
            spent += self._merge_step(merge, budget)
        return spent

    def _begin_next_merge(self) -> Merge | None:
        candidate = self.state.next_merge()
        if candidate is None:
            return None
        merge_id = new_batch_id()
        self._apply_state(
            lambda s: s.begin_merge(merge_id, *candidate) if s.next_merge() == candidate else s
        )
        try:
            return self.state.merge(merge_id)
        except TraceError:
            return None

    def _merge_step(self, merge: Merge, fuel: int) -> int:
        if any(not self.storage.exists(f) for f in merge.staged):
            # Staged output was cleaned away (e.g. vacuumed after a long stall): start over.
            self._apply_state(lambda s: s.abandon_merge(merge.id))
            return 0
        start = merge.cursor
        end = cursor_after(start, merge.work, fuel)
        inputs = self.files(merge.inputs)
        hashes = HashRange.between(start, end)
        slice_inputs = [f for f in inputs if _file_overlaps(f, hashes)]
        files = (
            self.storage.merge_slice(self.state, merge, slice_inputs, hashes)
            if slice_inputs
            else []
        )
        failpoint("merge.slice_written")
        spent = remaining_work(start, merge.work) - remaining_work(end, merge.work)

        def transition(s: TraceState) -> Commit | None:
            current = next((m for m in s.merges if m.id == merge.id), None)
            if current is None or current.cursor != start:
                return None  # someone else advanced this merge meanwhile
            advanced = s.advance_merge(merge.id, end, tuple(files))
            if end < HASH_SPACE:
                return Commit(advanced, operation="merge-step")
            done = advanced.complete_merge(merge.id)
            return Commit(
                done,
                add=advanced.merge(merge.id).staged,
                remove=tuple(inputs),
                operation="merge",
            )

        if not self._apply(transition):
            self.storage.discard(files)
            return 0
        failpoint("merge.step_committed")
        return max(spent, 1)


def _file_overlaps(file: DataFile, hashes: HashRange) -> bool:
    bounds = hash_bounds(file)
    return bounds is None or hashes.overlaps(*bounds)
