"""Node ids name what a definition computes: equal in every process for the same
definition, different when a Python function captures or reads other values."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dd_etl.errors import PlanError
from dd_etl.plan.column_names import ColumnName, column
from dd_etl.plan.fingerprint import canonical, function_id
from dd_etl.sql_syntax import quote

SCALE = 3


def scaled_by(factor: int) -> Callable[[Any], Any]:
    def scale(rows: Any) -> Any:
        return rows.assign(total=rows["value"] * factor)

    return scale


def reads_a_global(rows: Any) -> Any:
    return rows * SCALE


def test_closures_over_different_values_are_different_functions() -> None:
    assert function_id(scaled_by(1)) != function_id(scaled_by(5))
    assert function_id(scaled_by(5)) == function_id(scaled_by(5))


def test_the_globals_a_function_reads_are_part_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = function_id(reads_a_global)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 4)
    assert function_id(reads_a_global) != before


# A function with a comprehension and a lambda: their code objects' repr holds
# memory addresses, which differ from process to process.
NESTED = """
import sys
from dd_etl.plan.fingerprint import function_id

def top(rows):
    keep = [c for c in rows.columns if c != "_diff"]
    pick = lambda df: df[keep]
    return pick(rows)

print(function_id(top))
"""


def test_the_same_function_has_the_same_id_in_every_process() -> None:
    ids = {
        subprocess.run(
            [sys.executable, "-c", NESTED],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent.parent,
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(ids) == 1 and next(iter(ids)).startswith("fn(__main__.top:")


def test_a_function_reading_a_value_without_stable_text_needs_a_version() -> None:
    lock = threading.Lock()  # its repr names its address

    def guarded(rows: Any) -> Any:
        with lock:
            return rows

    with pytest.raises(PlanError, match="version="):
        function_id(guarded)
    assert function_id(guarded, version="2") == function_id(guarded, version="2")
    assert function_id(guarded, version="2") != function_id(guarded, version="3")


@pytest.mark.spark
@pytest.mark.parametrize(
    "name", ["a", "order_id_2", "__agg", "Upper", "select", "null", "a b", "it's", "1a", "é"]
)
def test_a_column_named_without_the_jvm_prints_in_a_node_id_as_spark_prints_it(
    spark: SparkSession, name: str
) -> None:
    """Plan ids name traces: a column made as SQL text must not change them."""
    made = column(name)
    assert isinstance(made, ColumnName)
    assert canonical(made) == canonical(F.col(name))
    assert spark.range(1).selectExpr(f"0 AS {quote(name)}").select(made).columns == [name]


@pytest.mark.spark
@pytest.mark.parametrize("name", ["a.b", "`a`"])
def test_a_name_spark_parses_stays_a_spark_column(spark: SparkSession, name: str) -> None:
    assert not isinstance(column(name), ColumnName)


def test_a_column_name_copies_and_pickles_as_itself() -> None:
    made = ColumnName("a b")
    for again in (copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert (str(again), again.name) == ("`a b`", "a b")
