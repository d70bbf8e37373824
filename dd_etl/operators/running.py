"""Running aggregates over an ordered partition, kept from the partition's totals
where rows arrive in order.

``SUM``, ``COUNT`` and ``ROW_NUMBER`` over ``ORDER BY … [ROWS | RANGE] BETWEEN
UNBOUNDED PRECEDING AND CURRENT ROW`` give each row the aggregate of its
partition up to it. A change before a partition's last row moves the value of
every row after it, and the general window rule (``operators/window.py``)
re-evaluates the partition. But rows mostly arrive in order (events, payments,
orders by time): for a partition whose changes at a time are all insertions
strictly after its last row,

    value(r) = totals(partition before the change) ⊕ prefix(new rows up to r)

and no existing row's value moves. Two small traces kept beside the window say
which partitions those are and what their totals were: the partition's last
order (a first row by the reversed order, ``Collection.first_row``'s struct)
and its accumulated counts and sums (``operators/accumulate.py``). Those
partitions read one row of each; only the others read their history. The
driver tells the others from rows it reads anyway (the batch the input
appended, and the last rows of its key hashes: ``out_of_order``), so the
history of those alone is read; where it cannot, Spark tells them
(``out_of_order_in_spark``).

A float's total plus a prefix may differ in its last bits from the partition
summed in order, as SQL SUM's accumulation does; a decimal of scale above 6,
which the accumulation would round, is summed by the general rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, DecimalType, NumericType, StructType
from sqlglot import exp

from dd_etl import sql_text
from dd_etl.operators.accumulate import ROWS, nn, total
from dd_etl.operators.extremes import LIVE, OrderField, any_nan, at_or_beyond, live_by_hash, packed
from dd_etl.operators.join import History
from dd_etl.operators.partitions import union
from dd_etl.operators.reduce import AT, HIGH, LOW, each_copy, null_safe_join
from dd_etl.operators.window import Call, orderable, partitioned, window_call
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME

Function = Literal["sum", "count", "row_number"]

_EXACT_DECIMAL_SCALE = 6
"""The largest decimal scale whose sums the accumulation keeps exactly."""


@dataclass(frozen=True)
class RunningCall:
    """A window call computing a running aggregate: its output column, its Spark
    SQL, and the column it sums or counts (None: every row)."""

    name: str
    text: str
    function: Function
    argument: str | None


@dataclass(frozen=True)
class Running:
    """Window calls that are all running aggregates over one order."""

    order: tuple[tuple[str, bool, bool], ...]  # (column, descending, NULLs first)
    calls: tuple[RunningCall, ...]

    @property
    def values(self) -> tuple[str, ...]:
        """The columns summed or counted, each once: what the totals accumulate."""
        return tuple(dict.fromkeys(c.argument for c in self.calls if c.argument is not None))

    @property
    def side(self) -> str:
        """Which extreme of the order struct the last row is: the greatest for an
        order leading ascending, else the least."""
        return LOW if self.order[0][1] else HIGH


def running_calls(calls: Sequence[Call], schema: StructType, key: Sequence[str]) -> Running | None:
    """``calls`` as running aggregates over one order of columns outside ``key``,
    or None if any is another kind of window call (which the general rule keeps)."""
    found: list[RunningCall] = []
    orders: set[tuple[tuple[str, bool, bool], ...]] = set()
    for name, text in calls:
        call = window_call(text)
        order = _order(call, schema)
        function = _function(call, schema)
        if order is None or function is None or not _from_the_start(call):
            return None
        orders.add(order)
        found.append(RunningCall(name, text, *function))
    if len(orders) != 1:
        return None
    order = orders.pop()
    if all(c in key for c, _, _ in order):
        return None  # every row a peer of every other: no row comes after another
    return Running(order, tuple(found))


def _order(call: exp.Window, schema: StructType) -> tuple[tuple[str, bool, bool], ...] | None:
    """The call's ORDER BY, when it is of plain columns."""
    order = call.args.get("order")
    items: list[tuple[str, bool, bool]] = []
    for item in order.expressions if order else []:
        column, desc = item.this, bool(item.args.get("desc"))
        if not isinstance(column, exp.Column) or column.table or column.name not in schema.names:
            return None
        items.append((column.name, desc, bool(item.args.get("nulls_first"))))
    return tuple(items) or None


def _function(call: exp.Window, schema: StructType) -> tuple[Function, str | None] | None:
    function = call.this
    if isinstance(function, exp.RowNumber):
        return "row_number", None
    if not isinstance(function, exp.Sum | exp.Count) or function.expressions:
        return None
    argument = function.this
    if isinstance(function, exp.Count) and (
        isinstance(argument, exp.Star) or (isinstance(argument, exp.Literal) and argument.this)
    ):
        return "count", None
    if not isinstance(argument, exp.Column) or argument.table or argument.name not in schema.names:
        return None
    if isinstance(function, exp.Sum) and not _summed_exactly(schema[argument.name].dataType):
        return None
    return ("sum" if isinstance(function, exp.Sum) else "count"), argument.name


def _summed_exactly(value_type: DataType) -> bool:
    if isinstance(value_type, DecimalType):
        return value_type.scale <= _EXACT_DECIMAL_SCALE
    return isinstance(value_type, NumericType)


_FROM_THE_START = ("UNBOUNDED", "PRECEDING", "CURRENT ROW")


def _from_the_start(call: exp.Window) -> bool:
    """Whether the call's frame runs from the partition's first row to the
    current one (or its last peer): the default frame with an ORDER BY, or
    ``ROWS``/``RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``."""
    spec = call.args.get("spec")
    if spec is None:
        return True
    if isinstance(call.this, exp.RowNumber):
        return False
    kind, start = str(spec.args.get("kind", "")).upper(), str(spec.args.get("start", "")).upper()
    side = str(spec.args.get("start_side", "")).upper()
    end = str(spec.args.get("end") or "CURRENT ROW").upper()
    return kind in ("ROWS", "RANGE") and (start, side, end) == _FROM_THE_START


def delta_running(
    d_in: DataFrame,
    out_of_order: DataFrame | None,
    last: History,
    totals: History,
    general: Callable[[DataFrame], DataFrame],
    key: Sequence[str],
    running: Running,
    order_fields: Sequence[OrderField],
    schema: StructType,
) -> DataFrame:
    """The changes of a running window whose input changed at one time.

    ``out_of_order``: the keys whose changes are not all insertions after their
    last row (told by Spark from ``last`` when None); their changes go to
    ``general``, the window rule, which reads their history. Every other
    touched partition's new rows get its totals before the change (``totals``)
    plus their own running aggregate. ``order_fields``: the struct of the order
    ``last`` holds (``extremes.order_struct``); ``schema``: the window's output."""
    keyed = [quote(k) for k in key]
    if out_of_order is None:
        out_of_order = out_of_order_in_spark(d_in, last, key, running, order_fields)
    marked = sql_text.select(out_of_order, [*keyed, "TRUE AS __general"])
    split = null_safe_join(d_in, marked, key, how="left")
    changed = [quote(c) for c in d_in.columns]
    rest = sql_text.select(split.where("__general"), changed)
    appended = sql_text.select(split.where("__general IS NULL"), changed)
    before = totals(sql_text.select(appended, keyed).distinct())
    return union(general(rest), _appended(appended, before, key, running, schema))


def out_of_order_in_spark(
    d_in: DataFrame,
    last: History,
    key: Sequence[str],
    running: Running,
    order_fields: Sequence[OrderField],
) -> DataFrame:
    """The keys of ``d_in`` with a retraction, or an insertion not strictly after
    the key's last row by the order (Spark compares structs as it sorts)."""
    keyed, side = [quote(k) for k in key], running.side
    ends = sql_text.select(
        last(sql_text.select(d_in, keyed).distinct()), [*keyed, f"{side} AS __last"]
    )
    rows = sql_text.select(d_in, [*keyed, f"{packed(order_fields)} AS __order", quote(DIFF)])
    judged = null_safe_join(rows, ends, key, how="left")
    after = "__order > __last" if side == HIGH else "__order < __last"
    kept = f"{quote(DIFF)} > 0 AND (__last IS NULL OR {after})"
    return sql_text.select(judged.where(f"NOT ({kept})"), keyed).distinct()


def out_of_order(
    changes: pa.Table,
    lasts: pa.Table,
    key: Sequence[str],
    running: Running,
    order_fields: Sequence[OrderField],
) -> pa.Table | None:
    """``out_of_order_in_spark`` told by the driver from stored rows: the keys (key
    columns and key hash, each once) of ``changes`` (the input's, with
    ``_diff``) with a retraction or a row not strictly after the last row
    (``lasts``: the last rows' trace, up to the change) of any key sharing its
    hash, which another key's can only add to; a NaN counts as out of order.
    None where Arrow cannot sort as Spark does (a reversed value, strings)."""
    if any(f.form == "reversed" for f in order_fields):
        return None
    side = running.side
    ends, last = live_by_hash(lasts, key, [side])
    values = [
        pc.is_null(changes.column(f.column)) if f.form == "null" else changes.column(f.column)
        for f in order_fields
    ]
    mine = [f"__mine{i}" for i in range(len(values))]
    rows = changes.select([*key, KEY_HASH, DIFF])
    for name, value in zip(mine, values, strict=True):
        rows = rows.append_column(name, value)
    joined = rows.join(ends, KEY_HASH, join_type="left outer")
    here, there = [joined.column(m) for m in mine], [joined.column(t) for t in last.values()]
    if len(here) != len(there):
        return None  # the trace's struct is not this order's
    not_after = pc.fill_null(at_or_beyond(here, there, below=side == HIGH), True)
    out = pc.or_(
        pc.less(joined.column(DIFF), 0), pc.and_(pc.is_valid(joined.column(LIVE)), not_after)
    )
    out = pc.or_(out, any_nan([*here, *there]))
    hit = joined.filter(out).select([*key, KEY_HASH])
    return hit.group_by([*key, KEY_HASH]).aggregate([])


def _appended(
    rows: DataFrame, before: DataFrame, key: Sequence[str], running: Running, schema: StructType
) -> DataFrame:
    """Each new row with its partition's totals ``before`` (accumulated counts and
    sums) combined with the new rows' own running aggregate up to it, every row
    once per unit of multiplicity, as the window numbers them."""
    data = [c for c in rows.columns if c not in (TIME, DIFF)]
    acc = sql_text.select(rows, [*map(quote, data), f"{quote(TIME)} AS {quote(AT)}", quote(DIFF)])
    ties = orderable(acc.schema, data)
    prefixes = [
        f"{partitioned(window_call(c.text), [*key, AT], ties)} AS {quote(f'__prefix_{i}')}"
        for i, c in enumerate(running.calls)
    ]
    evaluated = sql_text.select(each_copy(acc), [*map(quote, data), quote(AT), *prefixes])
    joined = null_safe_join(evaluated, before, key, how="left")
    values = [
        f"CAST({_combined(c, f'__prefix_{i}')} AS {schema[c.name].dataType.simpleString()})"
        f" AS {quote(c.name)}"
        for i, c in enumerate(running.calls)
    ]
    out = [*data, *(c.name for c in running.calls), TIME]
    at = f"{quote(AT)} AS {quote(TIME)}"
    valued = sql_text.select(joined, [*map(quote, data), *values, at])
    return sql_text.group(valued, out, [f"count(1) AS {quote(DIFF)}"])


def _combined(call: RunningCall, prefix: str) -> str:
    """SQL for the call's value: the totals before ⊕ the new rows' prefix."""
    p = quote(prefix)
    if call.argument is None:
        return f"coalesce({quote(ROWS)}, 0) + {p}"
    counted = f"coalesce({quote(nn(call.argument))}, 0)"
    if call.function == "count":
        return f"{counted} + {p}"
    summed = f"{quote(total(call.argument))} + coalesce({p}, 0)"
    return f"CASE WHEN {counted} = 0 THEN {p} ELSE {summed} END"  # NULL until a value is summed
