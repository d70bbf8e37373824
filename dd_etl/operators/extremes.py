"""MIN and MAX kept from their own rows wherever a change cannot move them.

A reduction recomputes every key its change touches from the key's whole input
(``reduce.delta_reduce``). For MIN and MAX (``Collection.extremes``: a level of
buckets, then the key) that is a bucket of the group per touched key: once
groups hold tens of thousands of rows, hundreds of rows read and reduced per
changed row. Yet an insertion moves an extreme only outward, to the inserted
value, and a retraction moves one only if it retracts the extreme itself. A key
whose retractions all lie strictly between its current MIN and MAX therefore
has its current extremes widened by its insertions as new ones; only the keys
some retraction reaches are recomputed from their history.

Which keys a retraction reaches is decided before the plan is made, from rows
the driver reads anyway (``reached``): the retractions of the batch the input
appended, and the reduction's current rows for their key hashes. The test is
made per hash and is conservative (the row of another key sharing a hash can
only make a key look reached), so every key left out keeps its extremes, and
the history read is that of the reached keys alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    DataType,
    DateType,
    FractionalType,
    IntegralType,
    TimestampNTZType,
    TimestampType,
)

from dd_etl import sql_text
from dd_etl.operators.join import History
from dd_etl.operators.reduce import HIGH, LOW, delta_reduce, min_max, null_safe_join
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.consolidation import consolidated

_ORDERED_ALIKE = (IntegralType, FractionalType, DateType, TimestampType, TimestampNTZType)
"""Types Arrow compares as Spark orders them (decimals are fractional; floats but
for NaN, handled apart)."""
_REACHED = "__reached"


def comparable(value_type: DataType) -> bool:
    """Whether the driver can tell for values of this type whether a retraction
    reaches an extreme."""
    return isinstance(value_type, _ORDERED_ALIKE)


def reached(retractions: pa.Table, current: pa.Table, key: Sequence[str]) -> pa.Table:
    """The keys (key columns and key hash, each once) of ``retractions`` that may
    retract the current MIN or MAX of their key. ``retractions``: stored input
    rows with a negative ``_diff``; ``current``: the reduction's stored rows for
    their hashes up to the change. A key with no current row counts as reached,
    and so does a NaN anywhere (Spark orders NaN above every number, Arrow does
    not compare it)."""
    groups = [*key, LOW, HIGH, KEY_HASH]
    summed = current.group_by(groups).aggregate([(DIFF, "sum")])
    live = summed.filter(pc.greater(summed.column(f"{DIFF}_sum"), 0))
    bounds = live.group_by([KEY_HASH]).aggregate([(LOW, "max"), (HIGH, "min")])
    joined = retractions.select(groups).join(bounds, KEY_HASH, join_type="left outer")
    low, high = joined.column(LOW), joined.column(HIGH)
    reach = pc.or_kleene(
        pc.less_equal(low, joined.column(f"{LOW}_max")),
        pc.greater_equal(high, joined.column(f"{HIGH}_min")),
    )
    reach = pc.fill_null(reach, True)
    if pa.types.is_floating(low.type):
        nan = pc.or_(pc.is_nan(low), pc.is_nan(high))
        nan_live = live.filter(pc.or_(pc.is_nan(live.column(LOW)), pc.is_nan(live.column(HIGH))))
        in_nan = pc.is_in(joined.column(KEY_HASH), value_set=nan_live.column(KEY_HASH))
        reach = pc.or_(reach, pc.or_(pc.fill_null(nan, True), in_nan))
    hit = joined.filter(reach).select([*key, KEY_HASH])
    return hit.group_by([*key, KEY_HASH]).aggregate([])


def delta_extremes(
    d_in: DataFrame,
    reached_keys: DataFrame,
    input_history: History,
    output_history: History,
    key: Sequence[str],
    out_columns: Sequence[str],
    history_time: int,
) -> DataFrame:
    """The changes of a ``min_max`` reduction whose input changed at the one time
    after ``history_time``: the keys in ``reached_keys`` recomputed from their
    history (``input_history`` need hold no other key's), every other touched
    key's current row widened by its insertions."""
    keyed, out = [quote(k) for k in key], [quote(c) for c in out_columns]
    time, diff = quote(TIME), quote(DIFF)
    marked = sql_text.select(reached_keys, [*keyed, f"TRUE AS {_REACHED}"])
    split = null_safe_join(d_in, marked, key, how="left")
    columns = [quote(c) for c in d_in.columns]
    hit = sql_text.select(split.where(f"{_REACHED}"), columns)
    kept = sql_text.select(split.where(f"{_REACHED} IS NULL"), columns)
    recomputed = delta_reduce(
        hit, input_history, output_history, key, out_columns, min_max, history_time, True
    )
    touched = sql_text.select(kept, keyed).distinct()
    now = f"CAST({history_time + 1} AS BIGINT) AS {time}"
    current = consolidated(null_safe_join(output_history(touched), touched, key), out_columns)
    inserted = sql_text.select(kept.where(f"{diff} > 0"), [*keyed, LOW, HIGH])
    both = sql_text.select(current, [*keyed, LOW, HIGH]).unionByName(inserted)
    widened = sql_text.group(both, key, [f"min({LOW}) AS {LOW}", f"max({HIGH}) AS {HIGH}"])
    added = sql_text.select(widened, [*out, now, f"CAST(1 AS BIGINT) AS {diff}"])
    dropped = sql_text.select(current, [*out, now, f"-{diff} AS {diff}"])
    return recomputed.unionByName(added).unionByName(dropped)
