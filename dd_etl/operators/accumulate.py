"""In-place accumulation of sums per key: SQL COUNT, SUM and AVG.

The state of a key is ``(rows, nn_c, sum_c)`` for every value column ``c``: the
number of rows, of non-NULL values, and their sum. It is additive, so changes
update it without reading the input's history: the new state at each time a key
changes is the state before the interval plus the running sum of its changes.
The three counts tell SQL's cases apart: no rows (no group), rows but no
non-NULL value (SUM and AVG are NULL), and values.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType

from dd_etl import sql_text
from dd_etl.operators.join import History
from dd_etl.operators.reduce import AT, Reducer, null_safe_join
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME

ROWS = "__rows"


def nn(column: str) -> str:
    return f"__nn_{column}"


def total(column: str) -> str:
    return f"__sum_{column}"


def state_columns(values: Sequence[str]) -> list[str]:
    return [ROWS, *[c for v in values for c in (nn(v), total(v))]]


def contributions(d_in: DataFrame, key: Sequence[str], values: Sequence[str]) -> DataFrame:
    """What the changes at each time add to each key's state. Only numbers have a
    sum; other columns can only be counted, and their sum stays NULL."""
    diff = quote(DIFF)
    parts = [f"sum({diff}) AS {quote(ROWS)}"]
    for v in values:
        numeric = isinstance(d_in.schema[v].dataType, NumericType)
        added = f"sum({quote(v)} * {diff})" if numeric else "CAST(NULL AS BIGINT)"
        parts += [
            f"sum(CASE WHEN {quote(v)} IS NOT NULL THEN {diff} ELSE 0 END) AS {quote(nn(v))}",
            f"{added} AS {quote(total(v))}",
        ]
    return sql_text.group(d_in, [*key, TIME], parts)


def accumulation(values: Sequence[str]) -> Reducer:
    """The accumulation recomputed per key from its accumulated input, as a
    reduction: how a loop keeps COUNT/SUM, whose times are only partially ordered,
    so no running sum in time order exists."""

    def accumulate(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        at = contributions(acc.withColumnRenamed(AT, TIME), key, values)
        return at.withColumnRenamed(TIME, AT).withColumn(DIFF, F.lit(1).cast("long"))

    return accumulate


def delta_accumulate(
    d_in: DataFrame,
    output_history: History,
    key: Sequence[str],
    values: Sequence[str],
    one_time: bool = False,
) -> DataFrame:
    """The changes of the accumulated state from the changes ``d_in``: at each time
    a key changes, its new state inserted and its previous one retracted.
    ``one_time``: all of ``d_in`` is at one time (an interval of one epoch, the
    common case), so each key changes once, from its state before the interval,
    and no running sum in time order is needed."""
    state = state_columns(values)
    changes = contributions(d_in, key, values)
    keys = sql_text.columns(changes, key).distinct()
    before = sql_text.select(
        output_history(keys), [*map(quote, key), *[f"{quote(c)} AS {_before(c)}" for c in state]]
    )
    base = null_safe_join(changes, before, key, "left")
    names = [*map(quote, key), quote(TIME)]
    if one_time:
        steps = sql_text.select(
            base,
            [
                *names,
                *[f"{_add(quote(c), _before(c))} AS {quote(c)}" for c in state],
                *[f"{_before(c)} AS {_previous(c)}" for c in state],
            ],
        )
    else:
        steps = _steps(base, key, names, state)
    # the new state inserted, the previous one retracted, from one pass over steps
    time = quote(TIME)
    signed = [
        (f"{quote(ROWS)} > 0", [*map(quote, state), time, "CAST(1 AS BIGINT)"]),
        (f"{_previous(ROWS)} > 0", [*map(_previous, state), time, "CAST(-1 AS BIGINT)"]),
    ]
    rows = sql_text.rows_where(signed, [*state, TIME, DIFF])
    return sql_text.select(steps, [*map(quote, key), rows])


def _steps(base: DataFrame, key: Sequence[str], names: list[str], state: list[str]) -> DataFrame:
    """Per key and time of ``base`` (contributions beside the state before), the
    state after the changes up to that time and the state just before them."""
    partition = f"PARTITION BY {', '.join(map(quote, key))} " if key else ""
    order = f"OVER ({partition}ORDER BY {quote(TIME)})"
    running = f"OVER ({partition}ORDER BY {quote(TIME)} {_UP_TO_NOW})"
    now = sql_text.select(
        base,
        [
            *names,
            *[f"{_add(f'sum({quote(c)}) {running}', _before(c))} AS {quote(c)}" for c in state],
            *[_before(c) for c in state],
            f"row_number() {order} = 1 AS __first",
        ],
    )
    previous = [
        f"CASE WHEN __first THEN {_before(c)} ELSE lag({quote(c)}) {order} END AS {_previous(c)}"
        for c in state
    ]
    return sql_text.select(now, [*names, *map(quote, state), *previous])


_UP_TO_NOW = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"


def _before(column: str) -> str:
    return quote(f"__b{column}")


def _previous(column: str) -> str:
    return quote(f"__p{column}")


def _add(running: str, before: str) -> str:
    """``running + before`` where a key with no earlier state starts from zero.

    A sum over only NULL values is NULL; it stays NULL until a value arrives.
    """
    return (
        f"CASE WHEN {before} IS NULL THEN {running} WHEN {running} IS NULL THEN {before} "
        f"ELSE {running} + {before} END"
    )
