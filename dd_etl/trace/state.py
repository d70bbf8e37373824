"""The state of a trace and its pure transitions.

A ``TraceState`` is everything needed to read and maintain a trace without
looking at its data: the batch list (spine), frontiers, reader holds and merges
in progress. Every change is a function from one state to the next; the Delta
store commits each new state together with the file actions that realise it, so
state and data can never disagree.

Invariants kept by every transition (invariants 1 to 3 of ARCHITECTURE.md):

* batches are contiguous and cover ``[lower, upper)``;
* ``upper`` and ``since`` only advance; reader holds only advance;
* ``since`` is the meet of the logical holds (``upper`` when nobody reads), and
  merges advance times by at most the ``since`` in force when they began.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from dd_etl.errors import InvariantViolation
from dd_etl.lattice import Antichain, meet_all
from dd_etl.trace.batch import Batch, DataFile
from dd_etl.trace.description import Description
from dd_etl.trace.errors import HoldRegression, TraceError, UnknownReader, UpperMismatch
from dd_etl.trace.holds import ReaderHold
from dd_etl.trace.spine import HASH_SPACE, batch_limit, merge_candidate


@dataclass(frozen=True, slots=True)
class Merge:
    """A merge in progress: its inputs, compaction frontier, and output so far."""

    id: str  # also the id of the batch it will produce
    inputs: tuple[str, ...]
    since: Antichain
    work: int
    cursor: int = 0
    staged: tuple[DataFile, ...] = ()

    @property
    def complete(self) -> bool:
        return self.cursor >= HASH_SPACE

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "inputs": list(self.inputs),
            "since": self.since.to_json(),
            "work": self.work,
            "cursor": str(self.cursor),
            "staged": [f.to_json() for f in self.staged],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Merge:
        return cls(
            value["id"],
            tuple(value["inputs"]),
            Antichain.from_json(value["since"]),
            int(value["work"]),
            int(value["cursor"]),
            tuple(DataFile.from_json(f) for f in value["staged"]),
        )


@dataclass(frozen=True, slots=True)
class TraceState:
    name: str
    dims: int
    key: tuple[str, ...]
    schema: str  # Spark StructType JSON of the data columns
    lower: Antichain
    upper: Antichain
    since: Antichain
    batches: tuple[Batch, ...] = ()
    holds: tuple[tuple[str, ReaderHold], ...] = ()
    merges: tuple[Merge, ...] = ()
    meta: tuple[tuple[str, str], ...] = ()
    """What the trace's owner records with its appends (e.g. the source positions
    an epoch covers, or the plan that computed it): committed atomically with them."""
    generation: str = ""
    """Drawn afresh each time a trace is created: a trace discarded and created again
    under the same name is a new generation, whose history is unrelated to the old
    one's. Whatever was computed from the old one knows it by this."""

    # ----------------------------------------------------------------- queries

    @classmethod
    def new(
        cls,
        name: str,
        dims: int,
        key: tuple[str, ...],
        schema: str,
        generation: str = "",
        meta: Mapping[str, str] | None = None,
    ) -> TraceState:
        bottom = Antichain.minimum(dims)
        recorded = tuple(sorted((meta or {}).items()))
        return cls(
            name, dims, key, schema, bottom, bottom, bottom, meta=recorded, generation=generation
        )

    @property
    def hold_map(self) -> dict[str, ReaderHold]:
        return dict(self.holds)

    @property
    def meta_map(self) -> dict[str, str]:
        return dict(self.meta)

    @property
    def physical_frontier(self) -> Antichain:
        """Batches whose upper this frontier has passed may be merged."""
        if not self.holds:
            return self.upper
        return meet_all(h.physical for _, h in self.holds)

    @property
    def records(self) -> int:
        return sum(b.records for b in self.batches)

    def records_from(self, lower: Antichain) -> int:
        """Records of the batches that may hold times at or after ``lower``: those
        whose upper ``lower`` has not reached (a merged batch straddling it counts
        whole). Zero means the trace surely has no updates from ``lower`` on."""
        return sum(b.records for b in self.batches if not b.description.upper.less_equal(lower))

    def batch(self, batch_id: str) -> Batch:
        for b in self.batches:
            if b.id == batch_id:
                return b
        raise TraceError(f"trace {self.name!r} has no batch {batch_id!r}")

    def merge(self, merge_id: str) -> Merge:
        for m in self.merges:
            if m.id == merge_id:
                return m
        raise TraceError(f"trace {self.name!r} has no merge {merge_id!r} in progress")

    def busy_batches(self) -> set[str]:
        return {b for m in self.merges for b in m.inputs}

    def next_merge(self) -> tuple[int, int] | None:
        return merge_candidate(self.batches, self.busy_batches(), self.physical_frontier)

    def needs_backpressure(self) -> bool:
        return len(self.batches) > batch_limit(self.records)

    # ------------------------------------------------------------- transitions

    def append(
        self,
        batch_id: str,
        description: Description,
        records: int,
        meta: Mapping[str, str] | None = None,
    ) -> TraceState:
        """Compare-and-append: add a batch starting at the trace's upper, and
        record ``meta`` with it.

        If the trace is already at or past the batch's upper, the batch was
        appended before and this is a no-op (``self`` is returned). Otherwise the
        batch must start exactly at the current upper.
        """
        if description.upper.less_equal(self.upper):
            return self
        if description.lower != self.upper:
            raise UpperMismatch(self.name, description.lower, self.upper)
        if not description.lower.less_equal(description.upper):
            raise TraceError(
                f"trace {self.name!r}: batch upper {description.upper!r} is "
                f"before its lower {description.lower!r}"
            )
        batch = Batch(batch_id, description, records)
        return self._with(
            batches=(*self.batches, batch), upper=description.upper, meta=self._meta(meta)
        )

    def annotate(self, meta: Mapping[str, str]) -> TraceState:
        return replace(self, meta=self._meta(meta))

    def _meta(self, changes: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({**self.meta_map, **(changes or {})}.items()))

    def register_reader(
        self, reader: str, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> TraceState:
        """Add a reader, holding no earlier than what the trace still offers."""
        if reader in self.hold_map:
            return self
        lo = self.since if logical is None else self.since.join(logical)
        floor = self.physical_frontier
        ph = floor if physical is None else floor.join(physical)
        holds = tuple(sorted((*self.holds, (reader, ReaderHold(lo, ph))), key=lambda p: p[0]))
        return self._with(holds=holds)

    def downgrade_reader(
        self, reader: str, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> TraceState:
        """Move a reader's holds forward (``downgrade`` in timely's capability terms)."""
        holds = self.hold_map
        if reader not in holds:
            raise UnknownReader(self.name, reader)
        old = holds[reader]
        new = old
        if logical is not None:
            if not old.logical.less_equal(logical):
                raise HoldRegression(self.name, reader, "logical", old.logical, logical)
            new = replace(new, logical=logical)
        if physical is not None:
            if not old.physical.less_equal(physical):
                raise HoldRegression(self.name, reader, "physical", old.physical, physical)
            new = replace(new, physical=physical)
        holds[reader] = new
        return self._with(holds=tuple(sorted(holds.items())))

    def drop_reader(self, reader: str) -> TraceState:
        holds = self.hold_map
        if holds.pop(reader, None) is None:
            return self
        return self._with(holds=tuple(sorted(holds.items())))

    def begin_merge(self, merge_id: str, start: int, end: int) -> TraceState:
        """Start merging ``batches[start:end + 1]`` at the trace's current ``since``."""
        inputs = self.batches[start : end + 1]
        busy = self.busy_batches() & {b.id for b in inputs}
        if len(inputs) < 2 or busy:
            self._broken(
                "a merge begins on two or more batches no other merge holds",
                f"merge of batches {start}..{end} of {len(self.batches)}, of which "
                f"{sorted(busy)} are being merged already",
            )
        merge = Merge(
            merge_id, tuple(b.id for b in inputs), self.since, sum(b.records for b in inputs)
        )
        return replace(self, merges=(*self.merges, merge))

    def advance_merge(self, merge_id: str, cursor: int, files: tuple[DataFile, ...]) -> TraceState:
        """Record a merge step: the cursor it reached and the files it wrote."""
        merge = self.merge(merge_id)
        if cursor <= merge.cursor:
            return self
        advanced = replace(merge, cursor=cursor, staged=(*merge.staged, *files))
        merges = tuple(advanced if m.id == merge_id else m for m in self.merges)
        return replace(self, merges=merges)

    def complete_merge(self, merge_id: str) -> TraceState:
        """Replace a finished merge's inputs by the batch it produced."""
        merge = self.merge(merge_id)
        if not merge.complete:
            self._broken(
                "a merge completes only once its work is done",
                f"merge {merge_id!r} has its cursor at {merge.cursor} of {HASH_SPACE}",
            )
        ids = [b.id for b in self.batches]
        start = ids.index(merge.inputs[0])
        end = start + len(merge.inputs)
        inputs = self.batches[start:end]
        description = Description(
            inputs[0].description.lower, inputs[-1].description.upper, merge.since
        )
        merged = Batch(merge.id, description, sum(f.records for f in merge.staged))
        batches = (*self.batches[:start], merged, *self.batches[end:])
        merges = tuple(m for m in self.merges if m.id != merge_id)
        return replace(self, batches=batches, merges=merges)

    def abandon_merge(self, merge_id: str) -> TraceState:
        """Forget a merge whose staged files were lost; its inputs stay as they are."""
        return replace(self, merges=tuple(m for m in self.merges if m.id != merge_id))

    # --------------------------------------------------------------- internals

    def _with(self, **changes: Any) -> TraceState:
        """Apply changes and let ``since`` follow the holds.

        ``since`` is the meet of the logical holds, or the upper when nobody
        reads; it never moves back (a reader may have held beyond the upper
        before it left).
        """
        state = replace(self, **changes)
        target = meet_all(h.logical for _, h in state.holds) if state.holds else state.upper
        return replace(state, since=self.since.join(target))

    def check(self) -> None:
        """Raise ``InvariantViolation`` if the structural invariants do not hold: every
        commit checks the state it writes, ``audit`` the state it reads."""
        frontier, before = self.lower, "the trace's lower"
        for b in self.batches:
            if b.description.lower != frontier:
                self._broken(
                    "batches are contiguous",
                    f"batch {b.id} starts at {b.description.lower!r}, {before} is {frontier!r}",
                )
            frontier, before = b.description.upper, f"the upper of batch {b.id}"
        if frontier != self.upper:
            self._broken(
                "batches cover the trace up to its upper",
                f"the batches end at {frontier!r}, the upper is {self.upper!r}",
            )
        ids = [b.id for b in self.batches]
        seen: set[str] = set()
        for m in self.merges:
            if seen & set(m.inputs):
                self._broken(
                    "a batch is the input of one merge at most",
                    f"batches {sorted(seen & set(m.inputs))} are inputs of merge {m.id} "
                    "and of another",
                )
            seen |= set(m.inputs)
            start = ids.index(m.inputs[0]) if m.inputs and m.inputs[0] in ids else -1
            if start < 0 or tuple(ids[start : start + len(m.inputs)]) != m.inputs:
                self._broken(
                    "a merge's inputs are adjacent batches of the trace",
                    f"merge {m.id} has inputs {list(m.inputs)}, the batches are {ids}",
                )
        for reader, hold in self.holds:
            if not self.since.less_equal(hold.logical):
                self._broken(
                    "since never passes a reader's hold",
                    f"since is {self.since!r}, reader {reader!r} holds {hold.logical!r}",
                )

    def _broken(self, invariant: str, evidence: str) -> NoReturn:
        raise InvariantViolation(
            f"trace invariant '{invariant}'", f"trace {self.name!r}: {evidence}"
        )

    # ----------------------------------------------------------- serialisation

    def to_json(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "dims": self.dims,
                "key": list(self.key),
                "schema": self.schema,
                "lower": self.lower.to_json(),
                "upper": self.upper.to_json(),
                "since": self.since.to_json(),
                "batches": [b.to_json() for b in self.batches],
                "holds": {r: h.to_json() for r, h in self.holds},
                "merges": [m.to_json() for m in self.merges],
                "meta": self.meta_map,
                "generation": self.generation,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> TraceState:
        v = json.loads(text)
        return cls(
            v["name"],
            int(v["dims"]),
            tuple(v["key"]),
            v["schema"],
            Antichain.from_json(v["lower"]),
            Antichain.from_json(v["upper"]),
            Antichain.from_json(v["since"]),
            tuple(Batch.from_json(b) for b in v["batches"]),
            tuple(sorted((r, ReaderHold.from_json(h)) for r, h in v["holds"].items())),
            tuple(Merge.from_json(m) for m in v["merges"]),
            tuple(sorted(v.get("meta", {}).items())),
            v.get("generation", ""),
        )
