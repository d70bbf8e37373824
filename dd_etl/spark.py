"""The SparkSession dd_etl runs on: one per process, configured for Delta-compatible output.

Spark's JVM writes its own lines to standard error from the moment it starts (the
log4j banner, "Setting default log level", warnings about native libraries and
loopback addresses, the JVM's note on incubator modules), before any log level can
be set; and PySpark logs every SQL error it raises, as JSON with the JVM's stack
trace, before dd_etl even sees the error. They say nothing to a user of dd_etl and
bury its messages, so the JVM is started with its standard error kept aside and
PySpark's error loggers are silenced, unless ``DD_ETL_SPARK_LOGS`` is set
(``dd-etl --debug`` sets it). If the JVM does not start, what it wrote is shown.
A session whose settings name no driver memory gets one sized to the machine,
and local Spark pages sized for many small hash tables (``spark_memory``). The
JVM starts from an archive of the classes it loaded before (``jvm_archive``),
with the throughput collector (``DRIVER_GC``); a server's, with the quick compiler
only (``QUICK_COMPILER``) until a command is too large for it.

A session may instead be a Spark Connect client (``remote``, or
``DD_ETL_SPARK_REMOTE``: ``sc://host:port``): the driver is then a server
elsewhere, set up with Delta and the static settings below
(``spark_connect`` starts one here); the client sets the settings a session may
change, and one only the server can have, with another value there, is a
warning naming it. PySpark makes a process that opened a Connect session a Connect
client for good, so one process holds sessions of one kind.

A process that serves many commands (``dd_etl.server``) keeps its Spark only for
commands that ask for the settings it was started with: ``settings_must_match``
makes any other request raise ``SettingsDiffer`` instead of silently getting a
session configured for another pipeline, and a run too large for a quick JVM
raises ``NeedsFullCompiler`` (``full_compiler_for``) while nothing of its command
is done, so the command starts over on a server whose JVM compiles fully.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urlsplit

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from dd_etl import delta_jars, s3_jars
from dd_etl.errors import ConfigError, SparkUnavailable
from dd_etl.jvm_archive import (
    archive_for,
    keep_at_exit,
    tunes_jvm,
    with_archive,
    with_java_options,
)
from dd_etl.spark_memory import (
    DRIVER_MEMORY,
    FRACTION,
    PAGE_SIZE,
    driver_memory,
    local_page_size,
)

CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.ui.showConsoleProgress": "false",
    # PySpark otherwise records the Python call site of every DataFrame call in the
    # JVM (several round trips each): about a third of planning a run's ~1,500 calls.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark keeps the classes it generated for 100 plans by default: a run of a dozen
    # traces makes more, so every run compiled them all again (about 200 classes an
    # epoch at 10 M trips) and the JVM then compiled those to machine code anew.
    CODEGEN_CACHE: "4096",
    # Parquet's vectored reads fetch column chunks on threads Spark's input metrics
    # do not see: a stage scanning 857 KB reported 12 KB read. Runs report the
    # bytes they read (``profiling.py``), so reads stay on the task's thread.
    "spark.hadoop.parquet.hadoop.vectored.io.enabled": "false",
    # Delta replays a table's log in 50 partitions by default: 50 tasks for a log of
    # a few commits, each time a snapshot is computed.
    "spark.databricks.delta.snapshotPartitions": "2",
}
DRIVER_GC = "-XX:+UseParallelGC"
"""The driver's garbage collector, unless the deployment tunes the JVM itself. A
local Spark runs batches in the driver, where throughput is what counts, not the
pause times the JDK's default (G1) trades it for: on two cores a 1 M-row load
took 2-7 % less time, small epochs 4 % less, the demo's first run 0.4-0.9 s less."""
QUICK_COMPILER = "-XX:TieredStopAtLevel=1"
"""How a server's JVM compiles: with C1 only, no optimizing compiler (C2). C2 works
on Spark's code for the first minutes of a JVM, and on two cores it takes one
of them from the command: the demo's first run took 8.2-8.8 s against
10.9-11.6 s, its later runs 2.8-3.3 s against 2.9-4.3 s, and a fresh process
loading 1 M rows 15.1-15.6 s against 18.8-19.8 s. But C1's code is slower once
tasks run long: 10 M rows took 87 s against 54 s. A command that takes in more
than ``quick_records()`` therefore moves to a server that compiles fully. A
process of its own compiles fully: it may run anything, and cannot move."""
QUICK_RECORDS_ENV = "DD_ETL_JVM_QUICK_RECORDS"
"""The most records a run of a server's quick-compiling JVM takes in (default
2,000,000); ``0``: servers compile fully from the start."""
DEFAULT_QUICK_RECORDS = 2_000_000
MASTER_ENV = "DD_ETL_SPARK_MASTER"
"""The master of sessions whose pipeline names none (default ``local[*]``)."""
REMOTE_ENV = "DD_ETL_SPARK_REMOTE"
"""The Spark Connect server (``sc://host:port``) of every session not given one:
it sends a pipeline there whatever master its file names, as a deployment
decides where its Spark runs."""
CONNECT_SECONDS = 10.0
"""How long a Spark Connect server may take to accept a connection."""
SPARK_LOGS_ENV = "DD_ETL_SPARK_LOGS"
"""Set (to anything but empty) to let Spark's own output reach standard error."""
ERROR_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")
"""PySpark's loggers of the errors it raises (``PySparkException._log_exception``)."""

Settings = tuple[str, tuple[tuple[str, str], ...]]
"""A session's master (or Spark Connect URL) and the options asked for beyond the
defaults."""


class SettingsDiffer(BaseException):
    """A session was asked for with other settings than the running Spark's, in a
    process where they must match. A ``BaseException``: no command may handle it."""


class NeedsFullCompiler(SettingsDiffer):
    """A command of a server whose JVM compiles quickly (``QUICK_COMPILER``) takes in
    more than that JVM should run: it starts over on a server that compiles fully."""


class _Spark:
    """What this process's Spark was started with, and whether it is kept to it."""

    started: Settings | None = None
    must_match = False
    quick = False  # a JVM this process starts compiles quickly (a server's)
    compiler: str | None = None  # how the running JVM compiles: "quick" or "full"
    movable = False  # the running command may still start over on another JVM
    object_storage = False  # the running JVM has the jars of object stores


def session(
    app_name: str = "dd_etl",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
    *,
    object_storage: bool = False,
) -> SparkSession:
    """Get or create the process's SparkSession: a client of the Spark Connect
    server at ``remote`` (or ``DD_ETL_SPARK_REMOTE``, whatever ``master`` says),
    else on ``master`` (or ``DD_ETL_SPARK_MASTER``; local by default).
    ``object_storage`` adds the jars of the ``s3a://`` filesystem (``s3_jars``)."""
    remote = remote or os.environ.get(REMOTE_ENV) or None
    if remote is not None:
        return _connect(remote, conf or {})
    # Python workers (for the few Python reductions) run this interpreter, with
    # the same packages, unless the deployment says otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = delta_jars.spark_options()
    if object_storage:
        jars = s3_jars.with_jars(jars)
    options = {**DEFAULT_CONF, **jars, **(conf or {})}
    memory = driver_memory(options)
    if memory.chosen:
        options[DRIVER_MEMORY] = memory.value
    master = master or os.environ.get(MASTER_ENV, "local[*]")
    if master.startswith("local") and PAGE_SIZE not in options:
        cores = local_cores(master)
        options[PAGE_SIZE] = local_page_size(memory.value, cores, options.get(FRACTION))
    settings: Settings = (master, tuple(sorted((conf or {}).items())))
    if _starts_jvm():
        _Spark.started = settings
        _Spark.object_storage = object_storage
        _Spark.compiler = "full"  # unless made quick below
    elif _Spark.must_match and settings != _Spark.started:
        raise SettingsDiffer(f"Spark runs with {_Spark.started}, asked for {settings}")
    elif _Spark.must_match and object_storage and not _Spark.object_storage:
        raise SettingsDiffer("Spark runs without the jars of object stores, asked for them")
    quiet = not os.environ.get(SPARK_LOGS_ENV)
    if quiet:
        _silence_error_loggers()
    archive = None
    if _starts_jvm() and not tunes_jvm(options):  # else the deployment's own JVM options
        archive = archive_for(options)
        options = with_java_options(options, DRIVER_GC)
        if _Spark.quick and quick_records() > 0:
            options = with_java_options(options, QUICK_COMPILER)
            _Spark.compiler = "quick"
        if archive is not None:
            options = with_archive(options, archive)
    if quiet and _starts_jvm():
        _start_quietly(app_name, master, options)
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if archive is not None:
        keep_at_exit(archive, getattr(SparkContext._gateway, "proc", None), spark.stop)
    return spark


@contextmanager
def conf_applied(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """The session's SQL settings ``conf`` for the block, restored after."""
    saved: dict[str, str | None] = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in saved.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


def running_settings() -> Settings | None:
    """The settings this process's Spark was started with, if it was."""
    return _Spark.started


def settings_must_match() -> None:
    """From now on, a session asked for with other settings than the running Spark's
    raises ``SettingsDiffer``."""
    _Spark.must_match = True


def compile_quickly() -> None:
    """A JVM this process starts compiles quickly (``QUICK_COMPILER``): a server's,
    whose commands can move to another server when they are too large for it."""
    _Spark.quick = True


def compiler() -> str | None:
    """How this process's JVM compiles, ``quick`` or ``full``; None before it starts."""
    return _Spark.compiler


def quick_records() -> int:
    value = os.environ.get(QUICK_RECORDS_ENV) or str(DEFAULT_QUICK_RECORDS)
    if not value.strip().isdigit():
        reason = f"{value!r} is not a number of records (0: servers compile fully)"
        raise ConfigError("the environment", QUICK_RECORDS_ENV, reason)
    return int(value)


def command_movable(movable: bool) -> None:
    """Whether the running command may still start over on another JVM: true at its
    start, false once it completed something that starting over would repeat (a
    pipeline tick: ``dd-etl run --epochs 3`` must not run a fourth)."""
    _Spark.movable = movable


def full_compiler_for(records: int) -> None:
    """Raise ``NeedsFullCompiler`` if a run taking in ``records`` is too large for
    this JVM's quick compiler and its command can still start over elsewhere; a
    command that cannot runs on here, compiled as it is."""
    if _Spark.compiler == "quick" and _Spark.movable and records > quick_records():
        raise NeedsFullCompiler(f"{records} records are too many for a quick-compiling JVM")


def _connect(remote: str, conf: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session on ``remote``, with dd_etl's settings and ``conf``
    where a client may set them. The others (static SQL settings, Spark's core
    ones) are the server's, as they are a running session's in classic Spark: the
    server has dd_etl's if ``spark_connect`` started it, and each of ``conf`` not
    applied (the server has another value) is logged as a warning."""
    settings: Settings = (remote, tuple(sorted(conf.items())))
    if _Spark.started is None:
        _Spark.started = settings
    elif _Spark.must_match and settings != _Spark.started:
        raise SettingsDiffer(f"Spark runs with {_Spark.started}, asked for {settings}")
    if not os.environ.get(SPARK_LOGS_ENV):
        _silence_error_loggers()
    _wait_for_server(remote)
    spark = SparkSession.builder.remote(remote).getOrCreate()
    from pyspark.errors import AnalysisException

    for key, value in {**DEFAULT_CONF, **conf}.items():
        try:
            spark.conf.set(key, value)
        except AnalysisException:  # a static or core setting: the server's own
            if key in conf and spark.conf.get(key, None) != value:
                logging.getLogger("dd_etl").warning(
                    "warning: spark conf %s is set where the Spark Connect server at %s "
                    "starts, not by its clients: the pipeline's value is not applied",
                    key,
                    remote,
                )
    return spark


def _wait_for_server(remote: str) -> None:
    """Fail with ``SparkUnavailable`` unless the server at ``remote`` accepts a
    connection: PySpark's client would wait for one, retrying for minutes."""
    url = urlsplit(remote.split(";")[0].replace("sc://", "http://", 1))
    address = (url.hostname or "localhost", url.port or 15002)
    try:
        with socket.create_connection(address, timeout=CONNECT_SECONDS):
            return
    except OSError as e:
        raise SparkUnavailable(
            f"no Spark Connect server answers at {remote} ({e.strerror or e}): "
            "start it, or name another Spark (spark.remote, DD_ETL_SPARK_REMOTE)"
        ) from e


def local_cores(master: str) -> int:
    """The tasks local Spark of ``master`` (``local``, ``local[4]``, ``local[*]``)
    runs at once."""
    inside = master.partition("[")[2].partition("]")[0].split(",")[0].strip()
    if inside.isdigit():
        return int(inside)
    return 1 if inside == "" else os.cpu_count() or 1


def _starts_jvm() -> bool:
    """Whether creating a session now launches Spark's JVM: no context runs, no JVM
    is left from a stopped one, and PySpark was not started by ``spark-submit``."""
    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


def _silence_error_loggers() -> None:
    """The error still reaches dd_etl, which renders it once. The loggers must be
    PySpark's own class: it passes them keywords a plain ``Logger`` refuses."""
    from pyspark.logger import PySparkLogger

    for name in ERROR_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _start_quietly(app_name: str, master: str, options: Mapping[str, str]) -> None:
    """Launch the JVM with its standard error in an anonymous temporary file, and the
    process's SparkContext on it (the session builder then takes that context)."""
    conf = SparkConf().setAppName(app_name).setMaster(master).setAll(list(options.items()))
    with tempfile.TemporaryFile() as jvm_stderr:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": jvm_stderr})  # type: ignore[no-untyped-call]
        except Exception:
            jvm_stderr.seek(0)
            sys.stderr.write(jvm_stderr.read().decode(errors="replace"))
            raise
    SparkContext(conf=conf, gateway=gateway)
