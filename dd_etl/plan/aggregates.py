"""SQL aggregates over a GROUP BY, factored into independent reductions.

``Aggregate`` says what to compute; ``build_aggregate`` lays out the dataflow:
one accumulation for every COUNT/SUM/AVG (they share the per-group state
``(rows, non-NULL count, sum)``), one hierarchy of reductions per expression
under MIN or MAX (it carries both), a DISTINCT projection feeding an
accumulation for each DISTINCT aggregate, and one reduction for every other
aggregate Spark has (``call``: re-evaluated over each touched group). The
parts are collapsed into one row per group by a single reduction, which reads
the parts' own traces (each keyed by the group) rather than an arrangement of
their union.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from dd_etl.operators.accumulate import ROWS, nn, total
from dd_etl.operators.linear import Expr, col
from dd_etl.operators.reduce import HIGH, LOW, aggregation
from dd_etl.plan.composable import Composable
from dd_etl.sql_text import cast, quote

Function = Literal["count", "sum", "avg", "min", "max", "call"]
CollectionT = TypeVar("CollectionT", bound=Composable)
"""What an aggregate is built of and returns: the collection API's ``Collection``."""


@dataclass(frozen=True)
class Aggregate:
    function: Function
    expr: Expr | None = None  # None: COUNT(*); for a call, the call itself
    distinct: bool = False
    empty: Any = None  # a call's value over no rows (0 for a count, [] for a list)


def count(expr: Expr | None = None, distinct: bool = False) -> Aggregate:
    return Aggregate("count", expr, distinct)


def sum_(expr: Expr, distinct: bool = False) -> Aggregate:
    return Aggregate("sum", expr, distinct)


def avg(expr: Expr, distinct: bool = False) -> Aggregate:
    return Aggregate("avg", expr, distinct)


def min_(expr: Expr) -> Aggregate:
    return Aggregate("min", expr)


def max_(expr: Expr) -> Aggregate:
    return Aggregate("max", expr)


def call(text: str, empty: Any = None) -> Aggregate:
    """Any Spark SQL aggregate call over the input's columns, e.g.
    ``"percentile(fare, 0.9)"``: exact, as a reduction over each touched group's
    rows. ``empty``: its value over no rows, for an aggregate without groups."""
    return Aggregate("call", text, empty=empty)


def _finish(function: Function, value: str) -> str:
    """The SQL result from an accumulated state: NULL when no non-NULL value was seen.
    As SQL text, like every projection of an aggregate's parts: the collapse applies
    them to its parts' changes and to their histories in every run, and text costs
    a fixed number of JVM calls where columns cost several each."""
    count, sum_ = quote(nn(value)), quote(total(value))
    if function == "count":
        return count
    if function == "sum":
        return f"CASE WHEN {count} > 0 THEN {sum_} END"
    return f"CASE WHEN {count} > 0 THEN {sum_} / {count} END"


GLOBAL_GROUP = "__all"


def build_aggregate(
    source: CollectionT, by: tuple[str, ...], aggregates: dict[str, Aggregate]
) -> CollectionT:
    if by:
        return _grouped(source, by, aggregates)[0]
    # One group holding every row; while it is empty, SQL still gives one row.
    everything = source.select(*source.columns, **{GLOBAL_GROUP: F.lit(0)})
    result, groups = _grouped(everything, (GLOBAL_GROUP,), aggregates)
    rows = result.select(*aggregates)
    schema = rows.node.schema
    defaults = [0 if a.function == "count" else a.empty for a in aggregates.values()]
    empty = source.flow.constant([defaults], schema)
    present = groups.select(
        *(
            F.lit(d).cast(schema[name].dataType).alias(name)
            for name, d in zip(aggregates, defaults, strict=True)
        )
    )
    return rows.concat(empty, present.negate())


def _grouped(
    source: CollectionT, by: tuple[str, ...], aggregates: dict[str, Aggregate]
) -> tuple[CollectionT, CollectionT]:
    """The aggregates per group present, and the group rows they hang off."""
    valued = {n: a for n, a in aggregates.items() if a.expr is not None and a.function != "call"}
    value_of = {name: f"__v{i}" for i, name in enumerate(valued)}
    inputs = {value_of[n]: col(a.expr) for n, a in valued.items() if a.expr is not None}
    projected = source.select(*by, **inputs)

    plain = [
        n for n, a in aggregates.items() if a.function in ("count", "sum", "avg") and not a.distinct
    ]
    plain_values = sorted({value_of[n] for n in plain if n in value_of})
    groups = projected.accumulate(by, plain_values)
    finals: dict[str, str] = {}
    for name in plain:
        a = aggregates[name]
        finals[name] = quote(ROWS) if a.expr is None else _finish(a.function, value_of[name])
    parts = [groups.select(*by, **finals)]
    # MIN and MAX of one expression share one hierarchy, which carries both
    extremes: dict[str, list[str]] = {}
    calls = {n: str(a.expr) for n, a in aggregates.items() if a.function == "call"}
    if calls:
        parts.append(_called(source, by, calls))
    for name, a in aggregates.items():
        if name in finals or name in calls:
            continue
        value = value_of.get(name)
        if value is None:
            raise ValueError(f"aggregate {name!r}: {a.function.upper()}(DISTINCT *) is not SQL")
        if a.function in ("min", "max"):
            extremes.setdefault(str(inputs[value]), []).append(name)
        else:
            distinct = projected.select(*by, value).distinct()
            state = distinct.accumulate(by, [value])
            parts.append(state.select(*by, **{name: _finish(a.function, value)}))
    for names in extremes.values():
        both = projected.extremes(by, value_of[names[0]])
        side = {"min": LOW, "max": HIGH}
        parts.append(both.select(*by, **{m: quote(side[aggregates[m].function]) for m in names}))
    return _collapse(parts, by, list(aggregates)), groups


def _called(source: CollectionT, by: tuple[str, ...], calls: dict[str, str]) -> CollectionT:
    """The calls per group, by one reduction over the groups' rows."""
    named = tuple(calls.items())
    schema = source.flow.reduced_schema(source.node, by, aggregation(named), "aggregate", named)
    return source._reduce(by, "aggregate", schema, calls=named)


def _collapse(parts: list[CollectionT], by: tuple[str, ...], names: list[str]) -> CollectionT:
    """One row per group from parts that each hold at most one row per group and
    some of the columns: pad every part to all columns with NULLs, then keep per
    group each column's one non-NULL value. One reduction, however many parts
    (a join per part would keep two arrangements per part)."""
    if len(parts) == 1:
        return parts[0].select(*by, *names)
    types = {f.name: f.dataType for p in parts for f in p.node.schema.fields if f.name in names}
    padded = [
        p.select(*by, **{c: quote(c) if c in p.columns else cast("NULL", types[c]) for c in names})
        for p in parts
    ]
    union = padded[0].concat(*padded[1:])
    schema = StructType(
        [*(union.node.schema[k] for k in by), *(StructField(c, types[c], True) for c in names)]
    )
    return union._reduce(by, "collapse", schema)
