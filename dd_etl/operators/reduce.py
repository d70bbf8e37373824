"""Reductions per key, recomputed only for the keys a change touches.

For a touched key with interesting times ``e1 < e2 < … < em`` in the interval
(the times of its input changes; epochs are totally ordered), the output
changes are ``f(In≤e_i) - f(In≤e_{i-1})`` at ``e_i``, with ``f(In≤e_0)`` the
output the key had before the interval (read from the reduction's own trace).
The differences telescope, so the output accumulated at any ``e`` is
``f(In≤e)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl import sql_text
from dd_etl.operators.join import HISTORY_TIME, History
from dd_etl.operators.partitions import join, union
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME

AT = "__at"
NEXT = "__next"
LOW = "__min"
HIGH = "__max"
EXTREMES = ((LOW, "min"), (HIGH, "max"))
"""The columns a ``min_max`` reduction may carry, each with its aggregate."""

Reducer = Callable[[DataFrame, Sequence[str]], DataFrame]
"""``f``: accumulated input (key, data, ``__at``, positive ``_diff``) to output
rows (output columns, ``__at``, ``_diff``) grouped by key and ``__at``."""


def distinct(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    return sql_text.select(acc, [*map(quote, key), quote(AT), _ONCE])


def counter(name: str) -> Reducer:
    def count(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        return _per_key(acc, key, [f"sum({quote(DIFF)}) AS {quote(name)}"])

    return count


def extreme(kind: str, value: str) -> Reducer:
    """MIN or MAX of ``value`` per key (one level of a hierarchical reduction)."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        return _per_key(acc, key, [f"{kind}({quote(value)}) AS {quote(value)}"])

    return reduce


def min_max(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    """The least ``__min`` and the greatest ``__max`` per key, of the two the
    input carries: MIN and MAX carried up one hierarchy of reductions together,
    or one side alone (a first row per key)."""
    return _per_key(acc, key, [f"{f}({side}) AS {side}" for side, f in sides(acc.columns)])


def sides(columns: Sequence[str]) -> list[tuple[str, str]]:
    """The extremes (``__min``, ``__max``) among ``columns``, each with its aggregate."""
    return [(side, f) for side, f in EXTREMES if side in columns]


def collapse(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    """Per key, each column's largest value: for rows that each fill in different
    columns of one key (NULL elsewhere), the one row holding all of them."""
    data = [quote(c) for c in acc.columns if c not in (*key, AT, DIFF)]
    return _per_key(acc, key, [f"max({c}) AS {c}" for c in data])


_ONCE = f"CAST(1 AS BIGINT) AS {quote(DIFF)}"


def _per_key(acc: DataFrame, key: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
    """Per key and time ``__at``: the key, ``aggregates`` and a multiplicity of 1."""
    return sql_text.select(sql_text.group(acc, [*key, AT], aggregates), ["*", _ONCE])


def each_copy(acc: DataFrame) -> DataFrame:
    """Every row as often as its multiplicity (without ``_diff``): what a
    function of a bag reads, where equal rows count one by one."""
    data = [quote(c) for c in acc.columns if c not in (AT, DIFF)]
    copy = f"explode(sequence(1, {quote(DIFF)})) AS __copy"
    return sql_text.select(acc, [*data, quote(AT), copy]).drop("__copy")


def aggregation(calls: Sequence[tuple[str, str]]) -> Reducer:
    """Spark SQL aggregate calls (``percentile(x, 0.5)``, ``collect_set(x)``, any
    Spark has) over each key's rows: exact, re-evaluated over the touched keys."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        return _per_key(each_copy(acc), key, [f"{text} AS {quote(name)}" for name, text in calls])

    return reduce


Numbering = Literal["row_number", "rank", "dense_rank"]
"""How ``top_k`` counts the first ``k``: rows one by one, or ranks shared by ties."""


def top_k(
    order: Sequence[tuple[str, bool]], k: int, numbering: Numbering = "row_number"
) -> Reducer:
    """The rows per key numbered at most ``k`` by ``order`` (SQL ORDER BY … LIMIT per
    group, or, by ``rank``/``dense_rank``, with ties), counting each row as often
    as its multiplicity; ``row_number`` breaks ties by the whole row so the
    result is deterministic. Taken per bucket of a key, then of the buckets'
    rows, either ranking keeps the same rows: a row's rank counts only rows
    strictly before it, and those rank before it in their buckets too."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        data = [c for c in acc.columns if c not in (AT, DIFF)]
        copies = each_copy(acc)
        ordering = [F.col(c).desc() if desc else F.col(c).asc() for c, desc in order]
        ties = data if numbering == "row_number" else []
        window = Window.partitionBy(*key, AT).orderBy(*ordering, *ties)
        number = getattr(F, numbering)().over(window)
        kept = copies.withColumn("__rank", number).where(F.col("__rank") <= k)
        return kept.groupBy(*data, AT).agg(F.count(F.lit(1)).alias(DIFF))

    return reduce


def threshold(multiplicity: str) -> Reducer:
    """Each distinct row with its multiplicity mapped through a SQL expression of ``_diff``."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        data = [c for c in acc.columns if c not in (AT, DIFF)]
        mapped = acc.select(*data, AT, F.expr(multiplicity).cast("long").alias(DIFF))
        return mapped.where(F.col(DIFF) != 0)

    return reduce


def pandas_reduce(function: Callable[[Any], Any], schema: StructType) -> Reducer:
    """A general reduction in Python, vectorised: ``function`` gets one key's rows as
    a pandas DataFrame (data columns and ``_diff``, the multiplicity) and returns
    the key's output rows, optionally with their own ``_diff``."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        out = StructType(
            [*schema.fields, StructField(AT, LongType()), StructField(DIFF, LongType())]
        )

        def apply(group: Any) -> Any:
            at = int(group[AT].iloc[0])
            rows = function(group.drop(columns=[AT]).reset_index(drop=True))
            rows = rows.copy()
            if DIFF not in rows.columns:
                rows[DIFF] = 1
            rows[AT] = at
            return rows[[*schema.fieldNames(), AT, DIFF]]

        return acc.groupBy(*key, AT).applyInPandas(apply, out)

    return reduce


_SIDES = ("__left", "__right")
"""The sides of a ``null_safe_join``, named for its condition and select list."""


def null_safe_join(
    left: DataFrame,
    right: DataFrame,
    key: Sequence[str],
    how: str = "inner",
    hash_right: bool = True,
) -> DataFrame:
    """Join on ``key`` treating NULL as a value: grouping keys, unlike join keys, may
    be NULL. ``right``, the side with the touched keys, is hashed (``partitions.join``).
    The rows are ``left``'s columns and ``right``'s others, made by one analysed
    plan: the sides named, not their keys renamed and dropped again."""
    mine, theirs = (quote(side) for side in _SIDES)
    # One group (no key): every row matches, with both sides' columns.
    cond = " AND ".join(f"{mine}.{quote(k)} <=> {theirs}.{quote(k)}" for k in key) or "TRUE"
    columns = None
    if key and how not in ("left_semi", "left_anti"):
        others = [f"{theirs}.{quote(c)}" for c in right.columns if c not in key]
        columns = [f"{mine}.*", *others]
    hashed = hash_right and bool(key)
    return join(left, right, cond, how, hash_right=hashed, aliases=_SIDES, select=columns)


def delta_reduce(
    d_in: DataFrame,
    input_history: History,
    output_history: History,
    key: Sequence[str],
    out_columns: Sequence[str],
    reducer: Reducer,
    one_time: bool = False,
) -> DataFrame:
    """The reduction's output changes for the keys ``d_in`` touches. The histories
    may be given as raw updates, unconsolidated and with rows of other keys: every
    history row is joined on its key and summed here (and a batch is consolidated
    as it is written). ``one_time``: all of ``d_in`` is at one time (an interval
    of one epoch, the common case), so no key has a next time to order."""
    names = [c for c in d_in.columns if c not in (TIME, DIFF)]
    data = [quote(c) for c in names]
    keyed = [quote(k) for k in key]
    out = [quote(c) for c in out_columns]
    at, time, diff, later = quote(AT), quote(TIME), quote(DIFF), quote(NEXT)
    times = sql_text.select(d_in, [*keyed, f"{time} AS {at}"]).distinct()
    keys = sql_text.select(times, keyed)
    if not one_time:
        keys = keys.distinct()
        partition = f"PARTITION BY {', '.join(keyed)} " if key else ""
        order = f"OVER ({partition}ORDER BY {at})"
        times = sql_text.select(
            times,
            [*keyed, at, f"lead({at}) {order} AS {later}", f"row_number() {order} = 1 AS __first"],
        )
    hist = sql_text.select(
        input_history(keys), [*data, f"CAST({HISTORY_TIME} AS BIGINT) AS {time}", diff]
    )
    updates = union(hist, sql_text.select(d_in, [*data, time, diff]))
    reached = null_safe_join(updates, sql_text.select(times, [*keyed, at]), key)
    summed = sql_text.group(
        reached.where(f"{time} <= {at}"), [*names, AT], [f"sum({diff}) AS {diff}"]
    )
    acc = summed.where(f"{diff} > 0")
    result = sql_text.select(reducer(acc, key), [*out, at, diff])
    if one_time:
        changes = sql_text.select(result, [*out, f"{at} AS {time}", diff])
        first = sql_text.select(times, [*keyed, f"{at} AS {time}"])
    else:
        # +f at each interesting time, -f at the next one, from one pass over f
        shifted = null_safe_join(result, sql_text.select(times, [*keyed, at, later]), [*key, AT])
        signed = [("TRUE", [at, diff]), (f"{later} IS NOT NULL", [later, f"-{diff}"])]
        changes = sql_text.select(shifted, [*out, sql_text.rows_where(signed, [TIME, DIFF])])
        first = sql_text.select(times.where("__first"), [*keyed, f"{at} AS {time}"])
    # -(output before the interval) at each key's first interesting time
    before = null_safe_join(output_history(keys), first, key)
    retract = sql_text.select(before, [*out, time, f"-{diff} AS {diff}"])
    return union(changes, retract)
