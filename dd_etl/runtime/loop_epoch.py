"""One epoch of a loop nest: the updates staged so far, per node and kind.

A round reads its inputs' updates here and stages what it produces; the loop
counts its pending work from here (``Work``). Each staging is held once
(``Held``), computed as soon as it changes so no round's plan grows with the
rounds before it: in a small interval the driver holds its rows as well, a
cache it sums, filters and counts with no Spark job; in a larger one Spark
keeps it in its block store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dd_etl.arrow_schema import arrow_schema
from dd_etl.local_relations import local_relation
from dd_etl.operators import linear
from dd_etl.operators.iterative import Known, LoopTime, at, earlier, iterations, later
from dd_etl.operators.keys import KeySet
from dd_etl.plan import nodes as n
from dd_etl.profiling import SPARK, phase
from dd_etl.trace import driver_merge
from dd_etl.trace.arrow_files import DRIVER_KEPT_RECORDS, collect_each
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.placement import Placement

if TYPE_CHECKING:
    from dd_etl.runtime.catalog import TraceCatalog


PINNED_HISTORY_RECORDS = 1_000_000
"""Traces up to this size are held in memory for an epoch of a loop rather than
read from their files in every round."""


class LoopNest(Protocol):
    """What an epoch reads of the loop run it belongs to."""

    @property
    def traces(self) -> TraceCatalog: ...

    @property
    def loop(self) -> n.Iterate:
        """The top loop of the nest."""
        ...

    @property
    def nest(self) -> dict[str, tuple[n.Node, int]]:
        """Every node inside the nest, by id, with its depth (``loop_nest``)."""
        ...

    @property
    def placement(self) -> Placement: ...

    @property
    def outer(self) -> Callable[[n.Node], DataFrame]:
        """The run's changes of a collection outside the loop."""
        ...

    def nest_of(self, loop: n.Iterate) -> set[str]: ...

    def nothing(self, node: n.Node, depth: int) -> DataFrame: ...


@dataclass(frozen=True)
class Entered:
    """Changes entering a loop at a prefix: Spark's frame of them, and how many
    rows it has where the driver knows that with no Spark job."""

    frame: DataFrame
    rows: int | None


STAGED, DUE, ENTERING = "staged", "due", "entering"
"""What an epoch holds per node: its staged updates, the keys a reduction must
evaluate again at later iterations (key, iterations), the changes entering the
loop from outside."""


@dataclass(frozen=True)
class Work:
    """A loop's pending work at one prefix (the iterations of the loops around
    it): rows per kind (``staged``, ``due``, ``entering``), node of its nest and
    iteration of the loop."""

    rows: dict[tuple[str, str, int], int]

    def iterations(self) -> set[int]:
        return {i for _, _, i in self.rows}

    def plus(self, row: tuple[str, str, int], count: int) -> Work:
        return Work({**self.rows, row: self.rows.get(row, 0) + count})

    def updates(self, i: int) -> int:
        return sum(c for (kind, _, j), c in self.rows.items() if j == i and kind != DUE)

    def staged(self, node_id: str, i: int) -> int:
        return self.rows.get((STAGED, node_id, i), 0)

    def staged_in_all(self, node_id: str) -> int:
        """The node's staged updates at every iteration: what its trace appends."""
        return sum(c for (kind, x, _), c in self.rows.items() if kind == STAGED and x == node_id)

    def due(self, node_id: str, i: int) -> int:
        return self.rows.get((DUE, node_id, i), 0)

    def entering(self, node_id: str) -> int:
        return self.rows.get((ENTERING, node_id, 0), 0)

    def busy(self, nest: Collection[str], i: int) -> bool:
        """Whether anything of ``nest`` (node ids) is staged or due at iteration ``i``."""
        return any(j == i and x in nest for kind, x, j in self.rows if kind != ENTERING)


@dataclass(frozen=True)
class Held:
    """Updates computed once, their lineage cut: Spark's ``frame`` of them, and,
    where the driver holds them, its ``rows`` of the same updates, a cache the
    driver sums, filters and counts with no Spark job."""

    frame: DataFrame
    rows: pa.Table | None = None


class EpochState:
    """The updates of one epoch of a loop nest so far, per stateful node and kind,
    computed after every change so no round's plan grows with the rounds before
    it (``_hold``: into the driver in a small interval, else checkpointed); what
    follows from rows the driver holds already (the result fed back to the
    variable, a renaming of it) it stages itself, with no job (``_stage_held``).
    A node inside ``d`` loops carries ``d`` iteration columns; read from deeper
    inside, it is padded with zeros (it entered there at 0)."""

    def __init__(self, run: LoopNest, epoch: int) -> None:
        self.run = run
        self.epoch = epoch
        self._held: dict[tuple[str, str], Held] = {}  # by kind and node id
        self._history: dict[str, DataFrame | None] = {}
        self.counted = Work({})  # the top loop's last count of its work

    def _hold(
        self,
        frames: dict[tuple[str, str], DataFrame],
        histories: dict[str, DataFrame] | None = None,
        summed: bool = False,
    ) -> None:
        """Compute ``frames`` (by kind: ``staged``, ``due`` or ``entering``, and node
        id) and ``histories`` (by node id: ``_pinned``) now, all at once, and hold
        them (``_keep``), the frames' equal rows as one when ``summed``; rows the
        driver holds then count the loop's work with no job of its own (``work``)."""
        histories = histories or {}
        wanted = [*frames.values(), *histories.values()]
        kept = self._keep(wanted, [summed] * len(frames) + [False] * len(histories))
        self._held |= zip(frames, kept[: len(frames)], strict=True)
        for node, held in zip(histories, kept[len(frames) :], strict=True):
            self._history[node] = held.frame

    def _frame(self, kind: str, node_id: str) -> DataFrame | None:
        held = self._held.get((kind, node_id))
        return None if held is None else held.frame

    def _rows(self, kind: str, node_id: str) -> pa.Table | None:
        """The driver's rows of what is held, where it holds them."""
        held = self._held.get((kind, node_id))
        return None if held is None else held.rows

    def _keep(self, frames: Sequence[DataFrame], summed: Sequence[bool]) -> list[Held]:
        """``frames`` computed now, their lineage cut, each with its equal rows as
        one where ``summed`` says (``_as_one``). In a small interval one Spark job
        brings them all into the driver, as local relations (returned with their
        rows), and the driver sums them (``driver_merge.summed``), so the job's
        plan has no aggregation for them; otherwise, or past
        ``DRIVER_KEPT_RECORDS`` rows, or for rows of nested types, Spark sums
        each, and keeps it in its block store unless the driver holds it."""
        by_driver = [
            self.run.placement.driver and s and driver_merge.groupable(arrow_schema(df.schema))
            for df, s in zip(frames, summed, strict=True)
        ]
        planned = [
            _as_one(df) if s and not driver else df
            for df, s, driver in zip(frames, summed, by_driver, strict=True)
        ]
        tables: list[pa.Table | None] = [None] * len(frames)
        if self.run.placement.driver:
            with phase(SPARK):
                tables = collect_each(
                    [df.coalesce(1) for df in planned], [DRIVER_KEPT_RECORDS] * len(frames)
                )
        kept: list[Held] = []
        for df, driver, table in zip(planned, by_driver, tables, strict=True):
            if table is None:
                kept.append(Held(_computed(_as_one(df) if driver else df)))
            else:
                rows = table.cast(arrow_schema(df.schema))
                rows = driver_merge.summed(rows) if driver else rows
                kept.append(Held(local_relation(df.sparkSession, rows, df.schema), rows))
        return kept

    def begin(self, inputs: Sequence[n.Node], histories: Sequence[n.Node]) -> None:
        """Compute the changes at this epoch of collections entering the loop from
        outside, and the small ones of the histories the loop reads, all at once."""
        self._hold(self._entering_frames(inputs), self._history_frames(histories))

    def _entering_frames(self, nodes: Sequence[n.Node]) -> dict[tuple[str, str], DataFrame]:
        return {
            (ENTERING, x.id): self.run.outer(x)
            .where(F.col(TIME) == self.epoch)
            .select(*x.columns, DIFF)
            for x in nodes
            if (ENTERING, x.id) not in self._held
        }

    def depth(self, node: n.Node) -> int:
        return self.run.nest[node.id][1] if node.id in self.run.nest else 0

    def nothing(self, node: n.Node, depth: int) -> DataFrame:
        return self.run.nothing(node, depth)

    def entering(self, node: n.Node) -> DataFrame:
        """A collection's changes at this epoch, from outside the loop."""
        return self.entered(node).frame

    def entered(self, node: n.Node) -> Entered:
        """``entering(node)``, counted where the driver holds its rows."""
        self._hold(self._entering_frames([node]))
        held = self._held[ENTERING, node.id]
        return Entered(held.frame, None if held.rows is None else held.rows.num_rows)

    def staged(self, node: n.Node) -> DataFrame:
        staged = self._frame(STAGED, home(node).id)
        return self.nothing(node, self.depth(node)) if staged is None else staged

    def stage(
        self,
        node: n.Node,
        updates: DataFrame,
        scheduled: tuple[DataFrame, LoopTime] | None = None,
        rows: pa.Table | None = None,
    ) -> None:
        """Stage ``updates`` of ``node``; for a reduction at round ``t``, with
        ``scheduled = (times, t)``, the keys it must evaluate again at later
        ``times`` too, computed with them (they read the same history). ``rows``:
        the driver's rows of ``updates``, if it holds them."""
        if home(node) is not node:
            return  # the variable's own staging already holds these updates
        cols = [*node.columns, *iterations(self.depth(node)), DIFF]
        both = self.staged(node).unionByName(updates.select(*cols))
        if rows is not None and scheduled is None and self._stage_held(node, both, rows):
            return
        frames = {(STAGED, node.id): both}
        if scheduled is not None:
            times, t = scheduled
            previous = self._frame(DUE, node.id)
            kept = times if previous is None else previous.where(later(t)).unionByName(times)
            frames[DUE, node.id] = kept
        self._hold(frames, summed=True)

    def _stage_held(self, node: n.Node, both: DataFrame, rows: pa.Table) -> bool:
        """Hold ``both``, the node's staging plus new updates whose ``rows`` the
        driver holds, summed by the driver with no Spark job, if it holds the
        staging's rows too; whether it could."""
        schema = arrow_schema(both.schema)
        held = self._held.get((STAGED, node.id))
        if (held is not None and held.rows is None) or not driver_merge.groupable(schema):
            return False
        parts = [rows] if held is None or held.rows is None else [held.rows, rows]
        summed = driver_merge.summed(
            pa.concat_tables([p.select(both.columns).cast(schema) for p in parts])
        )
        frame = local_relation(both.sparkSession, summed, both.schema)
        self._held[STAGED, node.id] = Held(frame, summed)
        return True

    def at(self, node: n.Node, t: LoopTime) -> DataFrame:
        return self.staged(node).where(at(t))

    def rows_at(self, node: n.Node, t: LoopTime) -> pa.Table | None:
        """``at(node, t)``'s rows, if the driver holds the node's staging."""
        table = self._rows(STAGED, home(node).id)
        return None if table is None else _rows_at(table, t)

    def leaving(self, variable: n.Variable, prefix: LoopTime) -> DataFrame:
        """The loop's output changes at ``prefix``: its variable's updates there,
        summed over the loop's own iterations."""
        last = iterations(len(prefix) + 1)[-1]
        return linear.consolidate(self.staged(variable).where(at(prefix)).drop(last))

    def due(self, node: n.Reduce, t: LoopTime) -> DataFrame:
        due = self._frame(DUE, node.id)
        if due is None:
            return self.nothing(node, 0).select(*node.key)
        return due.where(at(t)).select(*node.key)

    def history(self, node: n.Node, keys: KeySet) -> DataFrame:
        """The node's updates of earlier epochs for ``keys``, as ``(data, _time1…, _diff)``."""
        pinned = self._pinned(node)
        if pinned is not None:
            return keys.select(pinned)
        return self._read_history(node, keys)

    def _pinned(self, node: n.Node) -> DataFrame | None:
        """A small trace's whole history, read once per epoch: every round looks keys
        up in it without touching files again. Large traces are read per round, for
        the keys of the round only."""
        self._hold({}, self._history_frames([node]))
        return self._history[node.id]

    def _history_frames(self, nodes: Sequence[n.Node]) -> dict[str, DataFrame]:
        """The whole histories still to read of those of ``nodes`` whose traces are
        small (large ones are marked as not pinned)."""
        frames: dict[str, DataFrame] = {}
        for x in (x for x in nodes if x.id not in self._history):
            trace = self._trace(x)
            if trace is not None and trace.state.records > PINNED_HISTORY_RECORDS:
                self._history[x.id] = None
            else:
                frames[x.id] = self._read_history(x, None)
        return frames

    def _trace(self, node: n.Node) -> DeltaTrace | None:
        if node.id in self.run.nest:
            return self.run.traces.loop_trace(self.run.loop, node)
        return None if self.epoch == 0 else self.run.traces.trace(node)

    def _read_history(self, node: n.Node, keys: KeySet | None) -> DataFrame:
        trace = self._trace(node)
        if trace is None:
            return self.nothing(node, self.depth(node))
        frame = None if keys is None else keys.frame
        if node.id in self.run.nest:
            # Epochs before this one are all alike to it: only iterations matter.
            df = trace.updates(frame, placement=self.run.placement)
            df = df.where(F.col(TIME) < self.epoch)
            cols = [*node.columns, *iterations(self.depth(node)), DIFF]
            return linear.consolidate(df.select(*cols))
        history = trace.read_at((self.epoch - 1,), frame, placement=self.run.placement)
        return history.select(*node.columns, DIFF)

    def _this_epoch(self, node: n.Node) -> DataFrame:
        if node.id in self.run.nest:
            return self.staged(node)
        return self.entering(node)

    def before(self, node: n.Node, t: LoopTime) -> Known:
        """An arrangement's updates processed before round ``t``."""

        def read(keys: KeySet) -> DataFrame:
            mine = pad(self._this_epoch(node), len(t)).where(earlier(t))
            return pad(self.history(node, keys), len(t)).unionByName(keys.select(mine))

        return read

    def known(self, node: n.Node, depth: int) -> Known:
        """Every update of the node seen so far, at any time."""

        def read(keys: KeySet) -> DataFrame:
            mine = pad(keys.select(self._this_epoch(node)), depth)
            return pad(self.history(node, keys), depth).unionByName(mine)

        return read

    def work(self, loop: n.Iterate, prefix: LoopTime, entering: dict[str, Entered]) -> Work:
        """What ``loop`` has to do at ``prefix``: the updates staged anywhere in its
        nest and the keys its reductions scheduled, per iteration of ``loop``, and
        the changes entering it (all of them, at iteration 0: some may be for a
        later iteration of an outer loop, staged when they enter). One Spark job,
        or none when the driver holds all of them (a small interval)."""
        nest = self.run.nest_of(loop)
        counted = self._count_in_driver(nest, prefix, entering)
        if counted is not None:
            return counted
        i = F.col(iterations(len(prefix) + 1)[-1])

        def tagged(kind: str, key: str, df: DataFrame, i: Column) -> DataFrame:
            return df.select(F.lit(kind).alias("kind"), F.lit(key).alias("node"), i.alias("i"))

        parts = [
            tagged(kind, x, held.frame.where(at(prefix)), i)
            for (kind, x), held in self._held.items()
            if kind != ENTERING and x in nest
        ]
        parts += [tagged(ENTERING, x, e.frame, F.lit(0)) for x, e in entering.items()]
        if not parts:
            return Work({})
        union = functools.reduce(DataFrame.unionByName, parts)
        with phase(SPARK):
            rows = union.groupBy("kind", "node", "i").count().collect()
        return Work({(r["kind"], r["node"], int(r["i"])): int(r["count"]) for r in rows})

    def _count_in_driver(
        self, nest: Collection[str], prefix: LoopTime, entering: dict[str, Entered]
    ) -> Work | None:
        """``work`` counted from the rows the driver holds, or None when some of
        them are Spark's (or it cannot count what enters)."""
        rows: dict[tuple[str, str, int], int] = {}
        for (kind, x), held in self._held.items():
            if kind == ENTERING or x not in nest:
                continue
            if held.rows is None:
                return None
            rows |= {(kind, x, i): c for i, c in _per_iteration(held.rows, prefix).items()}
        for x, entered in entering.items():
            if entered.rows is None:
                return None
            if entered.rows:
                rows[ENTERING, x, 0] = entered.rows
        return Work(rows)


def _per_iteration(table: pa.Table, prefix: LoopTime) -> dict[int, int]:
    """The rows of ``table`` at ``prefix`` (the iterations of the loops around),
    counted per iteration of the loop inside it."""
    table = _rows_at(table, prefix)
    if not table.num_rows:
        return {}
    inner = iterations(len(prefix) + 1)[-1]
    counts = table.group_by(inner).aggregate([([], "count_all")])
    iteration, count = counts.column(inner).to_pylist(), counts.column("count_all").to_pylist()
    return dict(zip(iteration, count, strict=True))


def _rows_at(table: pa.Table, t: LoopTime) -> pa.Table:
    """The rows of ``table`` whose first ``len(t)`` iterations are ``t`` (``at``, in the
    driver)."""
    for column, value in zip(iterations(len(t)), t, strict=True):
        table = table.filter(pc.equal(table.column(column), value))
    return table


def _as_one(df: DataFrame) -> DataFrame:
    """Equal rows as one (``driver_merge.summed`` in Spark): updates summed, or
    each distinct row of a frame without diffs once."""
    return linear.consolidate(df) if DIFF in df.columns else df.distinct()


def _computed(df: DataFrame) -> DataFrame:
    """``df`` computed now and kept in Spark's block store, its lineage cut."""
    with phase(SPARK):
        return df.localCheckpoint(eager=True)


def pad(df: DataFrame, depth: int) -> DataFrame:
    """Updates of a collection from outside some loops, read inside them: they
    entered at iteration 0 of each."""
    columns = df.columns
    missing = [c for c in iterations(depth) if c not in columns]
    if not missing:
        return df
    return df.select(*columns, *[F.lit(0).cast("long").alias(c) for c in missing])


def next_iteration(rows: pa.Table, column: str) -> pa.Table:
    """``rows`` one iteration of ``column`` later."""
    i = rows.column_names.index(column)
    return rows.set_column(i, column, pc.add(rows.column(column), 1))


def home(node: n.Node) -> n.Node:
    """The node whose staging holds ``node``'s updates. An arrangement of the loop
    variable holds exactly the variable's updates, round for round: it shares
    them instead of copying them every round."""
    if isinstance(node, n.Arrange) and isinstance(node.inputs[0], n.Variable):
        return node.inputs[0]
    return node
