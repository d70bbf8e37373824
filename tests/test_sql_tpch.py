"""The 22 TPC-H queries as SQL views equal DuckDB running the same SQL on the
same data, after every epoch.

The data is a tiny TPC-H database and its history over four epochs, in two runs
(``tests/support/tpch_data.py``).

The queries are the specification's, with fixed substitution parameters; the
thresholds that assume scale factor 1 (Q11's fraction, Q18's quantity) are
scaled down to this data. Where a query has LIMIT, its ORDER BY is made total
with tie-breaking keys (marked below), as with ties the top rows are any of
them. A view is a bag: ORDER BY without LIMIT means nothing for it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.sql import compile_view, explain
from dd_etl.runtime import Runtime
from tests.support.sql_oracle import append_changes, duckdb_results, mismatches
from tests.support.tpch import DDL, KEYS, SCHEMAS
from tests.support.tpch_data import EPOCHS_PER_RUN, QUERIES, SEED, TABLES, history_of, tables_after

pytestmark = pytest.mark.spark


def compile_corpus(spark: SparkSession, warehouse: Path) -> tuple[Dataflow, dict[str, Collection]]:
    """One dataflow of the sources and the queries' views (by name)."""
    flow = Dataflow(spark, warehouse)
    tables = {t: flow.source(t, SCHEMAS[t], key=KEYS[t]) for t in TABLES}
    for name, sql in QUERIES.items():
        tables[name] = compile_view(flow, sql, tables, name=name, dialect="duckdb")
    return flow, tables


def test_data_makes_every_query_select_rows() -> None:
    """The generator's value domains fit the queries' predicates: each query has
    rows in at least two of the four epochs (else comparing it would prove little)."""
    results = duckdb_results(tables_after(history_of(random.Random(SEED))), DDL, QUERIES)
    for name in QUERIES:
        filled = sum(1 for epoch in results if epoch[name])
        assert filled >= 2, (name, [len(epoch[name]) for epoch in results])


def test_tpch_queries_equal_duckdb_after_every_epoch(spark: SparkSession, tmp_path: Path) -> None:
    epochs = history_of(random.Random(SEED))
    flow, _ = compile_corpus(spark, tmp_path / "warehouse")
    rt = Runtime(flow)
    epoch = 0
    for in_run in EPOCHS_PER_RUN:
        for _ in range(in_run):
            for table, rows in epochs[epoch].items():
                append_changes(spark, rt, table, SCHEMAS[table], rows, epoch)
            epoch += 1
        assert rt.run().upper == epoch
    expected = duckdb_results(tables_after(epochs), DDL, QUERIES)
    wrong = mismatches(rt, list(QUERIES), expected)
    assert not wrong, wrong


def test_tpch_joins_have_keys(spark: SparkSession, tmp_path: Path) -> None:
    """Only the joins with the one row of an uncorrelated subquery are cross
    joins: FROM items are joined in an order where each meets those before it
    on an equality (Q2, Q8, Q9 list two unrelated tables first), and a key in
    every branch of an OR is a key (Q19)."""
    _, views = compile_corpus(spark, tmp_path / "warehouse")
    crossed = {q for q in QUERIES if "[not incremental: cross join" in explain(views[q])}
    assert crossed == {"q11", "q15", "q16", "q22"}
