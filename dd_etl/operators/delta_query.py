"""Multi-way inner joins as delta queries: no intermediate result is ever stored.

For relations ``R0 ⋈ … ⋈ Rn`` the change over ``[lower, upper)`` is

    Σ_i  R0' ⋈ … ⋈ R(i-1)' ⋈ ΔRi ⋈ R(i+1) ⋈ … ⋈ Rn

where ``R`` is a relation's contents before ``lower`` and ``R' = R + ΔR``: every
combination with at least one change is counted once, by its first changed
relation. Each term starts from one relation's changes and looks the others up
in their arrangements, by the columns it already has, for the keys it already
has; so a small change reads a small part of each input. Output time is the
join (max) of the times, diff the product of the diffs; NULL keys never match.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.join import HISTORY_TIME, History
from dd_etl.operators.partitions import join, union
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME


@dataclass(frozen=True)
class Lookup:
    """Extend a partial result by relation ``relation``, matched on ``key``."""

    relation: int
    key: tuple[str, ...]


def lookup_orders(columns: Sequence[Sequence[str]]) -> tuple[tuple[Lookup, ...], ...]:
    """For each relation, the order in which its changes meet the others: always
    a relation sharing columns with what is bound so far, lowest index first.

    Raises ``ValueError`` when some relation shares no column with the rest (a
    cross product is not an equi-join).
    """
    orders = []
    for start in range(len(columns)):
        bound = set(columns[start])
        todo = [r for r in range(len(columns)) if r != start]
        order = []
        while todo:
            nxt = next((r for r in todo if bound & set(columns[r])), None)
            if nxt is None:
                raise ValueError(f"relations {todo} share no column with relation {start}'s side")
            order.append(Lookup(nxt, tuple(c for c in columns[nxt] if c in bound)))
            bound |= set(columns[nxt])
            todo.remove(nxt)
        orders.append(tuple(order))
    return tuple(orders)


def delta_query(
    deltas: Sequence[DataFrame],
    histories: Callable[[Lookup], History],
    orders: Sequence[Sequence[Lookup]],
    output: Sequence[str],
) -> DataFrame:
    """The output changes: ``deltas[i]`` are relation i's changes, ``histories(l)``
    reads relation ``l.relation`` before the interval, arranged by ``l.key``."""
    at = F.lit(HISTORY_TIME).cast("long")
    terms = []
    for i, order in enumerate(orders):
        partial = deltas[i]
        for step in order:
            probe = partial.select(*step.key).where(
                functools.reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in step.key])
            )
            before = histories(step)(probe.distinct()).withColumn(TIME, at)
            other = before.unionByName(deltas[step.relation]) if step.relation < i else before
            partial = _extend(partial, other, step.key)
        terms.append(partial.select(*output, TIME, DIFF))
    return union(*terms)


def _extend(partial: DataFrame, other: DataFrame, key: Sequence[str]) -> DataFrame:
    cond = " AND ".join(f"p.{quote(k)} = o.{quote(k)}" for k in key) or "TRUE"
    added = [c for c in other.columns if c not in (*partial.columns, TIME, DIFF)]
    data = [c for c in partial.columns if c not in (TIME, DIFF)]
    return join(partial, other, cond, aliases=("p", "o")).select(
        *[F.col(f"p.{c}").alias(c) for c in data],
        *[F.col(f"o.{c}").alias(c) for c in added],
        F.greatest(F.col(f"p.{TIME}"), F.col(f"o.{TIME}")).alias(TIME),
        (F.col(f"p.{DIFF}") * F.col(f"o.{DIFF}")).alias(DIFF),
    )
