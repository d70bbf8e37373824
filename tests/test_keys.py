"""Key sets: a lookup by collected keys selects what a null-safe semi-join would,
whichever way the keys are held, and few keys need no join at all."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dd_etl.operators import keys as keys_module
from dd_etl.operators.keys import KeySet
from dd_etl.operators.reduce import null_safe_join

pytestmark = pytest.mark.spark

DATA = StructType(
    [
        StructField("a", LongType()),
        StructField("b", StringType()),
        StructField("v", LongType()),
    ]
)


def _rows(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    def a() -> int | None:
        return None if rng.random() < 0.1 else rng.randrange(40)

    def b() -> str | None:
        return None if rng.random() < 0.1 else rng.choice("xyz")

    return [(a(), b(), rng.randrange(5)) for _ in range(count)]


def _bag(df: DataFrame) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in df.collect())


@pytest.mark.parametrize(
    ("literal", "collected", "held"),
    [(64, 10_000, "literals"), (0, 10_000, "collected frame"), (0, 3, "plan")],
)
@pytest.mark.parametrize("key", [["a"], ["a", "b"]])
def test_a_key_set_selects_what_a_null_safe_semi_join_selects(
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    literal: int,
    collected: int,
    held: str,
    key: list[str],
) -> None:
    monkeypatch.setattr(keys_module, "LITERAL_KEYS", literal)
    monkeypatch.setattr(keys_module, "COLLECTED_KEYS", collected)
    rng = random.Random(7)
    data = spark.createDataFrame(_rows(rng, 300), DATA)
    probe = spark.createDataFrame(_rows(rng, 12), DATA).select(*key)  # repeats, NULLs
    keys = KeySet.of(probe)
    assert (keys.rows is None) == (held == "plan")
    plan = keys.select(data)._jdf.queryExecution().executedPlan().toString()
    if held == "collected frame":
        assert "BroadcastHashJoin" in plan and "SortMergeJoin" not in plan
    expected = null_safe_join(data, probe.distinct(), key, "left_semi")
    assert _bag(keys.select(data)) == _bag(expected)
    if keys.rows is not None:
        assert len(keys.rows) == len(set(keys.rows))


def test_few_keys_filter_without_a_join_and_no_keys_select_nothing(spark: SparkSession) -> None:
    rng = random.Random(3)
    data = spark.createDataFrame(_rows(rng, 100), DATA)
    few = KeySet.of(spark.createDataFrame([(1,), (2,), (None,)], "a long"))
    plan = few.select(data)._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan
    wanted = Counter(r for r in _bag(data).elements() if r[0] in (1, 2, None))
    assert _bag(few.select(data)) == wanted
    none = KeySet.of(spark.createDataFrame([], "a long"))
    assert none.rows == ()
    assert none.select(data).collect() == []


def test_renamed_keys_look_up_the_other_side_of_a_join(spark: SparkSession) -> None:
    data = spark.createDataFrame([(1, "x", 0), (2, "y", 0), (3, "z", 0)], DATA)
    probe = spark.createDataFrame([(1,), (3,)], "node long")
    for keys in (KeySet.of(probe), KeySet(probe.schema, probe)):  # collected, and as a plan
        got = keys.renamed(["a"]).select(data)
        assert sorted(r["a"] for r in got.collect()) == [1, 3]


@pytest.mark.parametrize("how", ["inner", "left", "left_semi", "left_anti"])
def test_a_null_safe_join_matches_null_keys_in_one_analysed_plan(
    spark: SparkSession, how: str
) -> None:
    """NULL grouping keys match each other; the rows are the left side's columns
    and the right side's others, from one plan whose analysis made no
    projection below the join (no renamed keys dropped again)."""
    rng = random.Random(3)
    left_rows, right_rows = _rows(rng, 60), _rows(rng, 20)
    left = spark.createDataFrame(left_rows, DATA)
    right = spark.createDataFrame(
        [(a, b, v * 10) for a, b, v in right_rows], "a long, b string, w long"
    )
    joined = null_safe_join(left, right, ["a", "b"], how)

    ws: dict[tuple[Any, ...], list[int]] = {}
    for a, b, v in right_rows:
        ws.setdefault((a, b), []).append(v * 10)
    expected: Counter[tuple[Any, ...]] = Counter()
    for row in left_rows:
        found = ws.get(row[:2], [])
        if how == "inner":
            expected.update((*row, w) for w in found)
        elif how == "left":
            expected.update((*row, w) for w in found or [None])
        elif (how == "left_semi") == bool(found):
            expected[row] += 1
    assert joined.columns == (["a", "b", "v"] if how.startswith("left_") else ["a", "b", "v", "w"])
    assert _bag(joined) == expected
    analysed = joined._jdf.queryExecution().analyzed().toString()
    assert analysed.count("Project") <= 1, analysed
