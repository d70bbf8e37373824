"""MIN and MAX kept from their current rows where no retraction reaches them
(``operators/extremes.py``): which keys the driver sends back to their history,
and the views epoch by epoch against a from-scratch evaluation."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType, DoubleType, LongType, StructField, StructType

from dd_etl.operators import driver_extremes, extremes
from dd_etl.operators.reduce import HIGH, LOW
from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.runtime import Runtime
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME

NAN = float("nan")


def stored(rows: list[tuple[int, float, float, int, int]]) -> pa.Table:
    """Stored rows of a MIN/MAX level keyed by ``g``: ``(g, min, max, hash, diff)``."""
    g, low, high, hashes, diffs = (list(c) for c in zip(*rows, strict=True))
    return pa.table(
        {
            "g": pa.array(g, pa.int64()),
            LOW: pa.array(low, pa.float64()),
            HIGH: pa.array(high, pa.float64()),
            KEY_HASH: pa.array(hashes, pa.int64()),
            TIME: pa.array([0] * len(rows), pa.int64()),
            DIFF: pa.array(diffs, pa.int64()),
        }
    )


def hit(
    retractions: list[tuple[int, float]], current: pa.Table, hashes: dict[int, int]
) -> set[int]:
    rows = [(g, v, v, hashes[g], -1) for g, v in retractions]
    return set(extremes.reached(stored(rows), current, ["g"]).column("g").to_pylist())


def test_only_retractions_of_an_extreme_send_a_key_to_its_history() -> None:
    hashes = {1: 11, 2: 12, 3: 13, 4: 14}
    current = stored(
        [
            (1, 2.0, 9.0, 11, 1),
            (2, 1.0, 5.0, 12, 1),
            (3, 4.0, 4.0, 13, 1),  # the extremes key 3 had, retracted since
            (3, 4.0, 4.0, 13, -1),
            (3, 3.0, 6.0, 13, 1),
        ]
    )
    assert hit([(1, 5.0)], current, hashes) == set()  # strictly inside: kept
    assert hit([(1, 2.0)], current, hashes) == {1}  # the minimum (maybe one of several)
    assert hit([(2, 5.0)], current, hashes) == {2}  # the maximum
    assert hit([(3, 4.0)], current, hashes) == set()  # only a past extreme
    assert hit([(4, 1.0)], current, hashes) == {4}  # no current row


def test_keys_sharing_a_hash_are_judged_by_the_widest_test() -> None:
    """Key 5's range is 0..10 and key 6's 4..5, both under hash 99: a retraction of
    5's inner value 5 is treated as reaching 6's maximum, which can only cost a
    history read, never a wrong extreme."""
    current = stored([(5, 0.0, 10.0, 99, 1), (6, 4.0, 5.0, 99, 1)])
    hashes = {5: 99, 6: 99}
    assert hit([(5, 4.5)], current, hashes) == set()
    assert hit([(5, 5.0)], current, hashes) == {5}


def test_nan_reaches_every_extreme() -> None:
    """Spark orders NaN above every number; Arrow does not compare it at all."""
    current = stored([(7, 1.0, NAN, 17, 1), (8, 1.0, 9.0, 18, 1)])
    hashes = {7: 17, 8: 18}
    assert hit([(7, 5.0)], current, hashes) == {7}  # its maximum is NaN
    assert hit([(8, NAN)], current, hashes) == {8}


def test_a_first_row_carries_one_side_and_only_it_is_reached() -> None:
    """A first row per key is a ``min_max`` reduction carrying ``__min`` alone:
    a retraction reaches it at or below the minimum, whatever lies above."""
    current = stored([(1, 2.0, 9.0, 11, 1), (2, 1.0, 5.0, 12, 1)]).drop_columns([HIGH])
    retracted = stored([(1, 9.0, 9.0, 11, -1), (2, 1.0, 1.0, 12, -1)]).drop_columns([HIGH])
    assert extremes.reached(retracted, current, ["g"]).column("g").to_pylist() == [2]


ROWS = StructType(
    [StructField("id", LongType()), StructField("g", LongType()), StructField("x", DoubleType())]
)
Row = tuple[Any, ...]


def _spark_order(x: float) -> tuple[bool, float]:
    return (math.isnan(x), 0.0 if math.isnan(x) else x)


def expected(live: Counter[Row]) -> dict[str, Counter[Row]]:
    """MIN and MAX as Spark computes them: NULLs ignored, NaN above every number."""
    groups: dict[Any, list[float]] = {}
    for _, g, x in live.elements():
        if x is not None:
            groups.setdefault(g, []).append(x)
    per_group = Counter(
        (g, min(xs, key=_spark_order), max(xs, key=_spark_order)) for g, xs in groups.items()
    )
    every = [x for xs in groups.values() for x in xs]
    overall = (
        (min(every, key=_spark_order), max(every, key=_spark_order)) if every else (None, None)
    )
    return {"per_group": per_group, "overall": Counter([overall])}


def normal(rows: Counter[Row]) -> Counter[Row]:
    return Counter(
        {
            tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r): n
            for r, n in rows.items()
        }
    )


@pytest.mark.spark
def test_kept_extremes_equal_a_scratch_evaluation(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = Dataflow(spark, tmp_path)
    rows = flow.source("rows", ROWS, key=["id"])
    flow.view("per_group", rows.aggregate(["g"], lo=agg.min_("x"), hi=agg.max_("x")))
    flow.view("overall", rows.aggregate([], lo=agg.min_("x"), hi=agg.max_("x")))
    rt = Runtime(flow)
    kept: list[tuple[int, int]] = []  # per decision: keys retracted from, keys reached
    reached = extremes.reached

    def recorded(retractions: pa.Table, current: pa.Table, key: list[str]) -> pa.Table:
        hit = reached(retractions, current, key)
        touched = retractions.select(key).group_by(key).aggregate([])
        kept.append((touched.num_rows, hit.num_rows))
        return hit

    monkeypatch.setattr(extremes, "reached", recorded)
    made = driver_extremes.extremes_batch
    by_driver: list[int] = []  # the batches the driver made, by epoch

    def made_by_driver(*args: Any, **kwargs: Any) -> pa.Table:
        by_driver.append(epoch)
        return made(*args, **kwargs)

    monkeypatch.setattr(driver_extremes, "extremes_batch", made_by_driver)
    planned = extremes.delta_extremes
    by_spark: list[int] = []  # the batches Spark's plans made, by epoch

    def planned_for_spark(*args: Any, **kwargs: Any) -> DataFrame:
        by_spark.append(epoch)
        return planned(*args, **kwargs)

    monkeypatch.setattr(extremes, "delta_extremes", planned_for_spark)
    rng = random.Random(3)
    live: dict[int, Row] = {}
    full = StructType([*ROWS.fields, StructField(DIFF, LongType())])
    for epoch in range(8):
        changes: list[tuple[Row, int]] = []
        for i in range(len(live) + epoch * 100, len(live) + epoch * 100 + 12):
            x = rng.choice([*range(40), None, NAN] if epoch > 4 else range(40))
            changes.append(((i, rng.randrange(3), float(x) if x is not None else None), 1))
        if live:
            ordered = sorted(live.values(), key=lambda r: (r[2] is None, _spark_order(r[2] or 0.0)))
            gone = {ordered[0], ordered[-1], *rng.sample(ordered, k=min(5, len(ordered)))}
            changes += [(r, -1) for r in gone]
        rt.append_source("rows", spark.createDataFrame([(*r, d) for r, d in changes], full), epoch)
        for r, d in changes:
            if d > 0:
                live[r[0]] = r
            else:
                del live[r[0]]
        rt.run()
        want = expected(Counter(live.values()))
        for view in ("per_group", "overall"):
            got = Counter(tuple(r) for r in rt.read(view).collect())
            assert normal(got) == normal(want[view]), (view, epoch)
    assert any(hits < touched for touched, hits in kept)  # some keys kept their extremes
    assert any(hits > 0 for _, hits in kept)  # and some went back to their history
    # and some changes retracted from keys none of which a retraction reached: their
    # plans widened every key, with nothing of a recomputation in them
    assert any(touched > 0 and hits == 0 for touched, hits in kept)
    # the driver made the batches of the epochs without NaN, Spark's plans some of
    # those with (Arrow does not compare NaN)
    assert set(range(5)) <= set(by_driver) and by_spark and min(by_spark) > 4, by_spark


def _spark_key(row: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is not None, v if v is not None else 0) for v in row)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.tuples(st.none() | st.booleans(), st.none() | st.integers(-3, 3)),
            st.tuples(st.none() | st.booleans(), st.none() | st.integers(-3, 3)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_struct_values_compare_field_by_field_as_spark_orders_them(
    pairs: list[tuple[tuple[Any, Any], tuple[Any, Any]]],
) -> None:
    """A first row's value is a struct: NULL before every value, then field by field."""
    value = [pa.chunked_array([pa.array([p[0][i] for p in pairs])]) for i in range(2)]
    bound = [pa.chunked_array([pa.array([p[1][i] for p in pairs])]) for i in range(2)]
    types = [pa.bool_(), pa.int64()]
    value = [v.cast(t) for v, t in zip(value, types, strict=True)]
    bound = [b.cast(t) for b, t in zip(bound, types, strict=True)]
    below = extremes.at_or_beyond(value, bound, below=True).to_pylist()
    above = extremes.at_or_beyond(value, bound, below=False).to_pylist()
    assert below == [_spark_key(a) <= _spark_key(b) for a, b in pairs]
    assert above == [_spark_key(a) >= _spark_key(b) for a, b in pairs]


def test_a_first_row_struct_is_reached_only_at_or_beyond_the_current_row() -> None:
    """Rows travel as ``struct(flag, order, rest)``: a retraction of the current
    greatest row reaches it, one of a lesser row does not."""
    row = pa.struct([("flag", pa.bool_()), ("at", pa.int64()), ("id", pa.int64())])

    def table(rows: list[tuple[int, dict[str, Any], int]]) -> pa.Table:
        return pa.table(
            {
                "g": pa.array([r[0] for r in rows], pa.int64()),
                HIGH: pa.array([r[1] for r in rows], row),
                KEY_HASH: pa.array([r[0] + 10 for r in rows], pa.int64()),
                TIME: pa.array([0] * len(rows), pa.int64()),
                DIFF: pa.array([r[2] for r in rows], pa.int64()),
            }
        )

    top = {"flag": True, "at": 9, "id": 4}
    current = table([(1, top, 1), (2, {"flag": True, "at": 5, "id": 1}, 1)])
    retracted = table(
        [(1, {"flag": True, "at": 9, "id": 3}, -1), (2, {"flag": True, "at": 5, "id": 1}, -1)]
    )
    assert extremes.comparable(
        StructType([StructField("flag", BooleanType()), StructField("at", LongType())])
    )
    assert extremes.reached(retracted, current, ["g"]).column("g").to_pylist() == [2]


def test_nested_struct_values_are_compared_by_their_innermost_fields() -> None:
    inner = pa.struct([("at", pa.int64())])
    row = pa.struct([("flag", pa.bool_()), ("when", inner)])

    def table(rows: list[tuple[int, int, int]]) -> pa.Table:
        values = [{"flag": True, "when": {"at": at}} for _, at, _ in rows]
        return pa.table(
            {
                "g": pa.array([g for g, _, _ in rows], pa.int64()),
                LOW: pa.array(values, row),
                KEY_HASH: pa.array([g + 10 for g, _, _ in rows], pa.int64()),
                TIME: pa.array([0] * len(rows), pa.int64()),
                DIFF: pa.array([d for _, _, d in rows], pa.int64()),
            }
        )

    current = table([(1, 3, 1), (2, 3, 1)])
    retracted = table([(1, 3, -1), (2, 4, -1)])  # key 1's least row, a row above key 2's
    assert extremes.reached(retracted, current, ["g"]).column("g").to_pylist() == [1]


def _levels(rows: list[tuple[Any, int, int]], hash_of: dict[Any, int]) -> pa.Table:
    """Input rows ``(g, x, diff)`` of a MIN/MAX level keyed by ``g`` as stored."""
    return pa.table(
        {
            "g": pa.array([g for g, _, _ in rows], pa.int64()),
            LOW: pa.array([x for _, x, _ in rows], pa.int64()),
            HIGH: pa.array([x for _, x, _ in rows], pa.int64()),
            KEY_HASH: pa.array([hash_of[g] for g, _, _ in rows], pa.int64()),
            TIME: pa.array([0] * len(rows), pa.int64()),
            DIFF: pa.array([d for _, _, d in rows], pa.int64()),
        }
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.none() | st.integers(0, 4), st.integers(-5, 5)), max_size=25),
    st.lists(st.tuples(st.none() | st.integers(0, 5), st.integers(-5, 5)), max_size=8),
    st.lists(st.integers(0, 24), max_size=6),
)
def test_the_drivers_batch_equals_the_extremes_before_and_after(
    before: list[tuple[Any, int]], added: list[tuple[Any, int]], removed: list[int]
) -> None:
    """Keys share hashes (and NULL is a key): the batch retracts each touched key's
    extremes before the change and inserts those after it, whichever way the
    driver finds them (widened, or reduced again from the history)."""
    hash_of = {None: 7, 0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 1}
    gone = sorted({i for i in removed if i < len(before)})
    after = [r for i, r in enumerate(before) if i not in gone] + added

    def extremes_of(rows: list[tuple[Any, int]]) -> dict[Any, tuple[int, int]]:
        groups: dict[Any, list[int]] = {}
        for g, x in rows:
            groups.setdefault(g, []).append(x)
        return {g: (min(xs), max(xs)) for g, xs in groups.items()}

    old, new = extremes_of(before), extremes_of(after)
    changes = _levels(
        [(g, x, 1) for g, x in added] + [(*before[i], -1) for i in gone], hash_of
    ).set_column(4, TIME, pa.array([1] * (len(added) + len(gone)), pa.int64()))
    current = _levels([(g, lo, 1) for g, (lo, _) in old.items()], hash_of)
    current = current.set_column(2, HIGH, pa.array([hi for _, hi in old.values()], pa.int64()))
    current = pa.concat_tables([current, _levels([(0, 99, 1), (0, 99, -1)], hash_of)])
    reached = extremes.reached(changes.filter(pa.compute.less(changes[DIFF], 0)), current, ["g"])
    hashes = sorted(set(reached.column(KEY_HASH).to_pylist()))
    history = _levels([(g, x, 1) for g, x in before], hash_of)
    history = history.filter(pa.compute.is_in(history[KEY_HASH], pa.array(hashes, pa.int64())))
    batch = driver_extremes.extremes_batch(
        changes, current, pa.array(hashes, pa.int64()), history, ["g"], ["g", LOW, HIGH], 1
    )
    touched = {g for g, _ in added} | {before[i][0] for i in gone}
    want = Counter(
        {(g, *old[g], hash_of[g], 1, -1): 1 for g in touched if g in old and old[g] != new.get(g)}
        | {(g, *new[g], hash_of[g], 1, 1): 1 for g in touched if g in new and new[g] != old.get(g)}
    )
    got = Counter(tuple(r.values()) for r in batch.to_pylist())
    assert got == want
    assert batch.column(KEY_HASH).to_pylist() == sorted(batch.column(KEY_HASH).to_pylist())
