"""Benchmark: TPC-H refresh epochs kept up to date incrementally vs Spark SQL.

The TPC-H benchmark's own notion of change: each refresh epoch runs RF1 (new
orders with their lineitems) and RF2 (deletes of existing orders with theirs),
0.1 % of the orders each (``--fraction``). Is maintaining the 22 queries as
dd_etl views over such epochs cheaper than running them again?

One process, one SparkSession (``local[2]``). ``tpchgen-cli`` generates the
tables as parquet at ``--scale`` (default SF 1) in a scratch directory; they
are cast to the schema of ``tests/support/tpch.py`` (money as DOUBLE) and
written once as parquet, which both sides read:

* dd_etl: the 8 tables as sources, the 22 queries (the specification's
  thresholds for the scale factor) compiled to views with ``compile_view``.
  Epoch 0 appends the tables and runs; each refresh epoch appends the changes
  of orders and lineitem (``_diff`` +1 / -1; the other sources an empty epoch)
  and times ``Runtime.run()``, with its profile (Spark jobs, stages, phases,
  per-trace seconds attributed to the views that use each trace).
* Spark SQL: the same queries (transpiled from DuckDB's dialect by sqlglot)
  over temp views of the current tables, orders and lineitem rewritten as
  parquet with each epoch's changes applied (timed apart); each query runs in
  full into Spark's ``noop`` sink and is timed on its own.

RF1's rows copy existing orders and their lineitems under new order keys above
the largest one (the specification generates them like the originals); RF2
picks live orders. Both come from a seeded generator, so a run is repeatable.
At the end every view is compared with Spark SQL's result on the current data
(bags, floats to 6 significant digits). Results go to
``bench/results/tpch_refresh.json`` and ``bench/results/tpch_refresh.png``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from decimal import Decimal
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlglot
from bench_incremental import executed, timed
from common import environment, recorded_argv, run_recorded, write_json
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dd_etl.errors import DdEtlError
from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.sql import compile_view
from dd_etl.runtime import Runtime, execution
from dd_etl.trace.columns import DIFF

# the shared TPC-H schema and queries live with the tests, one directory up
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.tpch import COLUMNS, KEYS, SCHEMAS, spec_queries

NAME = "tpch_refresh"
TABLES = list(COLUMNS)
CHANGED = ("orders", "lineitem")
"""The tables the refresh functions change; the others get an empty epoch."""


@dataclass(frozen=True)
class BenchConfig:
    scale: float
    epochs: int
    fraction: float
    seed: int


# ------------------------------------------------------------------ data


def tpchgen() -> str:
    """The ``tpchgen-cli`` next to this interpreter (a venv need not be on PATH)."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli")
    return found


def generate(scale: float, out: Path) -> dict[str, Any]:
    """The 8 tables as parquet files ``out/<table>.parquet``."""
    exe = tpchgen()
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    cmd = [exe, "parquet", "-s", f"{scale:g}", "-o", str(out), "-q", "--no-progress"]
    seconds = timed(lambda: subprocess.run(cmd, check=True))
    return {"tpchgen_cli": version, "seconds": seconds}


def typed(df: DataFrame, table: str) -> DataFrame:
    """``tpchgen-cli``'s columns (DECIMAL money, INT sizes) cast to the shared schema."""
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in SCHEMAS[table]])


class CurrentTables:
    """The tables as one keeps them without dd_etl: parquet registered as Spark
    temp views, orders and lineitem rewritten with each epoch's changes applied."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.paths: dict[str, Path] = {}

    def replace(self, table: str, df: DataFrame, epoch: int) -> None:
        path = self.root / f"{table}_e{epoch}"
        df.write.parquet(str(path))
        old = self.paths.get(table)
        self.paths[table] = path
        self.df(table).createOrReplaceTempView(table)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def df(self, table: str) -> DataFrame:
        return self.spark.read.parquet(str(self.paths[table]))

    def apply(self, table: str, changes: DataFrame, epoch: int) -> None:
        """Rows whose key a change deletes go, inserted rows come in."""
        gone = changes.where(F.col(DIFF) < 0).select(*KEYS[table])
        new = changes.where(F.col(DIFF) > 0).drop(DIFF)
        current = self.df(table).join(gone, KEYS[table], "left_anti")
        self.replace(table, current.unionByName(new), epoch)


class Refresh:
    """Seeded RF1/RF2 order keys over the live orders."""

    def __init__(self, order_keys: np.ndarray, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.live = np.sort(order_keys)
        self.original_max = int(self.live[-1])
        self.next_key = self.original_max + 1

    def epoch(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(templates, new keys, deleted keys)``: RF1 copies live original orders
        under new keys above every existing key; RF2 deletes live orders."""
        originals = self.live[self.live <= self.original_max]
        templates = self.rng.choice(originals, size=count, replace=False)
        deleted = self.rng.choice(self.live, size=count, replace=False)
        new_keys = np.arange(self.next_key, self.next_key + count, dtype=np.int64)
        self.next_key += count
        self.live = np.union1d(np.setdiff1d(self.live, deleted), new_keys)
        return templates, new_keys, deleted


def refresh_changes(
    spark: SparkSession,
    tables: CurrentTables,
    templates: np.ndarray,
    new_keys: np.ndarray,
    deleted: np.ndarray,
    out: Path,
) -> dict[str, DataFrame]:
    """One epoch's changes of orders and lineitem with ``_diff``, written to
    ``out`` so dd_etl and Spark SQL apply the very same rows."""
    mapping = spark.createDataFrame(
        pd.DataFrame({"template": templates, "new_key": new_keys}).astype("int64")
    )
    gone = spark.createDataFrame(pd.DataFrame({"gone_key": deleted}).astype("int64"))
    plus, minus = F.lit(1).cast("long").alias(DIFF), F.lit(-1).cast("long").alias(DIFF)
    changes: dict[str, DataFrame] = {}
    for table, key in (("orders", "o_orderkey"), ("lineitem", "l_orderkey")):
        current = tables.df(table)
        cols = [c for c in SCHEMAS[table].fieldNames() if c != key]
        copied = current.join(mapping, F.col(key) == F.col("template")).select(
            F.col("new_key").alias(key), *cols, plus
        )
        removed = current.join(gone, F.col(key) == F.col("gone_key"), "left_semi")
        both = copied.unionByName(removed.select(*SCHEMAS[table].fieldNames(), minus))
        both.write.parquet(str(out / table))
        changes[table] = spark.read.parquet(str(out / table))
    return changes


# ------------------------------------------------------------------ queries


def build_flow(
    spark: SparkSession, root: Path, queries: dict[str, str]
) -> tuple[Runtime, dict[str, str]]:
    """The sources and every query the SQL compiler accepts as a view; the
    rejected ones with the compiler's message."""
    flow = Dataflow(spark, root / "warehouse", name=NAME)
    tables: dict[str, Collection] = {t: flow.source(t, SCHEMAS[t], key=KEYS[t]) for t in TABLES}
    rejected: dict[str, str] = {}
    for name, sql in queries.items():
        try:
            compile_view(flow, sql, tables, name=name, dialect="duckdb")
        except DdEtlError as e:
            rejected[name] = str(e)
    return Runtime(flow), rejected


def spark_dialect(queries: dict[str, str]) -> dict[str, str]:
    """The queries as Spark SQL: written for DuckDB, transpiled by sqlglot."""
    return {
        q: sqlglot.transpile(sql, read="duckdb", write="spark")[0] for q, sql in queries.items()
    }


def run_spark_sql(spark: SparkSession, queries: dict[str, str]) -> dict[str, float]:
    """Seconds per query, each run in full over the current temp views."""
    return {q: executed(spark.sql(sql)) for q, sql in queries.items()}


def view_of_trace(rt: Runtime) -> dict[str, list[str]]:
    """trace name -> the views whose computation uses it."""
    users: dict[str, list[str]] = defaultdict(list)
    for view in rt.flow.views:
        for node in rt.stateful_nodes([view]):
            users[node.trace_name or node.id].append(view)
    return users


def cost(report: execution.RunReport, wall: float, users: dict[str, list[str]]) -> dict[str, Any]:
    """A run's profile, with its per-trace costs summed per view: a view's own
    traces, and its even share of traces other views use too (sources included).
    Trace seconds are summed over the runtime's threads."""
    profile = report.profile
    assert profile is not None
    by_view: dict[str, dict[str, float]] = defaultdict(
        lambda: {"own_seconds": 0.0, "own_spark_jobs": 0, "shared_seconds": 0.0}
    )
    for trace, c in profile.traces.items():
        views = users.get(trace, [])
        if len(views) == 1:
            by_view[views[0]]["own_seconds"] += c.seconds
            by_view[views[0]]["own_spark_jobs"] += c.spark_jobs
        for view in views if len(views) > 1 else []:
            by_view[view]["shared_seconds"] += c.seconds / len(views)
    return {
        "wall_seconds": wall,
        "seconds": profile.seconds,
        "spark_jobs": profile.spark_jobs,
        "spark_stages": profile.spark_stages,
        "sizing": profile.sizing,
        "phases": profile.phases,
        "traces": len(profile.traces),
        "view_changes": report.views,
        "by_view": {
            v: {k: round(x, 3) for k, x in sorted(c.items())} for v, c in sorted(by_view.items())
        },
    }


# ------------------------------------------------------------------ verification


def norm(value: Any) -> Any:
    """Floats (and decimals) to 6 significant digits: engines sum in different orders."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.6g}")
    return value


def bag(rows: Iterable[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(norm(v) for v in r) for r in rows)


def near(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Rows equal but for floats within 1e-6 relative (rounding can split close values)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, float) and isinstance(y, float):
            if not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9):
                return False
        elif x != y:
            return False
    return True


def sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def same_bag(got: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> bool:
    if bag(got) == bag(expected):
        return True
    if len(got) != len(expected):
        return False

    def floats(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted(
            (tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in rows),
            key=sort_key,
        )

    return all(near(a, b) for a, b in zip(floats(got), floats(expected), strict=True))


def verify(spark: SparkSession, rt: Runtime, queries: dict[str, str]) -> dict[str, Any]:
    """Every view against Spark SQL's result of its query on the current tables."""
    out: dict[str, Any] = {}
    for view, sql in queries.items():
        if view not in rt.flow.views:
            continue
        got = [tuple(r) for r in rt.read(view).collect()]
        expected = [tuple(r) for r in spark.sql(sql).collect()]
        equal = same_bag(got, expected)
        entry: dict[str, Any] = {"rows": len(got), "expected_rows": len(expected), "equal": equal}
        if not equal:
            mine, theirs = bag(got), bag(expected)
            entry["only_in_view"] = [repr(r) for r in list((mine - theirs).elements())[:5]]
            entry["only_in_spark_sql"] = [repr(r) for r in list((theirs - mine).elements())[:5]]
        out[view] = entry
    out["all_equal"] = all(e["equal"] for e in out.values())
    return out


# ------------------------------------------------------------------ driver


def append_epoch(
    rt: Runtime, tables: CurrentTables, changes: dict[str, DataFrame], epoch: int
) -> None:
    """The epoch's changes as dd_etl's sources; every source advances to the epoch."""
    for t in TABLES:
        rt.append_source(t, changes[t] if t in changes else tables.df(t).limit(0), epoch)


def apply_epoch(tables: CurrentTables, changes: dict[str, DataFrame], epoch: int) -> None:
    for t in CHANGED:
        tables.apply(t, changes[t], epoch)


def run_benchmark(spark: SparkSession, cfg: BenchConfig, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    queries = spec_queries(cfg.scale)
    peer_sql = spark_dialect(queries)
    data = root / "tpch"
    generated = generate(cfg.scale, data)
    print(f"generated SF {cfg.scale:g} in {generated['seconds']}s", flush=True)

    rt, rejected = build_flow(spark, root, queries)
    users = view_of_trace(rt)
    for q, message in rejected.items():
        print(f"{q}: rejected by the SQL compiler: {message}", flush=True)
    tables = CurrentTables(spark, root / "current")

    load: dict[str, Any] = {"generate": generated}

    def write_tables() -> None:
        for t in TABLES:
            tables.replace(t, typed(spark.read.parquet(str(data / f"{t}.parquet")), t), 0)

    def append_tables() -> None:
        for t in TABLES:
            rt.append_source(t, tables.df(t), 0)

    load["write_seconds"] = timed(write_tables)
    load["rows"] = {t: tables.df(t).count() for t in TABLES}
    load["append_seconds"] = timed(append_tables)
    run_started = time.perf_counter()
    report = rt.run()
    load["incremental"] = cost(report, round(time.perf_counter() - run_started, 3), users)
    load["spark_sql"] = run_spark_sql(spark, peer_sql)
    load["stateful_traces"] = len(rt.stateful_nodes())
    inc = load["incremental"]
    print(
        f"load: incremental {inc['wall_seconds']}s ({inc['spark_jobs']} jobs, "
        f"{inc['spark_stages']} stages), spark sql {sum(load['spark_sql'].values()):.1f}s",
        flush=True,
    )

    orders = load["rows"]["orders"]
    count = max(1, round(orders * cfg.fraction))
    keys = np.array([r[0] for r in tables.df("orders").select("o_orderkey").collect()], np.int64)
    refresh = Refresh(keys, cfg.seed)
    epochs: list[dict[str, Any]] = []
    for epoch in range(1, cfg.epochs + 1):
        templates, new_keys, deleted = refresh.epoch(count)
        prepared = time.perf_counter()
        changes = refresh_changes(
            spark, tables, templates, new_keys, deleted, root / "changes" / f"e{epoch}"
        )
        rows = {t: changes[t].groupBy(DIFF).count().collect() for t in CHANGED}
        entry: dict[str, Any] = {
            "epoch": epoch,
            "rf1_orders": count,
            "rf2_orders": count,
            "change_rows": {t: {str(r[DIFF]): r["count"] for r in rows[t]} for t in CHANGED},
            "prepare_seconds": round(time.perf_counter() - prepared, 3),
            "load_average_1min": round(os.getloadavg()[0], 1),
        }

        entry["append_seconds"] = timed(partial(append_epoch, rt, tables, changes, epoch))
        run_started = time.perf_counter()
        report = rt.run()
        entry["incremental"] = cost(report, round(time.perf_counter() - run_started, 3), users)
        entry["peer_apply_seconds"] = timed(partial(apply_epoch, tables, changes, epoch))
        entry["spark_sql"] = run_spark_sql(spark, peer_sql)
        epochs.append(entry)
        inc = entry["incremental"]
        print(
            f"epoch {epoch}: incremental {inc['wall_seconds']}s ({inc['spark_jobs']} jobs, "
            f"{inc['spark_stages']} stages), spark sql {sum(entry['spark_sql'].values()):.1f}s "
            f"(+{entry['peer_apply_seconds']}s applying the changes)",
            flush=True,
        )
        write_json(NAME, assemble(spark, cfg, queries, rejected, load, epochs, None, started))
    verification = verify(spark, rt, peer_sql)
    wrong = [v for v, e in verification.items() if v != "all_equal" and not e["equal"]]
    print(f"verification: all equal {verification['all_equal']}, differing: {wrong}", flush=True)
    return assemble(spark, cfg, queries, rejected, load, epochs, verification, started)


def summarize(
    load: dict[str, Any], epochs: list[dict[str, Any]], queries: Iterable[str]
) -> dict[str, Any]:
    """Per query: Spark SQL seconds at load and median over the refresh epochs,
    and the incremental seconds attributed to its view; per run: totals and jobs."""
    per_query: dict[str, Any] = {}
    for q in queries:
        row: dict[str, Any] = {"spark_sql_load": load["spark_sql"].get(q)}
        if epochs:
            row["spark_sql_refresh_median"] = statistics.median(e["spark_sql"][q] for e in epochs)
            shares = [e["incremental"]["by_view"].get(q) for e in epochs]
            if all(s is not None for s in shares):
                row["incremental_own_median"] = statistics.median(
                    s["own_seconds"] for s in shares if s
                )
                row["incremental_shared_median"] = statistics.median(
                    s["shared_seconds"] for s in shares if s
                )
        per_query[q] = row
    runs = [
        {
            "epoch": 0,
            "incremental_wall_seconds": load["incremental"]["wall_seconds"],
            "spark_jobs": load["incremental"]["spark_jobs"],
            "spark_stages": load["incremental"]["spark_stages"],
            "spark_sql_seconds": round(sum(load["spark_sql"].values()), 3),
        }
    ] + [
        {
            "epoch": e["epoch"],
            "incremental_wall_seconds": e["incremental"]["wall_seconds"],
            "spark_jobs": e["incremental"]["spark_jobs"],
            "spark_stages": e["incremental"]["spark_stages"],
            "spark_sql_seconds": round(sum(e["spark_sql"].values()), 3),
            "spark_sql_plus_apply_seconds": round(
                sum(e["spark_sql"].values()) + e["peer_apply_seconds"], 3
            ),
        }
        for e in epochs
    ]
    for r in runs:
        r["spark_sql_over_incremental"] = round(
            r["spark_sql_seconds"] / r["incremental_wall_seconds"], 3
        )
    return {"per_query": per_query, "runs": runs}


def assemble(
    spark: SparkSession,
    cfg: BenchConfig,
    queries: dict[str, str],
    rejected: dict[str, str],
    load: dict[str, Any],
    epochs: list[dict[str, Any]],
    verification: dict[str, Any] | None,
    started: float,
) -> dict[str, Any]:
    return {
        "benchmark": NAME,
        "complete": verification is not None,
        "argv": recorded_argv(),
        "config": asdict(cfg),
        "environment": environment(
            spark,
            shuffle_partitions=spark.conf.get("spark.sql.shuffle.partitions"),
            parallel_traces=execution.PARALLEL_TRACES,
            tpchgen_cli=load["generate"]["tpchgen_cli"],
            sqlglot=version("sqlglot"),
        ),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "queries": {k: " ".join(v.split()) for k, v in queries.items()},
        "rejected_by_compiler": rejected,
        "load": load,
        "summary": summarize(load, epochs, queries),
        "epochs": epochs,
        "verification": verification,
    }


# ------------------------------------------------------------------ plot


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(17, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3, width_ratios=[2.2, 1, 1])
    plot_per_query(axes[0], result)
    plot_runs(axes[1], result)
    plot_jobs(axes[2], result)
    cfg = result["config"]
    fig.suptitle(
        f"TPC-H SF {cfg['scale']:g}, 22 queries: refresh epochs (RF1 + RF2, "
        f"{100 * cfg['fraction']:g} % of the orders each) incremental vs Spark SQL"
    )
    fig.savefig(path, dpi=110)


def plot_per_query(ax: Axes, result: dict[str, Any]) -> None:
    per = result["summary"]["per_query"]
    names = list(per)
    xs = np.arange(len(names))
    width = 0.4

    def values(key: str) -> np.ndarray:
        return np.array([per[q].get(key) or 0.0 for q in names])

    own, shared = values("incremental_own_median"), values("incremental_shared_median")
    ax.bar(xs - width / 2, own, width, label="incremental: the view's own traces")
    ax.bar(xs - width / 2, shared, width, bottom=own, label="incremental: share of shared traces")
    ax.bar(xs + width / 2, values("spark_sql_refresh_median"), width, label="Spark SQL recompute")
    ax.set_xticks(xs, names, rotation=90, fontsize=8)
    ax.set_ylabel("seconds per epoch (median; trace seconds summed over threads)")
    ax.set_title("per query, refresh epochs")
    ax.legend(fontsize=8)


def plot_runs(ax: Axes, result: dict[str, Any]) -> None:
    runs = result["summary"]["runs"]
    xs = [r["epoch"] for r in runs]
    ax.plot(xs, [r["incremental_wall_seconds"] for r in runs], marker="o", label="Runtime.run()")
    ax.plot(xs, [r["spark_sql_seconds"] for r in runs], marker="^", label="Spark SQL, 22 queries")
    refresh = [r for r in runs if "spark_sql_plus_apply_seconds" in r]
    ax.plot(
        [r["epoch"] for r in refresh],
        [r["spark_sql_plus_apply_seconds"] for r in refresh],
        marker="^",
        linestyle=":",
        label="Spark SQL + rewriting orders, lineitem",
    )
    ax.set_yscale("log")
    ax.set_xticks(xs, ["load" if x == 0 else str(x) for x in xs])
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds")
    ax.set_title("all views up to date")
    ax.legend(fontsize=8)


def plot_jobs(ax: Axes, result: dict[str, Any]) -> None:
    runs = result["summary"]["runs"]
    xs = [r["epoch"] for r in runs]
    ax.plot(xs, [r["spark_jobs"] for r in runs], marker="o", label="Spark jobs")
    ax.plot(xs, [r["spark_stages"] for r in runs], marker="s", label="stages (incl. skipped)")
    ax.set_xticks(xs, ["load" if x == 0 else str(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("epoch")
    ax.set_title("Spark jobs per incremental run")
    ax.legend(fontsize=8)


# ------------------------------------------------------------------ CLI


def parse_args(argv: list[str]) -> tuple[BenchConfig, Path | None, bool]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    p.add_argument("--epochs", type=int, default=3, help="refresh epochs (default 3)")
    p.add_argument(
        "--fraction", type=float, default=0.001, help="orders inserted and deleted per epoch"
    )
    p.add_argument("--quick", action="store_true", help="smoke run: SF 0.01, 2 epochs")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", type=Path, default=None, help="where the scratch data goes")
    p.add_argument("--keep", action="store_true", help="keep the scratch data")
    a = p.parse_args(argv)
    cfg = BenchConfig(
        scale=0.01 if a.quick else a.scale,
        epochs=2 if a.quick else a.epochs,
        fraction=a.fraction,
        seed=a.seed,
    )
    return cfg, a.workdir, a.keep


def main(argv: list[str] | None = None) -> None:
    cfg, workdir, keep = parse_args(sys.argv[1:] if argv is None else argv)
    run_recorded(
        NAME,
        lambda spark, root: run_benchmark(spark, cfg, root),
        plot,
        workdir,
        keep,
        count_jobs=True,
    )


if __name__ == "__main__":
    main()
