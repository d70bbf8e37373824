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

A first row per key (``Collection.first_row``) is one side of such a
reduction, its value the whole row as one struct led by its order: compared
field by field, as Spark orders structs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    FractionalType,
    IntegralType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from dd_etl import sql_text
from dd_etl.operators.join import History
from dd_etl.operators.partitions import union
from dd_etl.operators.reduce import HIGH, LOW, null_safe_join, sides
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.consolidation import consolidated

_ORDERED_ALIKE = (IntegralType, FractionalType, DateType, TimestampType, TimestampNTZType)
"""Types Arrow compares as Spark orders them (decimals are fractional; floats but
for NaN, handled apart)."""
_REACHED = "__reached"


def comparable(value_type: DataType) -> bool:
    """Whether the driver can tell for values of this type whether a retraction
    reaches an extreme: Arrow compares them as Spark orders them (a struct field
    by field, as a first row travels)."""
    if isinstance(value_type, StructType):
        return all(comparable(f.dataType) for f in value_type.fields)
    return isinstance(value_type, (*_ORDERED_ALIKE, BooleanType))


def reversed_order(column: str, value_type: DataType) -> str | None:
    """Spark SQL for a value sorting exactly as ``column`` sorts in the other
    direction (NULL staying NULL), for the types where one exists: how a first
    row by an order mixing directions stays the least of one struct. None for
    the others (strings, floats: NaN sorts above every number either way)."""
    quoted = quote(column)
    if isinstance(value_type, BooleanType):
        return f"NOT {quoted}"
    if isinstance(value_type, IntegralType):
        return f"-CAST({quoted} AS DECIMAL(20, 0))"
    if isinstance(value_type, DecimalType):
        return f"-{quoted}"
    if isinstance(value_type, DateType):
        return f"-unix_date({quoted})"
    if isinstance(value_type, TimestampType):
        return f"-CAST(unix_micros({quoted}) AS DECIMAL(20, 0))"
    return None


@dataclass(frozen=True)
class OrderField:
    """A field of a struct sorting as an order does: a column's value, its NULL
    flag, or its value reversed; ``sql`` computes it from the row."""

    name: str
    column: str
    form: Literal["value", "null", "reversed"]
    sql: str


def order_struct(
    order: Sequence[tuple[str, bool, bool]], schema: StructType
) -> list[OrderField] | None:
    """The fields of a struct sorting as ``order`` (``(column, descending, NULLs
    first)``) sorts, in its lead direction: a column sorted the lead's way is
    itself, one sorted the other way reversed (``reversed_order``, field
    ``__rank<i>``); where NULLs go elsewhere than a struct puts them (first
    ascending, last descending), a flag ``__null<i>`` before the value moves
    them. None where a value cannot be reversed."""
    lead = bool(order) and order[0][1]
    fields: dict[str, OrderField] = {}
    for i, (c, desc, nulls_first) in enumerate(order):
        if nulls_first == lead:
            fields[f"__null{i}"] = OrderField(f"__null{i}", c, "null", f"{quote(c)} IS NULL")
        if desc == lead:
            fields.setdefault(c, OrderField(c, c, "value", quote(c)))
            continue
        reversed_value = reversed_order(c, schema[c].dataType)
        if reversed_value is None:
            return None
        fields[f"__rank{i}"] = OrderField(f"__rank{i}", c, "reversed", reversed_value)
    return list(fields.values())


def packed(fields: Sequence[OrderField]) -> str:
    """Spark SQL for the struct of ``fields``."""
    return "struct(" + ", ".join(f"{f.sql} AS {quote(f.name)}" for f in fields) + ")"


def reached(retractions: pa.Table, current: pa.Table, key: Sequence[str]) -> pa.Table:
    """The keys (key columns and key hash, each once) of ``retractions`` that may
    retract the current MIN or MAX of their key (of those the reduction carries).
    ``retractions``: stored input rows with a negative ``_diff``; ``current``: the
    reduction's stored rows for their hashes up to the change. Each retraction
    is tested against the current row of every key sharing its hash (another
    key's can only make it look reached); a key with no current row counts as
    reached, and so does a NaN anywhere (Spark orders NaN above every number,
    Arrow does not compare it)."""
    carried = [side for side, _ in sides(current.column_names)]
    bounds, now = live_by_hash(current, key, carried)
    asked = fields_flat(retractions, [*key, KEY_HASH], carried)
    joined = asked.join(bounds, KEY_HASH, join_type="left outer")
    reach = pc.is_null(joined.column(LIVE))
    for side in carried:
        mine = [f for f in now if f == side or f.startswith(f"{side}.")]
        here = [joined.column(f) for f in mine]
        there = [joined.column(now[f]) for f in mine]
        reach = pc.or_(reach, pc.fill_null(at_or_beyond(here, there, below=side == LOW), True))
        reach = pc.or_(reach, any_nan([*here, *there]))
    hit = joined.filter(reach).select([*key, KEY_HASH])
    return hit.group_by([*key, KEY_HASH]).aggregate([])


LIVE = "__live"
"""The column ``live_by_hash`` marks each of its rows with."""


def live_by_hash(
    current: pa.Table, key: Sequence[str], values: Sequence[str]
) -> tuple[pa.Table, dict[str, str]]:
    """The rows of ``current`` (stored updates of a reduction's output) present
    at its time, as their key hash, each of ``values`` flattened to its fields
    (``fields_flat``) and renamed ``__current<i>``, and ``LIVE`` (true): for a
    join of other rows by their hash. Also each field's new name, in order."""
    flat = fields_flat(current, [*key, KEY_HASH, DIFF], values)
    fields = flat.column_names[len(key) + 2 :]
    summed = flat.group_by([*key, *fields, KEY_HASH]).aggregate([(DIFF, "sum")])
    live = summed.filter(pc.greater(summed.column(f"{DIFF}_sum"), 0))
    now = {f: f"__current{i}" for i, f in enumerate(fields)}
    bounds = live.select([KEY_HASH, *fields]).rename_columns([KEY_HASH, *now.values()])
    return bounds.append_column(LIVE, pa.array([True] * bounds.num_rows, pa.bool_())), now


def any_nan(columns: Sequence[pa.ChunkedArray]) -> pa.ChunkedArray | bool:
    """Per row, whether a float of ``columns`` is NaN: Spark orders NaN above every
    number, Arrow does not compare it, so a caller takes the cautious side."""
    found: pa.ChunkedArray | bool = False
    for column in columns:
        if pa.types.is_floating(column.type):
            found = pc.or_(found, pc.fill_null(pc.is_nan(column), False))
    return found


def fields_flat(table: pa.Table, kept: Sequence[str], values: Sequence[str]) -> pa.Table:
    """The ``kept`` columns, then each of ``values`` as its innermost fields'
    columns (``__max.at`` for a struct's field ``at``), in order."""
    flat = table.select(list(values))
    while any(pa.types.is_struct(t) for t in flat.schema.types):
        flat = flat.flatten()
    head = table.select(list(kept))
    return pa.Table.from_arrays(
        [*head.columns, *flat.columns], names=[*head.column_names, *flat.column_names]
    )


def at_or_beyond(
    value: Sequence[pa.ChunkedArray], bound: Sequence[pa.ChunkedArray], below: bool
) -> pa.ChunkedArray:
    """Whether each ``value`` (its fields, in order) is at or below ``bound``
    (``below``), or at or above it, compared field by field as Spark orders
    structs: NULL before every value."""
    result = pc.or_(pc.is_valid(value[0]), pc.is_null(value[0]))  # all equal: at the bound
    for mine, theirs in reversed(list(zip(value, bound, strict=True))):
        mine_null, theirs_null = pc.is_null(mine), pc.is_null(theirs)
        both = pc.and_(pc.invert(mine_null), pc.invert(theirs_null))
        compare = pc.less if below else pc.greater
        strictly = pc.or_(
            pc.and_(
                mine_null if below else theirs_null, pc.invert(theirs_null if below else mine_null)
            ),
            pc.and_(both, pc.fill_null(compare(mine, theirs), False)),
        )
        equal = pc.or_(pc.and_(mine_null, theirs_null), pc.fill_null(pc.equal(mine, theirs), False))
        result = pc.or_(strictly, pc.and_(equal, result))
    return result


NoneReached = tuple[()]
NONE_REACHED: NoneReached = ()
"""What the driver found when no retraction of a change reaches an extreme."""


def delta_extremes(
    d_in: DataFrame,
    reached_keys: DataFrame | NoneReached | None,
    input_history: History,
    output_history: History,
    key: Sequence[str],
    out_columns: Sequence[str],
) -> DataFrame:
    """The changes of a ``min_max`` reduction whose input changed at one time.

    The reduction's current rows are read for the keys the change touches. A key
    in ``reached_keys`` (told by Spark, ``reached_in_spark``, when None) is
    recomputed from its history (``input_history`` need hold no other key's) and
    its changes; every other key's current row is widened by its insertions.
    With ``NONE_REACHED`` every key is widened, and the plan holds nothing of
    the recomputation (Spark would prune it only after analysing it).
    Each touched key's current row is retracted and its new one inserted, at the
    time of its change, read from the change itself: no epoch literal enters the
    plan. A key whose extremes stay as they were gets the same row back, and the
    batch's consolidation drops the pair."""
    keyed, out = [quote(k) for k in key], [quote(c) for c in out_columns]
    time, diff = quote(TIME), quote(DIFF)
    touched = sql_text.select(d_in, [*keyed, time]).distinct()
    current = consolidated(
        null_safe_join(output_history(sql_text.columns(touched, key)), touched, key),
        [*out_columns, TIME],
    )
    carried = sides(out_columns)
    extended = [f"{f}({side}) AS {side}" for side, f in carried]
    bounds = [*keyed, *(side for side, _ in carried), time]
    if isinstance(reached_keys, tuple):  # every touched key widened: ``current`` holds them
        kept, kept_now, recomputed = d_in, sql_text.select(current, bounds), None
    else:
        if reached_keys is None:
            reached_keys = reached_in_spark(d_in, current, key)
        marked = sql_text.select(reached_keys, [*keyed, f"TRUE AS {_REACHED}"])
        split = null_safe_join(d_in, marked, key, how="left")
        data = [quote(c) for c in d_in.columns if c not in (TIME, DIFF)]
        hit = sql_text.select(split.where(_REACHED), [*data, time, diff])
        kept = sql_text.select(split.where(f"{_REACHED} IS NULL"), [*data, time, diff])
        # reached keys: everything they hold, history and change, summed and reduced
        hit_times = null_safe_join(touched, marked, key)
        history = sql_text.select(
            null_safe_join(input_history(reached_keys), hit_times, key), [*data, time, diff]
        )
        present = consolidated(union(history, hit), [*[c for c in d_in.columns if c != DIFF]])
        recomputed = sql_text.group(present.where(f"{diff} > 0"), [*key, TIME], extended)
        kept_keys = sql_text.select(kept, keyed).distinct()
        kept_now = sql_text.select(null_safe_join(current, kept_keys, key), bounds)
    # the others: their current extremes widened by what they gained
    gained = sql_text.select(kept.where(f"{diff} > 0"), bounds)
    widened = sql_text.group(union(kept_now, gained), [*key, TIME], extended)
    both = widened if recomputed is None else union(recomputed, widened)
    new = sql_text.select(both, [*out, time, f"CAST(1 AS BIGINT) AS {diff}"])
    old = sql_text.select(current, [*out, time, f"-{diff} AS {diff}"])
    return union(new, old)


def reached_in_spark(d_in: DataFrame, current: DataFrame, key: Sequence[str]) -> DataFrame:
    """``reached`` as a Spark plan: the keys of ``d_in``'s retractions that have no
    current row or retract a value at or beyond one of its extremes. Spark orders
    NaN above every number and equal to itself, so its comparisons need no case
    of their own."""
    keyed = [quote(k) for k in key]
    carried = [side for side, _ in sides(current.columns)]
    bounds = sql_text.select(current, [*keyed, *(f"{s} AS __current{s}" for s in carried)])
    retracted = sql_text.select(d_in.where(f"{quote(DIFF)} < 0"), [*keyed, *carried])
    joined = null_safe_join(retracted, bounds, key, how="left")
    beyond = {LOW: "<=", HIGH: ">="}
    reach = " OR ".join(
        [f"__current{carried[0]} IS NULL", *(f"{s} {beyond[s]} __current{s}" for s in carried)]
    )
    return sql_text.select(joined.where(reach), keyed).distinct()
