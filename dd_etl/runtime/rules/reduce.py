"""A per-key reduction (``operators/reduce.py``): the keys its input's changes
touch evaluated again against their history; in a loop, at every later time
the partial order makes interesting (``operators/iterative.py``); from scratch,
each key's group reduced once.

Two kinds of one epoch read less: a MIN/MAX reads the history only of the keys
a retraction may move (``operators/extremes.py``), a running window computes
the partitions whose rows arrived in order from their totals
(``operators/running.py``). Where the driver holds the interval's rows it tells
those keys apart itself, and the history is read for them alone; a MIN/MAX
level's batch it then makes itself (``operators/driver_extremes.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import PlanError
from dd_etl.local_relations import local_relation
from dd_etl.operators import driver_extremes, extremes, linear, running
from dd_etl.operators.extremes import order_struct
from dd_etl.operators.iterative import loop_reduce
from dd_etl.operators.reduce import AT, delta_reduce, sides
from dd_etl.operators.running import delta_running, running_calls
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import keyed_leaves
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.reducers import reducer_for
from dd_etl.runtime.rules.rule import Rule
from dd_etl.trace import driver_merge, spark_files
from dd_etl.trace.columns import DIFF, KEY_HASH

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope
    from dd_etl.trace.delta_trace import DeltaTrace

Reduced = Callable[[DataFrame, list[int] | None], DataFrame]
"""The reduction of some changes, their history read for the key hashes given
(all the changes touch, when None)."""


class ReduceRule(Rule[n.Reduce]):
    def batch_in_driver(self, node: n.Reduce, interval: IntervalScope) -> pa.Table | None:
        return _extremes_in_driver(node, interval)

    def changes(self, node: n.Reduce, interval: IntervalScope, start: int) -> DataFrame:
        probes = keyed_leaves(node.inputs[0], node.key) or []
        kept = _kept_extremes(node, interval, probes)
        if kept is not None:
            return kept

        def reduced(changes: DataFrame, hashes: list[int] | None = None) -> DataFrame:
            return delta_reduce(
                changes,
                interval.history(node.inputs[0], probes=probes, accumulated=False, hashes=hashes),
                interval.history(node, probes=probes, accumulated=False, hashes=hashes),
                node.key,
                node.columns,
                reducer_for(node),
                one_time=interval.upper - interval.lower == 1,
            )

        if node.kind == "running" and interval.upper - interval.lower == 1:
            return _running(node, interval, probes, reduced)
        return reduced(interval.delta(node.inputs[0]))

    def in_loop(self, node: n.Reduce, round: RoundScope) -> DataFrame | None:
        given = node.inputs[0]
        if not round.live(given) and not round.due(node):
            return None
        touched = round.changes(given).select(*node.key).unionByName(round.due_keys(node))
        correction, later = loop_reduce(
            touched,
            round.known(given),
            round.known(node),
            node.key,
            given.columns,
            node.columns,
            reducer_for(node),
            round.t,
        )
        round.reconsider(node, correction, later)
        return round.at(node)

    def rows_in_loop(self, node: n.Reduce, round: RoundScope) -> pa.Table | None:
        return round.rows_at(node)

    def from_scratch(self, node: n.Reduce, scratch: ScratchScope) -> DataFrame:
        whole = linear.consolidate(scratch.evaluate(node.inputs[0]))
        acc = whole.where(F.col(DIFF) > 0).withColumn(AT, F.lit(0))
        return reducer_for(node)(acc, node.key).select(*node.columns, DIFF)


RULE = ReduceRule()


def _running(
    node: n.Reduce, interval: IntervalScope, probes: Sequence[n.Node], reduced: Reduced
) -> DataFrame:
    """The changes of a running window at one epoch (``operators/running.py``):
    the partitions whose rows arrived after their last one from their totals,
    the others by the window rule (``reduced``), reading the history of those
    alone where the driver tells which they are."""
    arranged, last, totals = node.inputs
    found = running_calls(node.calls, arranged.schema, node.key)
    ordered = None if found is None else order_struct(found.order, arranged.schema)
    if found is None or ordered is None:
        raise PlanError(f"reduction {node.id}: its calls are not running aggregates")
    changes = interval.delta(arranged)  # appended first
    told = _out_of_order_in_driver(node, interval, found, ordered, probes)
    keys, hashes = told if told is not None else (None, None)
    return delta_running(
        changes,
        keys,
        interval.history(last, probes=probes),
        interval.history(totals, probes=probes),
        lambda rest: reduced(rest, hashes),
        node.key,
        found,
        ordered,
        node.schema,
    )


def _out_of_order_in_driver(
    node: n.Reduce,
    interval: IntervalScope,
    found: running.Running,
    ordered: Sequence[extremes.OrderField],
    probes: Sequence[n.Node],
) -> tuple[DataFrame, list[int]] | None:
    """The keys whose changes are not all insertions after their last row, as a
    local relation, and their sorted hashes, told from the rows the driver
    reads; None where it cannot tell."""
    arranged, last, _ = node.inputs
    if not interval.driver_rows or list(probes) != [arranged]:
        return None
    source, lasts = interval.traces.trace(arranged), interval.traces.trace(last)
    if source.key_types != lasts.key_types or not extremes.comparable(
        last.schema[found.side].dataType
    ):
        return None
    changed = source.stored_rows(since=(interval.lower,))
    if changed is None:
        return None
    hashes = sorted(set(changed.column(KEY_HASH).to_pylist()))
    current = lasts.stored_rows(at=(interval.lower - 1,), key_hashes=hashes)
    if current is None:
        return None
    hit = running.out_of_order(changed, current, node.key, found, ordered)
    return None if hit is None else _keys_relation(node, interval, hit)


def _kept_extremes(
    node: n.Reduce, interval: IntervalScope, probes: Sequence[n.Node]
) -> DataFrame | None:
    """The changes of a MIN/MAX reduction with the history read only for the keys
    a retraction may move (``operators/extremes.py``): one epoch, keys (a
    global one is a key of its own, ``__all``), and the input a trace keyed as
    the reduction is. The driver tells which keys a retraction reaches where it
    holds the rows (values Arrow compares as Spark does, few enough rows);
    Spark does elsewhere."""
    arranged = node.inputs[0]
    if node.kind != "min_max" or not node.key or interval.upper - interval.lower != 1:
        return None
    if list(probes) != [arranged]:
        return None
    source, target = interval.traces.trace(arranged), interval.traces.trace(node)
    if source.key_types != target.key_types:
        return None
    changes = interval.delta(arranged)  # appended first
    found = _reached_in_driver(node, interval, source, target) if interval.driver_rows else None
    reached: DataFrame | extremes.NoneReached | None = None
    hashes: list[int] | None = None
    if found is not None:
        reached, hashes = found if found[1] else (extremes.NONE_REACHED, [])
    return extremes.delta_extremes(
        changes,
        reached,
        interval.history(arranged, probes=[arranged], accumulated=False, hashes=hashes),
        interval.history(node, probes=[arranged], accumulated=False),
        node.key,
        node.columns,
    )


def _extremes_in_driver(node: n.Reduce, interval: IntervalScope) -> pa.Table | None:
    """The batch of a MIN/MAX reduction at one epoch made by the driver
    (``operators/driver_extremes.py``) from the rows it reads: the input's
    change, the reduction's rows for the keys it touches, the history of the
    keys a retraction reaches. None where it cannot: values of a type Arrow
    orders otherwise than Spark, or nested; more rows than it keeps; a NaN."""
    arranged = node.inputs[0]
    if node.kind != "min_max" or not node.key or interval.upper - interval.lower != 1:
        return None
    if keyed_leaves(arranged, node.key) != [arranged]:
        return None
    source, target = interval.traces.trace(arranged), interval.traces.trace(node)
    stored = arrow_schema(spark_files.stored_schema(target.state))
    carried = [node.schema[side].dataType for side, _ in sides(node.columns)]
    if not driver_merge.groupable(stored) or not all(map(extremes.comparable, carried)):
        return None
    if source.key_types != target.key_types or epoch_of(source.state.upper) < interval.upper:
        return None  # the input not appended yet: Spark's plan says so
    changes = source.stored_rows(since=(interval.lower,))
    if changes is None:
        return None
    before = (interval.lower - 1,)
    touched = sorted(set(changes.column(KEY_HASH).to_pylist()))
    current = target.stored_rows(at=before, key_hashes=touched)
    if current is None:
        return None
    retractions = changes.filter(pc.less(changes.column(DIFF), 0))
    hit = extremes.reached(retractions, current, node.key).column(KEY_HASH)
    hashes = sorted(set(hit.to_pylist()))
    history = source.stored_rows(at=before, key_hashes=hashes)
    if history is None or not driver_extremes.reducible([changes, current, history], node.columns):
        return None
    batch = driver_extremes.extremes_batch(
        changes,
        current,
        pa.array(hashes, pa.int64()),
        history,
        node.key,
        node.columns,
        interval.lower,
    )
    return batch.cast(stored)


def _reached_in_driver(
    node: n.Reduce, interval: IntervalScope, source: DeltaTrace, target: DeltaTrace
) -> tuple[DataFrame, list[int]] | None:
    """The keys whose extremes a retraction may move, as a local relation, and
    their sorted hashes, told from the rows the driver reads; None where it
    cannot tell."""
    if not all(extremes.comparable(node.schema[s].dataType) for s, _ in sides(node.columns)):
        return None
    found = source.stored_rows(since=(interval.lower,))
    if found is None:
        return None
    retractions = found.filter(pc.less(found.column(DIFF), 0))
    hashes = sorted(set(retractions.column(KEY_HASH).to_pylist()))
    current = target.stored_rows(at=(interval.lower - 1,), key_hashes=hashes)
    if current is None:
        return None
    return _keys_relation(node, interval, extremes.reached(retractions, current, node.key))


def _keys_relation(
    node: n.Reduce, interval: IntervalScope, hit: pa.Table
) -> tuple[DataFrame, list[int]]:
    """Keys the driver found (key columns and key hash) as a local relation of
    ``node``'s key columns, and their sorted hashes."""
    key_schema = StructType([node.schema[k] for k in node.key])
    keys = hit.select(list(node.key)).cast(arrow_schema(key_schema))
    hashes = sorted(hit.column(KEY_HASH).to_pylist())
    return local_relation(interval.traces.flow.spark, keys, key_schema), hashes
