"""The TPC-H pipeline of ``tpch_pipeline`` run on the tests' local Spark through
its ``STEPS``, then compacted by Spark: what a cluster's and a Spark Connect
server's runs of it must hold, trace for trace and table for table.

Both tests compare against the same run (same seed, steps and sizing), so it is
made once per test session, by whichever test process asks first, and kept on
disk for the others (a file lock between pytest's worker processes)."""

from __future__ import annotations

import os
import pickle
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from pyspark.sql import SparkSession

from dd_etl.pipeline import open_pipeline
from dd_etl.pipeline.tick import run_tick
from dd_etl.trace.maintenance import maintain_warehouse
from tests.support import tpch_pipeline as tpch
from tests.support.sql_oracle import Row, duckdb_results, mismatches
from tests.support.tpch import DDL
from tests.support.tpch_data import QUERIES, SEED, history_of, tables_after


@dataclass(frozen=True)
class Reference:
    batches: dict[str, int]
    traces: dict[str, Counter[Row]]
    outputs: dict[str, Counter[Row]]
    last: dict[str, Counter[Row]]
    """Each view as DuckDB computes it from the sources after the last step."""
    merged: bool
    """The compaction merged some trace's batches."""


def shared_directory(basetemp: Path) -> Path:
    """Where every test process of this session may find what one of them made:
    pytest-xdist gives each worker a directory under a common one."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def reference(spark: SparkSession, shared: Path) -> Reference:
    """The reference run's result, made here unless another process made it."""
    kept = shared / "tpch_reference.pickle"
    with FileLock(str(shared / "tpch_reference.lock")):
        if not kept.exists():
            made = _run(spark, shared / "tpch_reference")
            kept.write_bytes(pickle.dumps(made))
        loaded: Reference = pickle.loads(kept.read_bytes())
    return loaded


def _run(spark: SparkSession, root: Path) -> Reference:
    history = history_of(random.Random(SEED))
    for taken, sizing in tpch.STEPS:
        for e in taken:
            tpch.write_epoch(root, e, history[e])
        run_tick(open_pipeline(tpch.pipeline_file(root, tpch.VIEWS, sizing), spark))
    merged = maintain_warehouse(spark, root / "wh", None, 24.0, driver_merged=0)
    after = tables_after(history)
    expected = duckdb_results([after[taken[-1]] for taken, _ in tpch.STEPS], DDL, QUERIES)
    runtime = open_pipeline(root / "pipeline.yaml", spark).runtime
    assert not mismatches(runtime, tpch.VIEWS, expected)  # the reference is right
    return Reference(
        batches=tpch.batches(root),
        traces=tpch.traces(root),
        outputs=tpch.outputs(spark, root, tpch.VIEWS),
        last=expected[-1],
        merged=any(r.batches_after < r.batches_before for r in merged),
    )
