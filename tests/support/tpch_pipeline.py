"""The TPC-H views as a pipeline file, as a user would keep them: the eight tables
are directories of parquet files, one file per epoch whose ``diff`` column deletes
rows as well as adds them; the 22 queries are SQL views (Spark's dialect, which
sqlglot writes from the DuckDB dialect they are kept in), some materialized as
Delta tables and some publishing their changes. The ``sizing:`` settings decide
which paths a run takes (``Thresholds``), so small data can take large data's."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dd_etl.arrow_schema import arrow_schema
from dd_etl.trace import delta_log
from dd_etl.trace.columns import DIFF
from dd_etl.trace.maintenance import find_traces
from tests.support.sql_oracle import Row, norm
from tests.support.tpch import KEYS, SCHEMAS
from tests.support.tpch_data import QUERIES

MATERIALIZED = ("q01", "q13")
"""Views kept as Delta tables (rewritten or merged into, as ``sizing`` says)."""
FEEDS = ("q03", "q13")
"""Views publishing their changes."""
BY_SPARK = {"small_records": 0, "driver_merge_records": 0}
"""Every run on Spark's executors, every spine merge made by Spark."""
LARGE = {**BY_SPARK, "medium_share": 0}
"""Every run as a large interval, whatever the state beside it."""
MEDIUM = {**BY_SPARK, "medium_share": 1_000_000}
"""Every run as a medium interval: small beside any state."""
TAKE_CHANGES = {**MEDIUM, "rewrite_records": 0}
"""Every run as a medium interval, and every materialized table merged into by
Spark rather than rewritten."""
VIEWS = ("q01", "q03", "q13")
"""An aggregate; a join of three tables under a top 10; an outer join under an
aggregate of an aggregate: the largest set Spark's paths run in CI's time over a
Spark Connect server and a cluster (each epoch on those paths costs Spark jobs by
the trace; all 22 views run in process, ``test_sql_tpch.py``)."""
STEPS = (((0,), LARGE), ((1, 2), MEDIUM), ((3,), TAKE_CHANGES))
"""Run by run, the epochs of the data's history it takes in and its ``sizing:``:
the load, whose materialized tables Spark writes whole; two epochs' files at
once (one empties ``nation``, so that its trace's second batch outgrows its
first: a spine merge once no reader needs them apart, after the next run), the
tables rewritten by Spark; then one merged into the tables."""


def write_epoch(root: Path, epoch: int, changes: Mapping[str, list[tuple[Row, int]]]) -> None:
    """Each table's changes at ``epoch`` of the history as a parquet file of its
    directory."""
    for table, rows in changes.items():
        schema = arrow_schema(SCHEMAS[table]).append(pa.field("diff", pa.int64()))
        columns = list(zip(*[(*r, d) for r, d in rows], strict=True)) if rows else None
        arrays = (
            [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)]
            if columns
            else [pa.array([], f.type) for f in schema]
        )
        directory = root / "data" / table
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.Table.from_arrays(arrays, schema=schema), directory / f"{epoch:04d}.parquet"
        )


def spark_sql(query: str) -> str:
    return str(sqlglot.transpile(QUERIES[query], read="duckdb", write="spark")[0])


def pipeline_file(
    root: Path,
    views: Iterable[str],
    sizing: Mapping[str, float] | None = None,
    data: str = "data",
) -> Path:
    """``root/pipeline.yaml``: the tables under ``data`` (relative to ``root``),
    ``views`` (query names), ``out/<view>`` for the materialized ones,
    ``feeds/<view>`` for the feeds; ``sizing:`` as given. No Spark master: the
    environment chooses."""
    conf = {"conf": {"spark.sql.shuffle.partitions": "2"}}
    lines = ["name: tpch", "warehouse: wh", f"spark: {json.dumps(conf)}", "sources:"]
    for table, key in KEYS.items():
        path = f"{data}/{table}"
        lines.append(f"  {table}: {{format: parquet, path: {path}, key: {json.dumps(key)}}}")
    lines.append("views:")
    for view in views:
        lines += [f"  {view}:", f"    sql: {json.dumps(spark_sql(view))}"]
        if view in MATERIALIZED:
            lines.append(f"    materialize: {{path: out/{view}}}")
        if view in FEEDS:
            lines.append(f"    changes: {{path: feeds/{view}}}")
    if sizing:
        lines.append(f"sizing: {json.dumps(dict(sizing))}")
    root.mkdir(parents=True, exist_ok=True)
    path = root / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def table_bag(spark: SparkSession, path: Path) -> Counter[Row]:
    """A Delta table's rows as a bag, floats rounded (read by Spark: a table Spark
    merged into has deletion vectors)."""
    return Counter(norm(tuple(r)) for r in spark.read.format("delta").load(str(path)).collect())


def traces(root: Path) -> dict[str, Counter[Row]]:
    """Every trace of the pipeline at ``root`` (by its path in the warehouse) as the
    updates it holds, consolidated: equal data and times summed, zeros dropped,
    whatever the batches they lie in."""
    warehouse = root / "wh"
    held = {}
    for path in find_traces(warehouse):
        updates: Counter[Row] = Counter()
        for r in DeltaTable(path.uri).to_pyarrow_table().to_pylist():
            diff = r.pop(DIFF)
            updates[norm(tuple(v for _, v in sorted(r.items())))] += diff
        held[str(path.path.relative_to(warehouse))] = +updates
    return held


def batches(root: Path) -> dict[str, int]:
    """How many batches each trace of the pipeline at ``root`` holds."""
    warehouse = root / "wh"
    return {
        str(path.path.relative_to(warehouse)): len(delta_log.load(path).state.batches)
        for path in find_traces(warehouse)
    }


def outputs(spark: SparkSession, root: Path, views: Iterable[str]) -> dict[str, Counter[Row]]:
    """The materialized tables and change feeds of ``views``."""
    kept = {f"out/{v}" for v in views if v in MATERIALIZED} | {
        f"feeds/{v}" for v in views if v in FEEDS
    }
    return {path: table_bag(spark, root / path) for path in sorted(kept)}
