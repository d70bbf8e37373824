"""Join and reduce inside a loop, one round at a time.

Inside ``iterate`` a time is ``(epoch, i)`` under the product order; inside a
loop nested in it, ``(epoch, i, j)``, and so on. A loop runs one epoch at a
time and, within an epoch, one *round* (one tuple of iterations) at a time in
lexicographic order. That order extends the product order, so when round ``t``
of epoch ``e`` runs, every time of an earlier epoch (committed) and every time
of this epoch lexicographically before ``t`` has been processed. The epoch of
an update is implied by the round; its iterations travel in ``_time1``,
``_time2``…

What the partial order still shows: the join of ``t`` with a time ``s`` seen
earlier is the coordinate-wise max, ``t v s``, which may lie after ``t``. So a
round may produce updates at *later* times, and a reduction's output may have
to change at later times although its input changed only at ``t``. Both are
handled here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.join import matchable_keys, pair
from dd_etl.operators.keys import KeySet
from dd_etl.operators.linear import consolidate
from dd_etl.operators.reduce import AT, Reducer
from dd_etl.trace.columns import DIFF, time_columns

LoopTime = tuple[int, ...]
"""The iterations of a loop time, outermost loop first; its epoch is implied."""

Known = Callable[[KeySet], DataFrame]
"""Given keys, an arrangement's updates for those keys as ``(data, _time1…,
_diff)`` rows; which updates (before this round, or everything seen so far)
depends on the caller."""


def iterations(depth: int) -> list[str]:
    """The iteration columns of a node inside ``depth`` loops."""
    return time_columns(depth + 1)[1:]


def at(t: LoopTime) -> Column:
    """Rows at exactly ``t``."""
    return _all([F.col(c) == v for c, v in zip(iterations(len(t)), t, strict=True)])


def not_after(t: LoopTime) -> Column:
    """Rows at times ``≤ t`` in the product order: those ``t`` accumulates."""
    return _all([F.col(c) <= v for c, v in zip(iterations(len(t)), t, strict=True)])


def earlier(t: LoopTime) -> Column:
    """Rows at times lexicographically before ``t``: those processed before round ``t``."""
    out = F.lit(False)
    for c, v in reversed(list(zip(iterations(len(t)), t, strict=True))):
        out = (F.col(c) < v) | ((F.col(c) == v) & out)
    return out


def later(t: LoopTime) -> Column:
    """Rows at times lexicographically after ``t``: those still to come."""
    return ~earlier(t) & ~at(t)


def with_time(df: DataFrame, t: LoopTime) -> DataFrame:
    return df.select(
        *[c for c in df.columns if c != DIFF],
        *[F.lit(v).cast("long").alias(c) for c, v in zip(iterations(len(t)), t, strict=True)],
        DIFF,
    )


def _all(conditions: list[Column]) -> Column:
    return functools.reduce(lambda a, b: a & b, conditions, F.lit(True))


def loop_join(
    d_left: DataFrame,
    d_right: DataFrame,
    left_before: Known,
    right_before: Known,
    lk: Sequence[str],
    rk: Sequence[str],
    left_columns: Sequence[str],
    right_columns: Sequence[str],
    null_safe: bool,
    depth: int,
) -> DataFrame:
    """Round ``t``: ``ΔA ⋈ (B_before + ΔB) + A_before ⋈ ΔB``, where ``Δ`` are the
    updates at ``t`` and ``before`` everything processed earlier. Each pair lands
    at the join of its two times, possibly after ``t``."""
    before_right = right_before(KeySet.of(matchable_keys(d_left, lk, null_safe)).renamed(rk))
    before_left = left_before(KeySet.of(matchable_keys(d_right, rk, null_safe)).renamed(lk))
    times = iterations(depth)
    first = pair(
        d_left,
        before_right.unionByName(d_right),
        lk,
        rk,
        right_columns,
        left_columns,
        null_safe,
        times,
    )
    second = pair(before_left, d_right, lk, rk, right_columns, left_columns, null_safe, times)
    return first.unionByName(second)


def loop_reduce(
    touched: DataFrame,
    known_input: Known,
    known_output: Known,
    key: Sequence[str],
    input_columns: Sequence[str],
    out_columns: Sequence[str],
    reducer: Reducer,
    t: LoopTime,
) -> tuple[DataFrame, DataFrame]:
    """Round ``t`` of a reduction for the ``touched`` keys (whose input changed at
    ``t``, or that an earlier round scheduled for ``t``).

    Returns the output's correction at ``t``, ``f(In@t) - Out@t`` (both
    accumulated over the times ``≤ t``), and for every touched key the later
    times at which it must be evaluated again: its *interesting times* ``t v s``
    for the times ``s`` of its input and output updates that ``t`` does not
    accumulate. Evaluating at those schedules their joins with the rest in turn,
    so the whole join-closure is visited, in lexicographic order. Between two
    interesting times neither the accumulated input nor the accumulated output
    of the key changes, so they are the only times at which the output can need
    a correction.
    """
    keys = KeySet.of(touched.select(*key))
    inputs = known_input(keys)
    outputs = known_output(keys)
    accumulated = (
        inputs.where(not_after(t))
        .groupBy(*input_columns)
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) > 0)
        .withColumn(AT, F.lit(t[-1]).cast("long"))
    )
    new = reducer(accumulated, key).select(*out_columns, DIFF)
    old = outputs.where(not_after(t)).select(*out_columns, (-F.col(DIFF)).alias(DIFF))
    correction = with_time(consolidate(new.unionByName(old)), t)
    cols = iterations(len(t))
    later = (
        inputs.select(*key, *cols)
        .unionByName(outputs.select(*key, *cols))
        .where(~not_after(t))
        .select(*key, *[F.greatest(c, F.lit(v)).alias(c) for c, v in zip(cols, t, strict=True)])
        .distinct()
    )
    return correction, later
