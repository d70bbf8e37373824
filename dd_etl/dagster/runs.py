"""What every dd_etl op of a Dagster run does: open the pipeline on the resource's
Spark, log its progress, and turn dd_etl's errors into Dagster failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from dd_etl.dagster.resources import SparkResource
from dd_etl.errors import DdEtlError
from dd_etl.lake.failures import store_failure
from dd_etl.pipeline.config import load_config
from dd_etl.pipeline.progress import Progress

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline

Log = Callable[[str], None]


def logged_progress(log: Log) -> tuple[Progress, dict[str, float]]:
    """Progress to the run's log; and the seconds from the start until each view's
    last trace was written (its Spark time: a view's jobs overlap its neighbours')."""
    started = time.monotonic()
    finished: dict[str, float] = {}
    lock = threading.Lock()

    def progress(step: str, detail: str, done: float = 1.0) -> None:
        if done >= 1.0:
            with lock:
                if step.startswith("view:"):
                    finished[step.removeprefix("view:")] = time.monotonic() - started
            log(f"{step}: {detail}" if detail else step)

    return progress, finished


def open_for(file: Path, spark: SparkResource) -> Pipeline:
    """The pipeline on the resource's Spark (its own settings unless overridden)."""
    from dd_etl.pipeline.build import open_pipeline

    loaded = load_config(file)
    settings = loaded.config.spark
    session = spark.session(
        settings.master, settings.conf, settings.remote, object_storage=loaded.object_storage
    )
    return open_pipeline(file, session)


@contextmanager
def failures() -> Iterator[None]:
    """dd_etl's errors as Dagster failures: the one-paragraph message in the UI, with
    the error's kind and the exit status ``dd-etl`` would give it as metadata; no
    retry (re-running the same request fails the same way). Other exceptions are
    bugs: Dagster shows them with their stack trace."""
    try:
        yield
    except DdEtlError as e:
        raise failure(type(e).__name__, e.message, e.exit_code) from e
    except Exception as e:
        store = store_failure(e)
        if store is None:
            raise
        raise failure(type(store).__name__, store.message, store.exit_code) from e


def failure(kind: str, message: str, exit_code: int) -> dg.Failure:
    return dg.Failure(
        description=message,
        metadata={"error": kind, "exit_status": exit_code},
        allow_retries=False,
    )
