"""Spark's JVM starts from a class data sharing archive of the classes it loaded before.

Starting Spark in a fresh process is mostly the JVM loading, verifying and
linking its classes, and every ``dd-etl`` command pays it. The JDK can
write the classes a process loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map them from there in later processes
(``-XX:SharedArchiveFile``): on a 2-core machine that took a session's start and
first two queries from about 10.5 s to 6.5 s.

The first process on a machine (per Spark installation and JDK) writes the
archive as its JVM exits: it waits for that at exit (about 15 s on a 2-core
machine, once) and then moves the archive into place in one rename, so a
reader never sees half of one. A process killed before it writes leaves at
most an unnamed temporary file, removed by a later start. A mismatched or
unreadable archive is not an error: the JVM then runs without it.

``DD_ETL_JVM_ARCHIVE`` names the directory to keep archives in (the user's cache
directory by default), or ``off``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen, TimeoutExpired

from pyspark.find_spark_home import _find_spark_home
from pyspark.version import __version__ as PYSPARK_VERSION

ARCHIVE_ENV = "DD_ETL_JVM_ARCHIVE"
JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
"""Spark prepends these to ``spark.driver.extraJavaOptions``, which stays the user's."""
CLASSPATH_OPTIONS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages")
QUIET = "-Xlog:cds*=off"
"""The JVM logs to standard output, which carries command output (e.g. ``--json``)."""
STALE_SECONDS = 600
"""A temporary archive this old belongs to a process that died before moving it."""
UNUSED_SECONDS = 30 * 24 * 3600
"""An archive no process has started from for this long is removed (one is kept
per Spark installation and JDK, and a virtual environment is an installation)."""
WRITE_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Archive:
    """The archive for one Spark installation, JDK and class path, and whether this
    process's JVM writes it (decided once: another process may finish it meanwhile)."""

    path: Path
    writes: bool

    @property
    def pending(self) -> Path:
        """Where this process's JVM writes the archive at exit."""
        return self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")

    def java_options(self) -> str:
        if self.writes:
            return f"-XX:ArchiveClassesAtExit={self.pending} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {QUIET}"


def archive_for(options: Mapping[str, str]) -> Archive | None:
    """The archive a JVM started with ``options`` should use, or ``None`` if archives
    are off or have nowhere to go."""
    root = _directory()
    if root is None:
        return None
    if tunes_jvm(options):
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    path = root / f"spark-{_key(options)}.jsa"
    _remove_stale(root, path)
    return Archive(path, writes=not path.exists())


def tunes_jvm(options: Mapping[str, str]) -> bool:
    """Whether the deployment sets JVM options (``-XX:``) itself: dd_etl then adds none."""
    given = options.get(JAVA_OPTIONS, "") + options.get("spark.driver.extraJavaOptions", "")
    return "-XX:" in given


def with_java_options(options: Mapping[str, str], *added: str) -> dict[str, str]:
    """``options`` with ``added`` after the driver's default JVM options."""
    return {**options, JAVA_OPTIONS: " ".join([options.get(JAVA_OPTIONS, ""), *added]).strip()}


def with_archive(options: Mapping[str, str], archive: Archive) -> dict[str, str]:
    """``options`` with the JVM told to use (or write) ``archive``."""
    return with_java_options(options, archive.java_options())


def keep_at_exit(archive: Archive, jvm: Popen[bytes] | None, stop: Callable[[], None]) -> None:
    """If ``jvm`` writes ``archive`` when it exits, end it at this process's exit
    (``stop`` first ends what runs on it), wait for the archive and move it into place."""
    if jvm is None or not archive.writes:
        return
    atexit.register(_finish, archive, jvm, stop)


def _finish(archive: Archive, jvm: Popen[bytes], stop: Callable[[], None]) -> None:
    pending = archive.pending
    try:
        stop()
        if jvm.stdin is not None:
            jvm.stdin.close()  # the gateway exits when its standard input closes
        jvm.wait(WRITE_TIMEOUT_SECONDS)
        if jvm.returncode == 0 and pending.exists() and pending.stat().st_size > 0:
            os.replace(pending, archive.path)
    except (OSError, TimeoutExpired):
        pass  # no archive this time: the next process tries again
    finally:
        pending.unlink(missing_ok=True)


def _directory() -> Path | None:
    configured = os.environ.get(ARCHIVE_ENV)
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dd_etl" / "jvm"


def _key(options: Mapping[str, str]) -> str:
    """What the archive is valid for: the JDK (the ``java`` Spark's scripts run),
    Spark's jars (names, sizes, times: the JVM checks the same) and anything added
    to the class path."""
    spark_home = Path(_find_spark_home())
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    java = os.path.realpath(java) if java else ""
    digest = hashlib.sha256()
    for part in (
        PYSPARK_VERSION,
        java,
        str(os.stat(java).st_mtime_ns) if os.path.exists(java) else "",
        str(spark_home),
        *(f"{k}={options.get(k, '')}" for k in CLASSPATH_OPTIONS),
    ):
        digest.update(part.encode() + b"\0")
    jars = spark_home / "jars"
    for jar in sorted(jars.iterdir()) if jars.is_dir() else []:
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def _remove_stale(root: Path, current: Path) -> None:
    """Mark ``current`` used; remove what no process will use again: a temporary
    archive its writer left, an archive of another Spark or JDK left unused."""
    now = time.time()
    with contextlib.suppress(OSError):  # not written yet
        os.utime(current)
    for path, age in [(p, STALE_SECONDS) for p in root.glob("*.tmp")] + [
        (p, UNUSED_SECONDS) for p in root.glob("spark-*.jsa") if p != current
    ]:
        try:
            if now - path.stat().st_mtime > age:
                path.unlink()  # a JVM that maps it keeps its mapping
        except OSError:
            pass  # another process removed or moved it
