"""Join and reduce inside a loop, one round at a time.

Inside ``iterate`` a time is ``(epoch, iteration)`` under the product order. A
loop runs one epoch at a time and, within an epoch, one iteration (a *round*)
at a time. That order extends the product order, so when round ``i`` of epoch
``e`` runs, every time ``(e', j)`` with ``e' < e`` (earlier epochs, committed)
and every ``(e, j)`` with ``j < i`` (earlier rounds) has been processed. The
epoch of an update is implied by the round; its iteration travels in
``_time1``.

What the partial order still shows: the join of ``(e, i)`` with a time ``(e',
j)`` of an earlier epoch is ``(e, max(i, j))``. So a round may produce updates
at *later* iterations, and a reduction's output may have to change at later
iterations although its input changed only at ``i``. Both are handled here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.join import join_keys, pair
from dd_etl.operators.linear import consolidate
from dd_etl.operators.reduce import AT, Reducer
from dd_etl.trace.columns import DIFF, time_columns

ITER = time_columns(2)[1]
"""The iteration coordinate of a loop time."""

Known = Callable[[DataFrame], DataFrame]
"""Given key columns, an arrangement's updates for those keys as ``(data,
_time1, _diff)`` rows; which updates (before this round, or everything seen so
far) depends on the caller."""


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
) -> DataFrame:
    """Round ``i``: ``ΔA ⋈ (B_before + ΔB) + A_before ⋈ ΔB``, where ``Δ`` are the
    updates at iteration ``i`` and ``before`` everything processed earlier. Each
    pair lands at the later of its two iterations, possibly after ``i``."""
    before_right = right_before(join_keys(d_left, lk, null_safe).toDF(*rk))
    before_left = left_before(join_keys(d_right, rk, null_safe).toDF(*lk))
    times = (ITER,)
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
    iteration: int,
) -> tuple[DataFrame, DataFrame]:
    """Round ``i`` of a reduction for the ``touched`` keys (whose input changed at
    ``i``, or that an earlier round scheduled for ``i``).

    Returns the output's correction at ``(e, i)``, ``f(In@(e, i)) - Out@(e, i)``,
    and for every touched key the next iteration at which it must be evaluated
    again. Those are the key's *interesting times*: the joins of ``(e, i)`` with
    the times of its earlier input and output updates, ``(e, max(i, j))``. Only
    the next one is kept: evaluating there schedules the one after it.
    Between two interesting times neither the accumulated input nor the
    accumulated output of the key changes, so they are the only times at which
    the output can need a correction.
    """
    keys = touched.select(*key).distinct()
    inputs = known_input(keys)
    outputs = known_output(keys)
    accumulated = (
        inputs.where(F.col(ITER) <= iteration)
        .groupBy(*input_columns)
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) > 0)
        .withColumn(AT, F.lit(iteration).cast("long"))
    )
    new = reducer(accumulated, key).select(*out_columns, DIFF)
    old = outputs.where(F.col(ITER) <= iteration).select(*out_columns, (-F.col(DIFF)).alias(DIFF))
    correction = consolidate(new.unionByName(old)).withColumn(ITER, F.lit(iteration).cast("long"))
    later = (
        inputs.select(*key, ITER)
        .unionByName(outputs.select(*key, ITER))
        .where(F.col(ITER) > iteration)
        .groupBy(*key)
        .agg(F.min(ITER).alias(ITER))
    )
    return correction, later
