"""Spark Declarative Pipelines (SDP) as a peer of dd_etl: the same views, kept by
``pyspark.pipelines`` as materialized views.

SDP runs over Spark Connect only: ``spark-pipelines run`` starts a Spark Connect
server of its own (``--remote local``) in a new JVM for every run, then sends the
pipeline to it. Timing that would time a JVM's start. A data engineer refreshing
a pipeline again and again keeps one server, so ``SdpPeer`` starts one local
server for the whole benchmark (``spark-submit --class ...SparkConnectServer``,
on free ports, with the benchmark session's master, driver memory and SQL
settings) and refreshes the pipeline through the same Python entry points the
CLI uses (``pyspark/pipelines/cli.py``: ``create_dataflow_graph``,
``register_definitions``, ``start_run``, then the run's events): one refresh is
what ``spark-pipelines run --spec ... --remote sc://...`` does, minus starting
the client.

The pipeline is a spec file and one SQL file per view
(``CREATE MATERIALIZED VIEW <view> AS <the peer's SQL>``) over two tables
registered in the server's catalog, ``trips`` and ``zones``, both external
parquet tables: ``point(table, path)`` moves ``trips`` to the directory the
benchmark rewrote for the epoch. In open-source Spark a refresh recomputes
every materialized view in full, as the plain Spark SQL peer does, but through
SDP's graph and its writes of the views as managed tables.

Everything it writes (spec, SQL, pipeline storage, warehouse, the server's log)
goes under the directory it is given; ``close`` stops the server.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark
from spark_metrics import SparkWork, UiJobs, measured

from dd_etl import spark_connect

DATABASE = "bench"
"""The server's database holding the source tables and the materialized views."""
FLOW_EVENT = re.compile(r"^Flow (\S+) (?:is|has) ([A-Z_]+)\.?$")


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick of an ephemeral port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Refresh:
    """One run of the pipeline: seconds in all, of them defining the graph
    (``create_dataflow_graph`` + ``register_definitions``), each flow's seconds
    from its RUNNING to its COMPLETED event (server clock), and the Spark work."""

    seconds: float
    graph_seconds: float
    flows: dict[str, float]
    events: int
    work: SparkWork

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "graph_seconds": self.graph_seconds,
            "flows": self.flows,
            "events": self.events,
            **self.work.to_json(),
        }


def require_pipelines() -> None:
    """Fail before starting a server if PySpark's Connect client or SDP cannot load:
    they need packages beyond PySpark's own (its ``pipelines`` extra: grpcio,
    grpcio-status, googleapis-common-protos, zstandard, PyYAML)."""
    try:
        for module in ("pyspark.sql.connect.session", "pyspark.pipelines.cli"):
            importlib.import_module(module)
    except ImportError as e:
        raise RuntimeError(
            f"Spark Declarative Pipelines cannot load ({e}): install pyspark[pipelines], "
            "or leave the SDP peer out"
        ) from e


class SdpPeer:
    """A local Spark Connect server with the pipeline of ``views`` (name -> SQL over
    ``trips`` and ``zones``); a context manager that stops the server on exit."""

    def __init__(
        self,
        root: Path,
        views: Mapping[str, str],
        master: str,
        driver_memory: str,
        conf: Mapping[str, str],
        start_timeout: float = 180.0,
    ) -> None:
        require_pipelines()
        self.root = root
        self.views = dict(views)
        self.root.mkdir(parents=True, exist_ok=True)
        self.grpc_port = free_port()
        self.ui_port = free_port()
        self.log_path = root / "server.log"
        self.spec_path = self._write_pipeline()
        self._process: subprocess.Popen[bytes] | None = None
        self._session: Any = None
        started = time.perf_counter()
        try:
            self._start(master, driver_memory, conf, start_timeout)
        except BaseException:
            self.close()  # a server that started, or half did, must not outlive us
            raise
        self.start_seconds = round(time.perf_counter() - started, 3)
        self.jobs = UiJobs(f"http://localhost:{self.ui_port}", self._marker_job)

    # ------------------------------------------------------------ server

    def _start(
        self, master: str, driver_memory: str, conf: Mapping[str, str], timeout: float
    ) -> None:
        """Launch the server as ``dd_etl.spark_connect`` does (``spark-submit``
        inside the pyspark package, Spark's settings as a dd_etl session has them),
        wait for its gRPC port, then connect a Spark Connect session."""
        settings = {
            **conf,
            "spark.ui.enabled": "true",  # for its REST API: the run's jobs and stages
            "spark.ui.port": str(self.ui_port),
            "spark.port.maxRetries": "0",  # a taken port fails, not moves elsewhere
            "spark.ui.retainedJobs": "100000",
            "spark.ui.retainedStages": "100000",
            "spark.sql.warehouse.dir": str(self.root / "warehouse"),
        }
        command = spark_connect.server_command(self.grpc_port, master, settings, driver_memory)
        spark_home = Path(pyspark.__file__).parent
        env = {**os.environ, "SPARK_HOME": str(spark_home)}
        with self.log_path.open("wb") as log:
            # a session of its own: an interrupt of the benchmark reaches the
            # benchmark, whose ``close`` then stops the server
            self._process = subprocess.Popen(
                command,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not spark_connect.listening(self.grpc_port):
            if self._process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Spark Connect server after {timeout}s:\n{self._log_tail()}")
            time.sleep(0.25)
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        self._session = ConnectSession.builder.remote(f"sc://localhost:{self.grpc_port}").create()

    def _log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Disconnect, then stop the server: SIGTERM, and SIGKILL if it lingers."""
        if self._session is not None:
            with contextlib.suppress(Exception):  # the server may be gone already
                self._session.stop()
            self._session = None
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)

    def __enter__(self) -> SdpPeer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _marker_job(self, tag: str) -> None:
        """One small Spark job carrying the job tag ``tag`` (see ``UiJobs``)."""
        self._session.addTag(tag)
        try:
            self._session.range(0, 2, 1, 2).write.format("noop").mode("overwrite").save()
        finally:
            self._session.removeTag(tag)

    # ------------------------------------------------------------ pipeline

    def _write_pipeline(self) -> Path:
        """The spec and one SQL file per view, as ``spark-pipelines init`` lays them out."""
        pipeline = self.root / "pipeline"
        (pipeline / "transformations").mkdir(parents=True, exist_ok=True)
        storage = (self.root / "storage").resolve().as_uri()  # SDP wants a URI here
        spec = pipeline / "spark-pipeline.yml"
        spec.write_text(
            f"name: bench_views\nstorage: {storage}\ndatabase: {DATABASE}\n"
            "libraries:\n  - glob:\n      include: transformations/**\n"
        )
        for view, sql in self.views.items():
            body = "\n".join(line.strip() for line in sql.strip().splitlines())
            text = f"CREATE MATERIALIZED VIEW {view} AS\n{body};\n"
            (pipeline / "transformations" / f"{view}.sql").write_text(text)
        return spec

    def point(self, table: str, path: Path) -> float:
        """Register ``table`` in the server's catalog as the parquet data at ``path``,
        or move it there; returns the seconds taken."""
        started = time.perf_counter()
        name = f"{DATABASE}.{table}"
        location = str(path.resolve()).replace("'", "\\'")
        self._session.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}").collect()
        if self._session.catalog.tableExists(name):
            self._session.sql(f"ALTER TABLE {name} SET LOCATION '{location}'").collect()
        else:
            self._session.sql(f"CREATE TABLE {name} USING parquet LOCATION '{location}'").collect()
        return round(time.perf_counter() - started, 3)

    def refresh(self) -> Refresh:
        """One run of the pipeline, as ``spark-pipelines run`` does it (a new dataflow
        graph, its definitions, the run), timed and measured."""
        (graph_seconds, events), seconds, work = measured(self.jobs, self._run)
        return Refresh(
            seconds=seconds,
            graph_seconds=graph_seconds,
            flows=flow_seconds(events),
            events=len(events),
            work=work,
        )

    def _run(self) -> tuple[float, list[tuple[datetime, str]]]:
        from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
        from pyspark.pipelines.spark_connect_graph_element_registry import (
            SparkConnectGraphElementRegistry,
        )
        from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

        started = time.perf_counter()
        spec = load_pipeline_spec(self.spec_path)
        graph = create_dataflow_graph(
            self._session,
            default_catalog=spec.catalog,
            default_database=spec.database,
            sql_conf=spec.configuration,
        )
        registry = SparkConnectGraphElementRegistry(self._session, graph)
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines, not ours
            register_definitions(self.spec_path, registry, spec, self._session, graph)
        defined = time.perf_counter()
        events: list[tuple[datetime, str]] = []
        for result in start_run(
            self._session,
            graph,
            full_refresh=[],
            full_refresh_all=False,
            refresh=[],
            dry=False,
            storage=spec.storage,
        ):
            # what ``handle_pipeline_events`` prints, kept instead
            if "pipeline_event_result" in result:
                event = result["pipeline_event_result"].event
                events.append((event.timestamp.ToDatetime(), event.message))
        last = events[-1][1] if events else ""
        if not last.startswith("Run is COMPLETED"):
            messages = "\n".join(m for _, m in events)
            raise RuntimeError(f"the pipeline run did not complete:\n{messages}")
        return round(defined - started, 3), events

    def read(self, view: str) -> Any:
        """The materialized view as a Spark Connect DataFrame."""
        return self._session.table(f"{DATABASE}.{view}")


def flow_seconds(events: list[tuple[datetime, str]]) -> dict[str, float]:
    """Per flow (by its last name part), seconds from RUNNING to COMPLETED."""
    running: dict[str, datetime] = {}
    out: dict[str, float] = {}
    for at, message in events:
        match = FLOW_EVENT.match(message)
        if match is None:
            continue
        flow, state = match.group(1).rsplit(".", 1)[-1], match.group(2)
        if state == "RUNNING":
            running[flow] = at
        elif state == "COMPLETED" and flow in running:
            out[flow] = round((at - running[flow]).total_seconds(), 3)
    return out
