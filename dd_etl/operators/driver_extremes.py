"""A MIN/MAX reduction's batch made by the driver, from the stored rows it reads.

Where an interval's rows pass through the driver, the batch of a MIN/MAX level
(``operators/extremes.py``) follows from rows Spark computed and the driver
reads anyway to tell which keys a retraction reaches: the input's change, the
reduction's current rows for the keys it touches and, for the keys reached,
their history. Taking the least and the greatest of values Spark produced is an
ordering of them, like a sort or a merge, not an expression evaluated again;
the driver does it in a millisecond, where the plan ``delta_extremes`` makes is
about a hundred operators for Spark to analyse, optimise and run in every epoch.

The formulas are ``delta_extremes``'s: a touched key whose hash no retraction
reaches (``reached``, per hash) has its current extremes widened by its
insertions; the others are reduced again from their history and change; each
touched key's current row is retracted and its new one inserted, and equal
pairs cancel. Only values Arrow orders as Spark does and groups (no nested
type, no NaN): for others the caller leaves the batch to Spark.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dd_etl.operators.reduce import EXTREMES, sides
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.driver_merge import consolidated, summed


def reducible(tables: Sequence[pa.Table], out_columns: Sequence[str]) -> bool:
    """Whether the extremes the tables carry hold no NaN, which Spark orders above
    every number and Arrow does not compare. (The caller checks the types.)"""
    carried = [side for side, _ in sides(out_columns)]
    values = [t.column(side) for t in tables for side in carried]
    floats = [v for v in values if pa.types.is_floating(v.type)]
    return not any(pc.any(pc.is_nan(v)).as_py() for v in floats)


def extremes_batch(
    changes: pa.Table,
    current: pa.Table,
    reached: pa.Array,
    history: pa.Table,
    key: Sequence[str],
    out_columns: Sequence[str],
    at: int,
) -> pa.Table:
    """The batch of a ``min_max`` reduction whose input changed at ``at`` alone, in
    the stored layout (``out_columns``, key hash, time, diff; consolidated,
    ordered by key hash). ``changes``: the input's stored rows at ``at``;
    ``current``: the reduction's stored rows before ``at`` for the key hashes
    ``changes`` touches; ``reached``: the key hashes whose keys are reduced
    again; ``history``: the input's stored rows before ``at`` for those
    hashes. Every table may hold rows of keys sharing a hash with another's."""
    carried = [side for side, _ in sides(out_columns)]
    keyed = [*key, KEY_HASH]
    touched = changes.select(keyed).group_by(keyed, use_threads=False).aggregate([])
    live = _of_keys(_present(current, [*out_columns, KEY_HASH]), touched, key)
    hit = pc.is_in(changes.column(KEY_HASH), value_set=reached)
    again = _present(
        _concat(
            _of_keys(history, touched, key).select([*keyed, *carried, DIFF]),
            changes.filter(hit).select([*keyed, *carried, DIFF]),
        ),
        [*keyed, *carried],
    )
    kept = pc.invert(pc.is_in(live.column(KEY_HASH), value_set=reached))
    gained = changes.filter(pc.and_(pc.invert(hit), pc.greater(changes.column(DIFF), 0)))
    widened = _concat(
        live.filter(kept).select([*keyed, *carried]), gained.select([*keyed, *carried])
    )
    new = _concat(_extremes(again, key, carried), _extremes(widened, key, carried))
    old = live.select([*out_columns, KEY_HASH])
    return consolidated(
        _concat(_stamped(new.select([*out_columns, KEY_HASH]), at, 1), _stamped(old, at, -1))
    )


def _concat(*tables: pa.Table) -> pa.Table:
    """The rows of ``tables``, whose columns may differ in nullability (they come
    from the input's trace and the reduction's)."""
    return pa.concat_tables(tables, promote_options="permissive")


def _present(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The distinct rows of ``columns`` whose updates sum to a positive count."""
    summed_rows = summed(rows.select([*columns, DIFF]))
    return summed_rows.filter(pc.greater(summed_rows.column(DIFF), 0)).select(list(columns))


def _of_keys(rows: pa.Table, keys: pa.Table, key: Sequence[str]) -> pa.Table:
    """The rows of ``rows`` whose key is one of ``keys`` (distinct key columns and
    key hash): joined by hash, then each key column compared as a grouping
    compares it (NULL equal to NULL)."""
    theirs = [f"__key{i}" for i in range(len(key))]
    named = keys.rename_columns([*theirs, KEY_HASH])
    joined = rows.join(named, KEY_HASH, join_type="inner", use_threads=False)
    same = pa.array([True] * joined.num_rows, pa.bool_())
    for mine, other in zip(key, theirs, strict=True):
        a, b = joined.column(mine), joined.column(other)
        equal = pc.or_kleene(
            pc.and_(pc.is_null(a), pc.is_null(b)), pc.fill_null(pc.equal(a, b), False)
        )
        same = pc.and_(same, equal)
    return joined.filter(same).select(rows.column_names)


def _extremes(rows: pa.Table, key: Sequence[str], carried: Sequence[str]) -> pa.Table:
    """Per key (and hash) the least ``__min`` and the greatest ``__max`` of ``rows``."""
    kinds = dict(EXTREMES)
    keyed = [*key, KEY_HASH]
    grouped = rows.group_by(keyed, use_threads=False).aggregate(
        [(side, kinds[side]) for side in carried]
    )
    columns = {c: grouped.column(c) for c in keyed}
    columns.update({side: grouped.column(f"{side}_{kinds[side]}") for side in carried})
    return pa.table(columns)


def _stamped(rows: pa.Table, at: int, diff: int) -> pa.Table:
    n = rows.num_rows
    return rows.append_column(TIME, pa.array([at] * n, pa.int64())).append_column(
        DIFF, pa.array([diff] * n, pa.int64())
    )
