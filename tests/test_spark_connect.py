"""dd_etl through a real Spark Connect server (``dd_etl.spark_connect``), against the
same pipeline on the classic session this process shares: the CLI over several
epochs with a run killed in between, and Dagster's tick, audit and backfill jobs.

PySpark makes a process that opened a Connect session a Connect client for good,
so everything on the server runs in child processes; the classic side runs here."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dd_etl import spark_connect
from dd_etl.lake import Location
from dd_etl.pipeline import open_pipeline
from dd_etl.pipeline.config import load_config
from dd_etl.pipeline.tick import run_tick
from dd_etl.spark_driver.connect import calls_not_deterministic, range_splits, size_in_bytes
from tests.support import tpch_pipeline as tpch
from tests.support.pipeline_fixtures import BY_PC_SQL, change_data, write_pipeline
from tests.support.s3_pipelines import credentials, on_store, upload
from tests.support.s3_server import S3Server
from tests.support.tpch_data import SEED, history_of
from tests.support.tpch_reference import Reference

ROOT = Path(__file__).resolve().parent.parent
TAXI = ROOT / "assets" / "taxi"
VIEWS = ("fares_by_passengers", "trips_by_borough", "reachable_from_zone_1")
SINKS = ("fares_by_passengers", "trips_by_borough", "trips_by_borough_changes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("connect_server")
    url = spark_connect.start(
        state,
        port=free_port(),
        master="local[2]",
        conf={"spark.ui.enabled": "false"},
        object_storage=True,
    )
    try:
        yield url
    finally:
        spark_connect.stop(state)


def child_env(url: str, **more: str) -> dict[str, str]:
    env = {**os.environ, "DD_ETL_SERVER": "off", "DD_ETL_SPARK_REMOTE": url, **more}
    env.pop("DD_ETL_SPARK_MASTER", None)
    return env


def dd_etl(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dd_etl.cli", *args],
        cwd=ROOT,
        env=child_env(url, **env),
        capture_output=True,
        text=True,
        timeout=900,
    )


def started(url: str, *args: str) -> subprocess.Popen[str]:
    """``dd-etl ARGS`` as a Spark Connect client of ``url``, left to run."""
    return subprocess.Popen(
        [sys.executable, "-m", "dd_etl.cli", *args],
        cwd=ROOT,
        env=child_env(url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def taxi_copy(root: Path) -> Path:
    """The demo pipeline under ``root``, its warehouse beside it."""
    root.mkdir(parents=True)
    text = (TAXI / "pipeline.yaml").read_text()
    lines = [
        "warehouse: warehouse" if line.startswith("warehouse:") else line
        for line in text.splitlines()
    ]
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n")
    return root / "pipeline.yaml"


def generate(root: Path, epoch: int) -> None:
    subprocess.run(
        [sys.executable, str(TAXI / "generate.py"), str(root / "data"), "--epoch", str(epoch)],
        check=True,
        capture_output=True,
    )


def rounded(rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> Counter[str]:
    """Rows as a bag, floats to 9 significant digits: sums of doubles depend on
    the order Spark adds them in."""

    def value(v: Any) -> Any:
        return float(f"{v:.9g}") if isinstance(v, float) else str(v) if v is not None else None

    return Counter(
        json.dumps({k: value(v) for k, v in r.items() if k not in drop}, sort_keys=True)
        for r in rows
    )


def table_rows(where: Location) -> Counter[str]:
    table = DeltaTable(where.uri, storage_options=where.delta_options)
    return rounded(table.to_pyarrow_table().to_pylist())


def test_plans_read_as_spark_explains_them() -> None:
    cost = "== Optimized Logical Plan ==\nProject [x#4L], Statistics(sizeInBytes=1.5 KiB)\n"
    assert size_in_bytes(cost) == 1536
    assert size_in_bytes("Statistics(sizeInBytes=8.0 EiB)") == 2**63 - 1
    assert size_in_bytes("no statistics") == 2**63 - 1
    assert range_splits("*(1) Range (0, 1, step=1, splits=2)") == 2
    extended = "== Analyzed Logical Plan ==\nProject [rand(-34) AS r#8, `rand`#2, rand#3]\n"
    assert calls_not_deterministic(extended)
    assert not calls_not_deterministic("Project [operand(x#1) AS y#2, rand#3]")
    assert not calls_not_deterministic("== Optimized Logical Plan ==\nrand(1)")


def test_an_unreachable_connect_server_is_a_clear_error(tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, "connect_unreachable", by_pc_sql=BY_PC_SQL)
    change_data(tmp_path, 0)
    url = f"sc://localhost:{free_port()}"
    done = dd_etl(url, "run", str(pipeline))
    assert done.returncode == 3, done.stderr
    assert f"no Spark Connect server answers at {url}" in done.stderr
    assert not (tmp_path / "warehouse").exists() or not any((tmp_path / "warehouse").iterdir())


@pytest.mark.spark
@pytest.mark.slow
def test_the_taxi_pipeline_over_spark_connect_equals_classic_spark(
    connect_url: str,
    spark: SparkSession,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Connect side keeps its warehouse, sources and sinks on S3: the server
    and its client share no disk; the classic side keeps them on the local disk."""
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    remote = on_store(taxi_copy(tmp_path / "remote"), s3_server, bucket)
    classic = taxi_copy(tmp_path / "classic")
    for epoch in range(2):
        generate(tmp_path / "staged", epoch)
        upload(tmp_path / "staged" / "data", s3_server, bucket)
        if epoch == 1:  # killed after its third trace commit, then completed
            killed = dd_etl(connect_url, "run", str(remote), DD_ETL_FAILPOINTS="append.committed=3")
            assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        done = dd_etl(connect_url, "run", str(remote), "--profile")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Spark jobs not reported by Spark connect" in done.stdout + done.stderr
        if epoch == 1:
            assert "completed interrupted epoch 1" in done.stderr

        generate(classic.parent, epoch)
        run_tick(open_pipeline(classic, spark))

    # the traces the Connect runs wrote, read here as the classic ones are
    written, expected = open_pipeline(remote, spark), open_pipeline(classic, spark)
    for view in VIEWS:
        rows = [[r.asDict() for r in p.runtime.read(view).collect()] for p in (written, expected)]
        assert rounded(rows[0]) == rounded(rows[1]), view
    for sink in SINKS:
        on_s3 = load_config(remote).location(sink, f"s3://{bucket}/out/{sink}")
        local = Location.of(classic.parent / "out" / sink)
        assert table_rows(on_s3) == table_rows(local), sink
    # the other commands, in one Connect client (a process each would start one)
    p = str(remote)
    said = commands(
        connect_url,
        ["read", p, "trips_by_borough", "--format", "json"],
        ["changes", p, "trips_by_borough", "--from", "1", "--to", "2", "--format", "json"],
        ["explain", p, "reachable_from_zone_1"],
        ["restate", p, "zones"],
        ["compact", p],
        ["verify", p],
        ["rebuild", p, "reachable_from_zone_1"],
        ["run", p],
        ["read", p, "reachable_from_zone_1", "--format", "json"],
        ["status", p, "--json"],
    )
    read, changes, explain, restate, _, _, rebuilt, _, reach, status = said
    by_borough = [r.asDict() for r in expected.runtime.read("trips_by_borough").collect()]
    assert rounded(json.loads(read)) == rounded(by_borough)
    moved = [  # the command names each change's time its epoch
        {("_epoch" if k == "_time" else k): v for k, v in r.asDict().items()}
        for r in expected.runtime.changes("trips_by_borough", 1, 2).collect()
    ]
    assert moved and rounded(json.loads(changes)) == rounded(moved)
    assert "iterate" in explain.lower(), explain
    assert "nothing to restate" in restate, restate
    assert "rebuilt reachable_from_zone_1" in rebuilt, rebuilt
    reachable = [r.asDict() for r in expected.runtime.read("reachable_from_zone_1").collect()]
    assert rounded(json.loads(reach)) == rounded(reachable)
    assert json.loads(status)["last_tick"]["epoch"] == 2  # the run after the rebuild
    assert sorted(p.name for p in remote.parent.iterdir()) == ["pipeline.yaml"]


COMMANDS_SCRIPT = textwrap.dedent(
    """\
    import json, sys

    from typer.testing import CliRunner

    from dd_etl.cli import app

    said = []
    for args in json.loads(sys.argv[1]):
        result = CliRunner().invoke(app, args)
        if result.exit_code != 0:
            sys.exit(f"{args}: exit {result.exit_code}\\n{result.stdout}{result.stderr}")
        said.append(result.stdout)
    print(json.dumps(said))
    """
)


def commands(url: str, *commands: list[str]) -> list[str]:
    """The standard output of each ``dd-etl`` command, run one after another in one
    process, a Spark Connect client of ``url``; each must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", COMMANDS_SCRIPT, json.dumps(commands)],
        cwd=ROOT,
        env=child_env(url),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return said


DAGSTER_SCRIPT = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path

    import dagster as dg
    from deltalake import DeltaTable

    from dd_etl.dagster import SparkResource, pipeline_definitions
    from tests.support.pipeline_fixtures import bag, change_data, oracle

    pipeline, url, epochs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    root = pipeline.parent
    defs = pipeline_definitions([pipeline], spark=SparkResource(remote=url))
    instance = dg.DagsterInstance.ephemeral()

    def by_pc():  # the materialized view, and what the oracle says it holds
        rows = DeltaTable(str(root / "out" / "by_pc")).to_pyarrow_table().to_pylist()
        return [sorted(bag(rows).elements()), sorted(oracle(root, "by_pc").elements())]

    out = {"ticks": []}
    for epoch in range(epochs):
        change_data(root, epoch)
        tick = defs.resolve_job_def("e2e_tick").execute_in_process(instance=instance)
        out["ticks"].append({
            "success": tick.success,
            "checks": [e.passed for e in tick.get_asset_check_evaluations()],
            "jobs": [
                m.metadata["run cost"].value["spark_jobs"]
                for m in tick.asset_materializations_for_node("e2e_assets")
                if "run cost" in m.metadata
            ],
            "by_pc": by_pc(),
        })
    audit = defs.resolve_job_def("e2e_audit").execute_in_process(instance=instance)
    out["audit"] = [e.passed for e in audit.get_asset_check_evaluations()]
    config = {"ops": {"e2e_rebuild_op": {"config": {"views": ["by_pc"]}}}}
    rebuild = defs.resolve_job_def("e2e_rebuild").execute_in_process(
        instance=instance, run_config=config
    )
    out["rebuild"] = rebuild.success
    out["by_pc"] = by_pc()
    print(json.dumps(out))
    """
)


@pytest.mark.spark
@pytest.mark.slow
def test_dagster_jobs_over_spark_connect(connect_url: str, tmp_path: Path) -> None:
    """Three ticks (each with its checks), the audit and a rebuild, in one process
    (a Connect client each would be started again)."""
    pipeline = write_pipeline(tmp_path, "connect_dagster", by_pc_sql=BY_PC_SQL)
    script = tmp_path / "dagster_over_connect.py"
    script.write_text(DAGSTER_SCRIPT)
    ran = subprocess.run(
        [sys.executable, str(script), str(pipeline), connect_url, "3"],
        cwd=tmp_path,
        env={**child_env(connect_url), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    for epoch, tick in enumerate(out["ticks"]):
        assert tick["success"] and tick["checks"] and all(tick["checks"]), (epoch, tick)
        assert set(tick["jobs"]) == {None}, epoch  # not reported over Connect, not guessed
        got, expected = tick["by_pc"]
        assert got == expected, epoch
    assert len(out["ticks"]) == 3
    assert out["audit"] and all(out["audit"]), out
    assert out["rebuild"], out
    got, expected = out["by_pc"]
    assert got == expected


@pytest.mark.spark
@pytest.mark.slow
def test_sparks_paths_over_connect_write_what_classic_spark_writes(
    connect_url: str, spark: SparkSession, tpch_local_run: Reference, tmp_path: Path
) -> None:
    """TPC-H views with every run on Spark's executors (``sizing:`` lowered, as for
    large data): the load as a large interval, the next epoch as a medium one,
    batches written by Spark, materialized tables written whole by Spark then
    merged into, spine merges made by Spark (``compact``). Over Connect every
    trace, table and feed holds what the same pipeline on classic Spark holds
    (whose views equal DuckDB's), row for row, in as many batches."""
    history = history_of(random.Random(SEED))
    remote = tmp_path / "remote"
    for epoch, (taken, sizing) in enumerate(tpch.STEPS):
        for e in taken:
            tpch.write_epoch(remote, e, history[e])
        tpch.pipeline_file(remote, tpch.VIEWS, sizing)
        run = started(connect_url, "run", str(remote / "pipeline.yaml"), "--profile")
        out, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-3000:]
        assert f"({'large' if epoch == 0 else 'medium'} interval)" in out + err, err[-3000:]
    compact = started(connect_url, "compact", str(remote / "pipeline.yaml"))
    _, err = compact.communicate(timeout=900)
    assert compact.returncode == 0, err[-3000:]
    classic = tpch_local_run
    assert classic.merged
    assert tpch.batches(remote) == classic.batches
    assert len(classic.traces) > 20 and tpch.traces(remote) == classic.traces
    outputs = tpch.outputs(spark, remote, tpch.VIEWS)
    assert classic.outputs and outputs == classic.outputs
    for path, rows in outputs.items():  # the tables hold the views as DuckDB has them
        if path.startswith("out/"):
            assert rows == classic.last[path.removeprefix("out/")], path
