"""Spark's JVM writes its class archive once, at the first process's exit, and later
processes map it; neither prints anything of it. It collects garbage for throughput."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl import delta_jars, jvm_archive
from dd_etl.jvm_archive import (
    ARCHIVE_ENV,
    JAVA_OPTIONS,
    Archive,
    archive_for,
    tunes_jvm,
    with_archive,
    with_java_options,
)
from dd_etl.spark import DRIVER_GC

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import sys
from pyspark import SparkContext
from dd_etl.spark import session

spark = session("dd_etl-archive", "local[1]", {"spark.ui.enabled": "false"})
jvm = SparkContext._gateway.proc.pid
with open(f"/proc/{jvm}/maps") as maps:
    mapped = sys.argv[1] in maps.read()
print(spark.range(5).selectExpr("sum(id)").first()[0], mapped)
"""


def test_archive_is_written_where_configured_and_used_once_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    archive = archive_for({})
    assert archive is not None and archive.path.parent == tmp_path
    assert f"-XX:ArchiveClassesAtExit={archive.pending}" in archive.java_options()
    archive.path.write_bytes(b"x")
    assert f"-XX:ArchiveClassesAtExit={archive.pending}" in archive.java_options()  # as decided
    written = archive_for({})
    assert written is not None and not written.writes
    assert f"-XX:SharedArchiveFile={archive.path}" in written.java_options()


def test_archive_options_keep_the_deployments_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert archive_for({}) is None
    monkeypatch.delenv(ARCHIVE_ENV)
    assert archive_for({"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}) is None
    options = with_archive({JAVA_OPTIONS: "-Dx=1"}, Archive(Path("a.jsa"), writes=False))
    assert options[JAVA_OPTIONS].startswith("-Dx=1 -XX:")


def test_the_driver_collects_for_throughput_unless_the_deployment_tunes_the_jvm(
    spark: SparkSession,
) -> None:
    """The tests' own session was started with no JVM options of the deployment's."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # type: ignore[union-attr]
    assert {beans.get(i).getName() for i in range(beans.size())} == {"PS Scavenge", "PS MarkSweep"}
    assert tunes_jvm({"spark.driver.extraJavaOptions": "-XX:+UseG1GC"})
    assert tunes_jvm({JAVA_OPTIONS: "-Dx=1 -XX:+UseZGC"})
    assert not tunes_jvm({JAVA_OPTIONS: "-Dx=1"})
    tuned = with_java_options({JAVA_OPTIONS: "-Dx=1"}, DRIVER_GC)
    assert tuned[JAVA_OPTIONS] == f"-Dx=1 {DRIVER_GC}"


def test_a_class_path_of_its_own_gets_an_archive_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    plain, extended = archive_for({}), archive_for({"spark.driver.extraClassPath": "/x.jar"})
    assert plain is not None and extended is not None and plain.path != extended.path


def test_only_what_no_process_will_use_again_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead writer's temporary archive, and an archive of another installation
    unused for long; the archive in use is marked used whatever its age."""
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    current = archive_for({})
    assert current is not None
    stale, fresh = tmp_path / "spark-a.jsa.1.tmp", tmp_path / "spark-a.jsa.2.tmp"
    unused, recent = tmp_path / "spark-b.jsa", tmp_path / "spark-c.jsa"
    long_ago = time.time() - jvm_archive.UNUSED_SECONDS - 1
    for path in (stale, fresh, unused, recent, current.path):
        path.write_bytes(b"x")
    for path in (stale, unused, current.path):
        os.utime(path, (long_ago, long_ago))
    archive_for({})
    assert not stale.exists() and fresh.exists()
    assert not unused.exists() and recent.exists()
    assert current.path.exists() and current.path.stat().st_mtime > long_ago + 1


def _child(archives: Path, path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ARCHIVE_ENV: str(archives), "PYTHONPATH": str(ROOT)}
    env.pop("DD_ETL_SPARK_LOGS", None)
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the JVM's memory map")
def test_first_process_writes_the_archive_and_the_next_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path))
    archive = archive_for(delta_jars.spark_options())  # the class path every session has
    assert archive is not None
    path = archive.path

    first = _child(tmp_path, path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "10 False\n"  # nothing of the JVM's own on standard output
    assert path.exists() and not list(tmp_path.glob("*.tmp"))

    second = _child(tmp_path, path)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "10 True\n"
