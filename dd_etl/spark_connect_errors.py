"""What a Spark Connect server lacks, recognised from an error it caused.

Over Spark Connect the driver is a server that a deployment started, and one set
up short of what dd_etl needs fails deep inside a run, in Spark's own words: the
``delta`` data source not found, a Python worker that cannot import pyarrow, an
operation Connect refuses. None of it is a bug of dd_etl or a fault of the
pipeline, and the one who runs it can act only knowing what the server lacks:
``lacking`` names it and what to set up, from the texts of the error and of the
errors that caused it, wherever the error surfaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dd_etl.errors import DdEtlError, SparkServerLacks, error_texts

DELTA_SIGNS = (
    # started without Delta's jars: its data source and classes are not found
    re.compile(r"\[DATA_SOURCE_NOT_FOUND\] Failed to find the data source: delta\b"),
    re.compile(r"ClassNotFoundException: (?:io\.delta|org\.apache\.spark\.sql\.delta)\.[\w.$]+"),
    re.compile(r"catalog plugin class for catalog '\w+': org\.apache\.spark\.sql\.delta\.[\w.]+"),
    re.compile(r"\[TABLE_OR_VIEW_NOT_FOUND\] The table or view `delta`\.`[^`]*/[^`]*`"),
    # with the jars but not Delta's SQL extension and catalog
    re.compile(r"\[DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG\]"),
    re.compile(r"\[UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY\] [^\n]*direct query on files: delta\b"),
)
"""How Spark says that a server has no Delta Lake: no jars, or no extension."""

PYTHON_WORKER = re.compile(r"PYTHON_EXCEPTION|thrown from the Python worker")
"""An error raised in one of the server's Python workers, not in this process."""
PACKAGE_SIGNS = (
    re.compile(r"(?:ModuleNotFoundError: )?No module named '(?P<package>\w+)[\w.]*'"),
    re.compile(
        r"(?P<package>\w+) >= [\w.]+ must be installed; however, "
        r"(?:it was not found|your version is [\w.]+)"
    ),
)
"""How a Python worker says it cannot import a package, or has too old a one."""

UNSUPPORTED = re.compile(
    r"\[(?:NOT_IMPLEMENTED|UNSUPPORTED_OPERATION|JVM_ATTRIBUTE_NOT_SUPPORTED"
    r"|UNSUPPORTED_CONNECT_FEATURE|UNSUPPORTED_FEATURE)(?:\.\w+)?\][^\n]*"
)
"""An operation PySpark's Connect client (the first three) or the server refuses."""

SAID = 300
"""The most characters of Spark's words a message quotes."""


def lacking(error: BaseException, server: str) -> SparkServerLacks | None:
    """What the Spark Connect server at ``server`` lacks, as ``error`` (or an error
    that caused it) shows, as the error to report instead; None if it shows no lack.

    Delta Lake and a package of the server's Python workers are told whatever
    error carries them; an operation the server or client refuses only in an
    error dd_etl did not classify, since one it classified is that error's (a
    view's SQL using a feature Spark lacks is the view's to change)."""
    texts = list(error_texts(error))
    delta = _found(DELTA_SIGNS, texts)
    if delta is not None:
        return SparkServerLacks(server, "Delta Lake", _no_delta(server, delta.group(0)))
    for text in texts:
        if PYTHON_WORKER.search(text):
            package = _found(PACKAGE_SIGNS, [text])
            if package is not None:
                name = package.group("package").lower()
                return SparkServerLacks(server, name, _no_package(server, name, package.group(0)))
    if isinstance(error, DdEtlError):
        return None
    refused = _found((UNSUPPORTED,), texts)
    if refused is not None:
        return SparkServerLacks(server, "an operation", _unsupported(server, refused.group(0)))
    return None


def _no_delta(server: str, said: str) -> str:
    from dd_etl.delta_jars import EXTENSIONS, artifacts

    jars = ",".join(f"{a.group}:{a.name}:{a.version}" for a in artifacts())
    settings = " ".join(f"--conf {key}={value}" for key, value in EXTENSIONS.items())
    return (
        f"the Spark Connect server at {server} has no Delta Lake ({said[:SAID]}): start "
        f"it with Delta's jars and SQL extension (--packages {jars} {settings}), or "
        "start one with everything dd_etl needs: `python -m dd_etl.spark_connect start "
        "STATE_DIR`"
    )


def _no_package(server: str, package: str, said: str) -> str:
    return (
        f"the Python workers of the Spark Connect server at {server} lack {package} "
        f"({said[:SAID]}), which dd_etl's work on Spark's executors needs: install it "
        "into the Python the server starts its workers with (PYSPARK_PYTHON in the "
        "server's environment, or spark.pyspark.python), or point that at a Python "
        "that has it and start the server again; `python -m dd_etl.spark_connect start "
        "STATE_DIR` starts one whose workers run the Python dd_etl is installed in"
    )


def _unsupported(server: str, said: str) -> str:
    from pyspark.version import __version__ as pyspark_version

    return (
        f"Spark Connect does not support what dd_etl asked of the server at {server}: "
        f"{said[:SAID].rstrip('. ')}. Run the pipeline on a Spark of its own (no "
        "spark.remote in its file, DD_ETL_SPARK_REMOTE unset), or on a server running "
        f"Spark {pyspark_version}, the version of dd_etl's PySpark"
    )


def _found(signs: Sequence[re.Pattern[str]], texts: Sequence[str]) -> re.Match[str] | None:
    """The first of ``signs`` found in ``texts``, sign by sign."""
    for sign in signs:
        for text in texts:
            match = sign.search(text)
            if match is not None:
                return match
    return None
