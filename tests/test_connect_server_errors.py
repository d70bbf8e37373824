"""What a Spark Connect server lacks is the user's to set up, named as such (status
3), never an internal error: Delta Lake, a package of its Python workers, an
operation Connect refuses. The recogniser on the texts real servers gave; the
CLI's rendering of them; and ``dd-etl run`` against a real server that has
neither Delta's jars nor pyarrow in its Python workers, one run per lack."""

from __future__ import annotations

import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkNotImplementedError, PySparkValueError
from typer.testing import CliRunner

import dd_etl.cli.render as rendering
from dd_etl import spark_connect
from dd_etl.cli import app
from dd_etl.errors import PlanError, SourceError, SparkServerLacks
from dd_etl.spark_connect_errors import lacking
from tests.support.pipeline_fixtures import BY_PC_SQL, change_data, write_pipeline
from tests.test_spark_connect import dd_etl, free_port

SERVER = "sc://localhost:15002"

# What servers said (PySpark 4.2, Delta 4.4), trimmed to the lines that matter.
NO_JARS_READ = """\
(org.apache.spark.SparkClassNotFoundException) [DATA_SOURCE_NOT_FOUND] Failed to find \
the data source: delta. Make sure the provider name is correct and the package is \
properly registered and compatible with your Spark version. SQLSTATE: 42K02
JVM stacktrace:
org.apache.spark.SparkClassNotFoundException
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.dataSourceNotFoundError(\
QueryExecutionErrors.scala:790)
Caused by: java.lang.ClassNotFoundException: delta.DefaultSource
"""
NO_JARS_MERGE = """\
[TABLE_OR_VIEW_NOT_FOUND] The table or view `delta`.`/data/out/by_pc` cannot be found. \
Verify the spelling and correctness of the schema and catalog.
Search path: [`system`.`builtin`, `system`.`session`, `spark_catalog`.`default`].
'MergeIntoTable ('t.trip_id = 's.trip_id), [deleteaction(None)], false
:- 'SubqueryAlias t
:  +- 'UnresolvedRelation [delta, /data/out/by_pc], [__required_write_privileges__=DELETE]
"""
NO_JARS_BUT_CATALOG = """\
Cannot find catalog plugin class for catalog 'spark_catalog': \
org.apache.spark.sql.delta.catalog.DeltaCatalog.
JVM stacktrace:
org.apache.spark.SparkException
Caused by: java.lang.ClassNotFoundException: org.apache.spark.sql.delta.catalog.DeltaCatalog
"""
NO_EXTENSION_READ = """\
[DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG] This Delta operation requires \
the SparkSession to be configured with the
DeltaSparkSessionExtension and the DeltaCatalog. Please set the necessary
configurations when creating the SparkSession as shown below.
"""
NO_EXTENSION_MERGE = """\
[UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY] Unsupported data source type for direct query \
on files: delta SQLSTATE: 0A000; line 1 pos 11
JVM stacktrace:
org.apache.spark.sql.AnalysisException
"""
NO_PYARROW = """\
  An exception was thrown from the Python worker. Please see the stack trace below.
[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent \
call last):
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 3602, in main
    func, profiler, deserializer, serializer = read_udfs(
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 2530, in read_udfs
    import pyarrow as pa
ModuleNotFoundError: No module named 'pyarrow'
 SQLSTATE: 38000
"""
LATERAL_USING = """\
[UNSUPPORTED_FEATURE.LATERAL_JOIN_USING] The feature is not supported: JOIN USING with \
LATERAL correlation. SQLSTATE: 0A000
== SQL (line 1, position 26) ==
SELECT * FROM range(3) a JOIN LATERAL (SELECT 1 AS id) USING (id)
"""


def lack(error: BaseException) -> SparkServerLacks:
    found = lacking(error, SERVER)
    assert found is not None, error
    assert found.exit_code == 3 and found.server == SERVER
    return found


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (NO_JARS_READ, "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta"),
        (NO_JARS_MERGE, "The table or view `delta`.`/data/out/by_pc`"),
        (NO_JARS_BUT_CATALOG, "org.apache.spark.sql.delta.catalog.DeltaCatalog"),
        (NO_EXTENSION_READ, "[DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG]"),
        (NO_EXTENSION_MERGE, "direct query on files: delta"),
    ],
)
def test_a_server_without_delta_is_told_with_the_jars_it_needs(text: str, said: str) -> None:
    found = lack(RuntimeError(text))
    assert found.lacks == "Delta Lake"
    assert found.message.startswith(f"the Spark Connect server at {SERVER} has no Delta Lake (")
    assert said in found.message
    assert "--packages io.delta:delta-spark_4." in found.message
    assert "--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in found.message
    assert "`python -m dd_etl.spark_connect start STATE_DIR`" in found.message


def test_python_workers_without_a_package_are_told_where_to_install_it() -> None:
    found = lack(RuntimeError(NO_PYARROW))
    assert found.lacks == "pyarrow"
    assert f"the Python workers of the Spark Connect server at {SERVER} lack pyarrow" in (
        found.message
    )
    assert "(ModuleNotFoundError: No module named 'pyarrow')" in found.message
    assert "PYSPARK_PYTHON in the server's environment" in found.message
    # PySpark's own check, as a worker reports it
    too_old = "PyArrow >= 18.0.0 must be installed; however, your version is 12.0.1."
    assert lack(RuntimeError(f"[PYTHON_EXCEPTION] {too_old}")).lacks == "pyarrow"
    # a module of this process that is missing is not the server's
    assert lacking(ModuleNotFoundError("No module named 'pyarrow'"), SERVER) is None


def test_an_operation_connect_refuses_is_named() -> None:
    mode = PySparkValueError(
        errorClass="UNSUPPORTED_OPERATION", messageParameters={"operation": "bogus"}
    )
    rdd = PySparkNotImplementedError(
        errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "rdd"}
    )
    for error, said in [
        (mode, "[UNSUPPORTED_OPERATION] bogus is not supported."),
        (rdd, "[NOT_IMPLEMENTED] rdd is not implemented."),
        (RuntimeError(LATERAL_USING), "[UNSUPPORTED_FEATURE.LATERAL_JOIN_USING] The feature"),
    ]:
        found = lack(error)
        assert found.message.startswith(
            f"Spark Connect does not support what dd_etl asked of the server at {SERVER}: {said}"
        ), found.message
    # one that dd_etl classified is that error's: a view's SQL is the view's to change
    try:
        raise PlanError("view 'v': its SQL cannot be planned") from RuntimeError(LATERAL_USING)
    except PlanError as e:
        assert lacking(e, SERVER) is None


def test_a_lack_is_found_under_the_error_dd_etl_raised() -> None:
    try:
        raise SourceError("trips", "its new data cannot be taken in") from RuntimeError(
            NO_JARS_READ
        )
    except SourceError as e:
        assert lack(e).lacks == "Delta Lake"


@pytest.mark.parametrize(
    "text",
    [
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `trips` cannot be found.",
        "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: avro.",
        "[PYTHON_EXCEPTION] ZeroDivisionError: division by zero",
        "java.lang.OutOfMemoryError: Java heap space",
    ],
)
def test_other_errors_show_no_lack(text: str) -> None:
    assert lacking(RuntimeError(text), SERVER) is None


def test_the_cli_renders_a_lack_only_over_spark_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "name: p\nwarehouse: wh\nsources:\n"
        "  payments: {format: csv, path: data, schema: {id: bigint}}\n"
    )

    def fails(*_: object, **__: object) -> None:
        raise RuntimeError(NO_PYARROW)

    monkeypatch.setattr("dd_etl.pipeline.status.pipeline_status", fails)
    classic = CliRunner().invoke(app, ["status", str(pipeline)])
    assert classic.exit_code == 70, classic.stderr
    monkeypatch.setattr(rendering, "connect_server", lambda: SERVER)
    remote = CliRunner().invoke(app, ["status", str(pipeline)])
    assert remote.exit_code == 3, remote.stderr
    assert remote.stderr.startswith(
        f"error: the Python workers of the Spark Connect server at {SERVER} lack pyarrow"
    )


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server started without Delta, whose Python workers run a Python without
    pyarrow (PySpark itself reaches them from the Spark the server runs)."""
    root = tmp_path_factory.mktemp("bare_server")
    venv.EnvBuilder(with_pip=False).create(root / "python")
    python = root / "python" / "bin" / "python"
    assert subprocess.run([python, "-c", "import pyarrow"], capture_output=True).returncode != 0
    state = root / "state"
    url = spark_connect.start(
        state,
        port=free_port(),
        master="local[1]",
        conf={"spark.ui.enabled": "false"},
        delta=False,
        python=str(python),
    )
    try:
        yield url
    finally:
        spark_connect.stop(state)


def nothing_committed(root: Path) -> bool:
    return not list((root / "warehouse").rglob("*.parquet")) and not (root / "out").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_on_a_server_without_delta_says_so(bare_server: str, tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, "connect_without_delta", by_pc_sql=BY_PC_SQL)
    change_data(tmp_path, 0)
    done = dd_etl(bare_server, "run", str(pipeline))
    assert done.returncode == 3, done.stderr[-3000:]
    said = done.stderr[done.stderr.index("error:") :]
    assert f"the Spark Connect server at {bare_server} has no Delta Lake" in said
    assert "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta" in said
    assert "--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in said
    assert "internal error" not in said
    assert nothing_committed(tmp_path)


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_whose_executors_lack_pyarrow_says_so(bare_server: str, tmp_path: Path) -> None:
    """No run small (``sizing:``): Spark's executors write the traces' batches, in
    Python (``executor_writes``). Parquet only: the server has no Delta."""
    records = 100
    (tmp_path / "data" / "trips").mkdir(parents=True)
    trips = pa.table({"trip_id": range(records), "pc": [i % 3 for i in range(records)]})
    pq.write_table(trips, tmp_path / "data" / "trips" / "t0.parquet")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "name: wide\nwarehouse: warehouse\nsources:\n"
        "  trips: {format: parquet, path: data/trips, key: [trip_id]}\n"
        f'views:\n  by_pc: {{sql: "{BY_PC_SQL}"}}\n'
        "sizing: {small_records: 0, small_bytes: 0}\n"
    )
    done = dd_etl(bare_server, "run", str(pipeline))
    assert done.returncode == 3, done.stderr[-3000:]
    said = done.stderr[done.stderr.index("error:") :]
    assert f"the Python workers of the Spark Connect server at {bare_server} lack pyarrow" in said
    assert "No module named 'pyarrow'" in said and "PYSPARK_PYTHON" in said
    assert "internal error" not in said
