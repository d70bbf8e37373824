"""Window functions as a reduction keyed by their partition.

A window function's value on a row depends on the other rows of its partition
only, so the partition is the reduction's key: a change re-evaluates the
partitions it touches, at each time it touches them, and nothing else. Spark
evaluates each call over the accumulated rows of those partitions, every row
once per unit of multiplicity (``ROW_NUMBER`` numbers two equal rows 1 and 2);
equal output rows are counted back into one row with a multiplicity.

The calls are Spark SQL without ``PARTITION BY``: the reduction supplies it,
as the key and the time (``__at``) the rows were accumulated to. Functions
that number rows one by one (``ROW_NUMBER``, ``LAG``, ``NTILE``, any ``ROWS``
frame) order ties by the whole row, so re-evaluating a partition gives the
same answer each time; functions over peers (``RANK``, ``RANGE`` frames) need
no tie-break and get none, as one would change which rows are peers.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql.types import MapType, StructType
from sqlglot import exp
from sqlglot.errors import ParseError

from dd_etl import sql_text
from dd_etl.errors import PlanError
from dd_etl.operators.reduce import AT, Reducer, each_copy
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF

ROW_BY_ROW = (exp.RowNumber, exp.Lag, exp.Lead, exp.Ntile, exp.NthValue)
"""Functions whose value depends on the order of tied rows."""

Call = tuple[str, str]
"""An output column and the Spark SQL window call computing it."""


def window_call(text: str) -> exp.Window:
    """``text`` parsed as one window call without ``PARTITION BY``, or a PlanError."""
    try:
        node = sqlglot.parse_one(text, read="spark")
    except ParseError as e:
        raise PlanError(f"window: cannot parse {text!r}: {e}") from e
    if not isinstance(node, exp.Window):
        raise PlanError(f"window: {text!r} is not a window call (function OVER (...))")
    if node.args.get("partition_by"):
        raise PlanError(f"window: {text!r} names its partition; the window's key is its partition")
    return node


def partitioned(call: exp.Window, partition: Sequence[str], ties: Sequence[str]) -> str:
    """The call over ``PARTITION BY partition``, with ``ties`` appended to its
    order where the function numbers rows one by one."""
    out = call.copy()
    out.set("partition_by", [_column(c) for c in partition])
    if _row_by_row(out) and ties:
        order = out.args.get("order") or exp.Order(expressions=[])
        tie_break = [exp.Ordered(this=_column(c), nulls_first=True) for c in ties]
        out.set("order", exp.Order(expressions=[*order.expressions, *tie_break]))
    return out.sql(dialect="spark")


def _row_by_row(call: exp.Window) -> bool:
    function = call.this
    while isinstance(function, exp.IgnoreNulls | exp.RespectNulls):
        function = function.this
    spec = call.args.get("spec")
    rows = spec is not None and str(spec.args.get("kind", "")).upper() == "ROWS"
    return rows or isinstance(function, ROW_BY_ROW)


def _column(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def window(calls: Sequence[Call]) -> Reducer:
    """Each partition's rows (each as often as its multiplicity) with the calls'
    values as columns, equal rows counted together."""
    parsed = [(name, window_call(text)) for name, text in calls]

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        data = [c for c in acc.columns if c not in (AT, DIFF)]
        ties = orderable(acc.schema, data)
        copies = each_copy(acc)
        values = [
            f"{partitioned(call, [*key, AT], ties)} AS {quote(name)}" for name, call in parsed
        ]
        evaluated = sql_text.select(copies, [*map(quote, data), quote(AT), *values])
        columns = [*data, *(name for name, _ in parsed), AT]
        return sql_text.group(evaluated, columns, [f"count(1) AS {quote(DIFF)}"])

    return reduce


def orderable(schema: StructType, columns: Sequence[str]) -> list[str]:
    """The columns Spark can sort by (not maps)."""
    return [c for c in columns if not isinstance(schema[c].dataType, MapType)]
