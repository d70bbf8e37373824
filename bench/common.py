"""What every benchmark shares: its Spark session and the environment it records."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import matplotlib
import pyspark
from pyspark.sql import SparkSession

from dd_etl.spark import session


def spark_session(
    name: str, memory: str = "4g", count_jobs: bool = False, object_storage: bool = False
) -> SparkSession:
    """Local Spark on two cores, as on the CI machine; ``count_jobs`` keeps every
    job's record so jobs per run can be counted from the status tracker;
    ``object_storage`` adds the ``s3a://`` filesystem's jars."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": memory,
    }
    if count_jobs:
        conf |= {"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000"}
    return session(name, master="local[2]", conf=conf, object_storage=object_storage)


def code_version() -> str | None:
    """The commit measured, marked ``+changes`` when the code differed from it, so a
    sequence recorded over several runs tells which code measured which part."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "dd_etl", "*.py")
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout
    return commit + ("+changes" if changed else "")


def environment(spark: SparkSession, **extra: Any) -> dict[str, Any]:
    """Versions and machine facts recorded next to the results."""
    return {
        "code": code_version(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "spark": spark.version,
        "deltalake": deltalake.__version__,
        "matplotlib": matplotlib.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "spark_master": spark.sparkContext.master,
        "load_average_1_5_15min": [round(x, 1) for x in os.getloadavg()],
        **extra,
    }


def recorded_argv(argv: list[str] | None = None) -> list[str]:
    """The command's arguments as a result records them: the scratch and results
    directories' paths are this machine's, not part of what was measured, and
    stay out."""
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args):
        for flag in ("--workdir", "--results"):
            if arg == flag and i + 1 < len(args):
                args[i + 1] = "DIR"
            elif arg.startswith(f"{flag}="):
                args[i] = f"{flag}=DIR"
    return args


RESULTS = Path(__file__).resolve().parent / "results"


def write_json(name: str, result: dict[str, Any], results: Path = RESULTS) -> None:
    """Record ``result`` as ``results/<name>.json`` (also called with partial results)."""
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")


def run_recorded(
    name: str,
    benchmark: Callable[[SparkSession, Path], dict[str, Any]],
    plot: Callable[[dict[str, Any], Path], None],
    workdir: Path | None,
    keep: bool,
    memory: str = "4g",
    count_jobs: bool = False,
    reuse: Path | None = None,
    results: Path = RESULTS,
    object_storage: bool = False,
) -> None:
    """Run ``benchmark`` in a scratch directory on its own session, then record its
    result as JSON and a plot under ``results`` (default ``results/``). ``reuse``
    names the scratch directory of an earlier run (kept with ``keep``) to work in
    again; it is kept."""
    root = reuse or Path(tempfile.mkdtemp(prefix=f"{name}_", dir=workdir))
    spark = spark_session(f"bench_{name}", memory, count_jobs, object_storage)
    try:
        result = benchmark(spark, root)
        write_json(name, result, results)
        plot(result, results / f"{name}.png")
        print(f"wrote {results / (name + '.json')} and {results / (name + '.png')}")
    finally:
        spark.stop()
        if keep or reuse:
            print(f"scratch data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
