"""Every command that discards or rewrites state, in random order, against a
recomputation from scratch.

Its views hold every kind of trace between them: arrangements shared by two
views, accumulated sums and MIN/MAX, a join, a view over a view, a running
window, a first row per key, a recursive loop, materialized tables and change
feeds; Hypothesis picks which of them a pipeline has. Its
sources are a Delta table with the change feed on, a Delta table taken in by
differencing, and a directory of parquet files. Hypothesis orders the steps: a
file corrected in place and restated; compaction; `rebuild --source`; a column
no view reads renamed (held as NULL, no rebuild); `rebuild VIEW`; each but
compaction follows an epoch of inserts, updates and deletes.
After each, every view, materialized table and change feed equals DuckDB over
the sources as they are now. Then rebuilds are killed at each discard
(SIGKILL) and the next run still gives the same.
"""

from __future__ import annotations

import json
import random
import signal
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.child_process import dd_etl_process
from tests.support.trace_rows import view_contents

pytestmark = [pytest.mark.spark, pytest.mark.slow]

VIEWS = {
    "by_cust": "SELECT cust, COUNT(*) AS n, SUM(amount) AS total, MIN(amount) AS lo, "
    "MAX(amount) AS hi FROM orders GROUP BY cust",
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.cust = c.cust",
    "joined_big": "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c "
    "ON o.cust = c.cust WHERE o.amount > 20",
    "by_region": "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM joined GROUP BY region",
    "running": "SELECT id, cust, SUM(amount) OVER (PARTITION BY cust ORDER BY id) AS upto "
    "FROM orders",
    "cheapest": "SELECT cust, id FROM (SELECT cust, id, ROW_NUMBER() OVER (PARTITION BY cust "
    "ORDER BY amount, id) AS r FROM orders) t WHERE r = 1",
    "reach": "WITH RECURSIVE r (node) AS (SELECT 1 AS node UNION SELECT e.dst FROM r "
    "JOIN edges e ON r.node = e.src) SELECT node FROM r",
}
READS = {"by_region": ("joined",)}
"""The views a view reads, which a pipeline having it must have too."""
SINKS = {"by_cust": ("materialize", "changes"), "joined": ("changes",), "reach": ("materialize",)}
ORDERS = pa.schema([("id", pa.int64()), ("cust", pa.int64()), ("amount", pa.int64())])
CUSTOMERS = pa.schema([("cust", pa.int64()), ("region", pa.string())])
EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
STEPS = ("restate", "compact", "resync", "rename", "rebuild")


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result.stdout + result.stderr


class Lake:
    """The sources as the test writes them: what they hold now, and the changes."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.note = 0  # how often the orders' unread column was renamed
        self.orders = {i: (i % 5, self.rng.randrange(50)) for i in range(40)}
        self.customers = {c: f"r{c % 3}" for c in range(5)}
        self.next_id = 40
        self.edge_files = 0
        (root / "edges").mkdir()
        self.add_edges([(1, 2), (2, 3), (3, 1), (4, 5)])
        self.write_orders(mode="overwrite")
        self.write_customers()

    @property
    def note_column(self) -> str:
        return f"note{self.note}"

    def write_orders(self, mode: str) -> None:
        ids = sorted(self.orders)
        table = pa.table(
            {
                "id": ids,
                "cust": [self.orders[i][0] for i in ids],
                "amount": [self.orders[i][1] for i in ids],
                self.note_column: [f"n{i}" for i in ids],
            }
        )
        write_deltalake(
            str(self.root / "orders"),
            table,
            mode=mode,  # type: ignore[arg-type]
            schema_mode="overwrite" if mode == "overwrite" else None,
            configuration={"delta.enableChangeDataFeed": "true"},
        )

    def write_customers(self) -> None:
        rows = sorted(self.customers.items())
        table = pa.Table.from_pylist([{"cust": c, "region": r} for c, r in rows], CUSTOMERS)
        write_deltalake(str(self.root / "customers"), table, mode="overwrite")

    def add_edges(self, edges: list[tuple[int, int]]) -> None:
        rows = [{"src": s, "dst": d} for s, d in edges]
        pq.write_table(pa.Table.from_pylist(rows, EDGES), self.edge_path(self.edge_files))
        self.edge_files += 1

    def edge_path(self, i: int) -> Path:
        return self.root / "edges" / f"e{i}.parquet"

    def change(self) -> None:
        """Inserts, updates and deletes of orders (as Delta operations), a customer
        moved to another region, a new edge file."""
        table = DeltaTable(str(self.root / "orders"))
        new = {self.next_id + i: (self.rng.randrange(6), self.rng.randrange(50)) for i in range(3)}
        self.next_id += 3
        columns = {"id": list(new), "cust": [c for c, _ in new.values()]}
        columns |= {"amount": [a for _, a in new.values()]}
        columns[self.note_column] = ["new"] * len(new)
        write_deltalake(table, pa.table(columns), mode="append")
        self.orders |= new
        moved = self.rng.choice(sorted(self.orders))
        table = DeltaTable(str(self.root / "orders"))
        table.update(updates={"amount": "amount + 7"}, predicate=f"id = {moved}")
        self.orders[moved] = (self.orders[moved][0], self.orders[moved][1] + 7)
        gone = self.rng.choice(sorted(self.orders))
        table.delete(f"id = {gone}")
        del self.orders[gone]
        cust = self.rng.randrange(5)
        self.customers[cust] = f"r{self.rng.randrange(4)}"
        self.write_customers()
        self.add_edges([(self.rng.randrange(1, 7), self.rng.randrange(1, 7))])

    def correct_edges(self) -> None:
        """The first edge file rewritten in place: one edge replaced."""
        path = self.edge_path(0)
        rows = pq.read_table(path).to_pylist()
        rows[0] = {"src": rows[0]["src"], "dst": 6}
        pq.write_table(pa.Table.from_pylist(rows, EDGES), path)

    def rename_note(self) -> None:
        """The orders' unread column renamed: the table rewritten with the new schema."""
        self.note += 1
        self.write_orders(mode="overwrite")

    def oracle(self) -> dict[str, Counter[str]]:
        """Each view evaluated by DuckDB over the sources as they are now."""
        con = duckdb.connect()
        con.register("orders", DeltaTable(str(self.root / "orders")).to_pyarrow_table())
        con.register("customers", DeltaTable(str(self.root / "customers")).to_pyarrow_table())
        edges = [pq.read_table(self.edge_path(i)) for i in range(self.edge_files)]
        con.register("edges", pa.concat_tables(edges))
        got = {}
        for name, sql in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
            rows = con.execute(f"SELECT * FROM {name}").fetchall()
            columns = [d[0] for d in con.description or []]
            got[name] = bag(dict(zip(columns, r, strict=True)) for r in rows)
        return got


def bag(records: Any) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in records)


def write_pipeline(root: Path, views: Collection[str] = tuple(VIEWS)) -> Path:
    lines = [
        "name: rebuilds",
        "warehouse: wh",
        'spark: {master: "local[2]", conf: {spark.sql.shuffle.partitions: "2"}}',
        "sources:",
        "  orders: {format: delta, path: orders, key: [id]}",
        "  customers: {format: delta, path: customers, key: [cust]}",
        "  edges: {format: parquet, path: edges, key: [src, dst]}",
        "views:",
    ]
    for view in views:
        lines += [f"  {view}:", f"    sql: '{VIEWS[view]}'"]
        for kind in SINKS.get(view, ()):
            lines.append(f"    {kind}: {{path: out/{view}_{kind}}}")
    path = root / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_equal_from_scratch(
    lake: Lake, pipeline: Path, views: Collection[str] = tuple(VIEWS)
) -> None:
    want = lake.oracle()
    for view in views:
        assert view_contents(lake.root / "wh", view) == want[view], view
    for view, kinds in SINKS.items():
        for kind in kinds if view in views else ():
            rows = DeltaTable(str(lake.root / "out" / f"{view}_{kind}")).to_pyarrow_table()
            if kind == "materialize":
                assert bag(rows.to_pylist()) == want[view], (view, kind)
                continue
            summed: Counter[str] = Counter()
            for row in rows.to_pylist():
                diff = row.pop("_diff")
                row.pop("_epoch")
                summed[json.dumps(row, sort_keys=True, default=str)] += diff
            assert +summed == want[view] and not -summed, (view, kind)


def take(step: str, lake: Lake, pipeline: Path, view: str, views: Collection[str]) -> None:
    if step == "restate":  # the correction first, then what else came in
        lake.change()
        lake.correct_edges()
        said = cli("run", str(pipeline), code=4)
        assert "restate" in said, said
        cli("restate", str(pipeline), "edges")
        cli("run", str(pipeline))
    elif step == "compact":
        cli("compact", str(pipeline))
    elif step == "resync":
        lake.change()
        cli("rebuild", str(pipeline), "--source", "orders")
        cli("run", str(pipeline))
    elif step == "rename":  # no view reads it: held as NULL, no rebuild
        lake.rename_note()
        lake.change()
        said = cli("run", str(pipeline))
        assert "columns no view reads are NULL from now on" in " ".join(said.split()), said
        assert "rebuilt" not in said, said
    else:
        lake.change()
        cli("rebuild", str(pipeline), view)
        cli("run", str(pipeline))


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    chosen=st.sets(st.sampled_from(sorted(VIEWS)), min_size=3),
    steps=st.permutations(STEPS),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_every_view_and_sink_equals_a_recomputation_after_each_step(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    chosen: set[str],
    steps: list[str],
    data: st.DataObject,
    seed: int,
) -> None:
    views = [v for v in VIEWS if v in chosen or any(v in READS.get(c, ()) for c in chosen)]
    view = data.draw(st.sampled_from(views), label="view rebuilt")
    root = tmp_path_factory.mktemp("rebuilds")
    lake = Lake(root, seed)
    pipeline = write_pipeline(root, views)
    cli("run", str(pipeline))
    assert_equal_from_scratch(lake, pipeline, views)
    for step in steps:
        take(step, lake, pipeline, view, views)
        assert_equal_from_scratch(lake, pipeline, views)
    read = json.loads(cli("read", str(pipeline), view, "--format", "json"))
    assert bag(read) == lake.oracle()[view]


def test_rebuilds_killed_at_each_discard_are_completed_by_the_next_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = Lake(tmp_path, 7)
    pipeline = write_pipeline(tmp_path)
    cli("run", str(pipeline))
    lake.change()
    cli("run", str(pipeline))

    # `rebuild joined` discards joined, then by_region, which reads it
    killed = dd_etl_process("rebuild", str(pipeline), "joined", failpoints="trace.discarded=1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    lake.change()
    cli("run", str(pipeline))
    assert_equal_from_scratch(lake, pipeline)

    # the source started over (its columns changed: a rebuild takes the new ones
    # in); the run discarding what was computed from its old history is killed
    # after its third discard
    lake.rename_note()
    lake.change()
    cli("rebuild", str(pipeline), "--source", "orders")
    killed = dd_etl_process("run", str(pipeline), failpoints="trace.discarded=3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    said = cli("run", str(pipeline))
    assert "a source it reads started over" in said, said
    assert_equal_from_scratch(lake, pipeline)
