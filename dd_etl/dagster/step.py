"""A tick of a pipeline's assets, run on a Spark that is already warm when there is one.

Dagster runs every run in a process of its own, so a step that started Spark
itself would pay Spark's start and a JVM compiling its code afresh on every
epoch. The step therefore goes to the dd_etl server of this installation, as a
``dd-etl`` command would (the hidden ``dd-etl dagster-step``), which runs it and
answers with its materializations and check results; its progress lines reach
the run's log as they come. It runs in this process instead when the server is
off (``DD_ETL_SERVER=off``), busy with another command, or cannot start. Both
ways run the same function (``run``), so the results are the same.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from dd_etl.dagster.checks import FRESHNESS, INVARIANTS, freshness_result, invariants_result
from dd_etl.dagster.dbt_nodes import test_results, test_views
from dd_etl.dagster.names import asset_key
from dd_etl.dagster.resources import SparkResource
from dd_etl.dagster.runs import Log, failure, failures, logged_progress, open_for
from dd_etl.errors import DdEtlError
from dd_etl.server import client, identity

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline

Result = dg.MaterializeResult[Any] | dg.AssetCheckResult
COMMAND = "dagster-step"
FAILURE_LINES = 20
"""Lines of the server's standard error a failure that is not a dd_etl error quotes."""


@dataclass(frozen=True)
class Step:
    """What one run of a pipeline's multi-asset asks for: the tables (sources and
    views) to materialize, the checks to evaluate, and the Spark resource's settings."""

    file: str
    tables: tuple[str, ...]
    checks: tuple[tuple[str, str], ...]
    """(table, check name) pairs."""
    max_lag: int = 0
    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    remote: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Step:
        given = json.loads(text)
        return cls(
            file=given["file"],
            tables=tuple(given["tables"]),
            checks=tuple((table, check) for table, check in given["checks"]),
            max_lag=int(given["max_lag"]),
            master=given["master"],
            conf=dict(given["conf"]),
            remote=given.get("remote"),
        )


def execute(step: Step, log: Log, warm_until: float | None = None) -> Iterator[Result]:
    """The step's results, from the server if it takes the step, else from this process.
    ``warm_until``: when the schedule's next tick is due, for the server to stay warm."""
    served = _served(step, log, warm_until)
    if served is not None:
        yield from served
        return
    if identity.enabled(os.environ):
        log(
            "the dd_etl server did not take the step (busy with another command, or it "
            "could not start): it runs in this run's process"
        )
    with failures():
        yield from run(step, log)


def run(step: Step, log: Log) -> Iterator[Result]:
    """The step, in this process: one ``run_tick`` over the selected tables, then the
    selected checks."""
    spark = SparkResource(master=step.master, remote=step.remote, conf=dict(step.conf))
    pipeline = open_for(Path(step.file), spark)
    sources = [s for s in pipeline.flow.sources if s in step.tables]
    views = [v for v in pipeline.flow.views if v in step.tables]
    tests = test_views(pipeline.loaded, [check for _, check in step.checks])
    if sources or views or tests:
        yield from materialize(pipeline, sources, views, log, tests)
    for table, check in step.checks:
        if check == INVARIANTS:
            yield invariants_result(pipeline, table)
        elif check == FRESHNESS:
            yield freshness_result(pipeline, table, step.max_lag)
    yield from test_results(pipeline, tests)


def materialize(
    pipeline: Pipeline, sources: list[str], views: list[str], log: Log, tests: Sequence[str] = ()
) -> Iterator[dg.MaterializeResult[Any]]:
    """The tick over ``sources`` and ``views`` (and the views of dbt ``tests``, which
    are checks, not assets), and the materializations of the assets."""
    from dd_etl.dagster.metadata import source_metadata, view_metadata
    from dd_etl.pipeline.tick import run_tick

    rt = pipeline.runtime
    lowers = {v: rt.trace(pipeline.flow.views[v]).reload().upper.epoch_bound() or 0 for v in views}
    progress, finished = logged_progress(log)
    report = run_tick(pipeline, progress, sources=sources, views=[*views, *tests])
    for view, why in report.rebuilt.items():
        log(f"rebuilt {view}: {why}")
    log(
        f"epoch {report.epoch}{' (completing an interrupted tick)' if report.resumed else ''}: "
        f"{'complete' if report.complete else 'open until its other assets run'}"
    )
    for source in sources:
        metadata = source_metadata(pipeline, source, report.epoch, report.sources[source])
        yield dg.MaterializeResult(asset_key=asset_key(pipeline.loaded, source), metadata=metadata)
    for view in views:
        metadata = view_metadata(
            pipeline,
            view,
            lowers[view],
            report.views.get(view, 0),
            finished.get(view, 0.0),
            report.refresh.get(view),
            report.profile,
        )
        yield dg.MaterializeResult(
            asset_key=asset_key(pipeline.loaded, view),
            metadata=metadata,
            data_version=dg.DataVersion(str(metadata["upper"])),
        )


def answer(step: Step) -> None:
    """Run ``step`` for a Dagster process that handed it over (``dd-etl dagster-step``):
    progress on standard error as it comes, then the results, or the dd_etl error
    that ended the step, as one line of JSON on standard output."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        results = list(run(step, log))
    except DdEtlError as e:
        error = {"kind": type(e).__name__, "message": e.message, "exit_code": e.exit_code}
        print(json.dumps({"error": error}), flush=True)
        raise SystemExit(e.exit_code) from e
    print(encode(results), flush=True)


def _served(step: Step, log: Log, warm_until: float | None) -> list[Result] | None:
    """The step's results from the server; None if it is to run in this process."""
    if not identity.enabled(os.environ):
        return None
    read_out, write_out = os.pipe()
    read_err, write_err = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    output: list[bytes] = []
    tail: deque[str] = deque(maxlen=FAILURE_LINES)
    readers = [
        threading.Thread(target=_collect, args=(read_out, output), daemon=True),
        threading.Thread(target=_forward, args=(read_err, log, tail), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        streams = (stdin, write_out, write_err)
        code = client.through_server([COMMAND, step.to_json()], streams, warm_until)
    finally:
        for fd in (stdin, write_out, write_err):
            os.close(fd)  # the server closed its copies: the readers reach the end
        for reader in readers:
            reader.join()
    if code is None:
        return None
    answered = answer_in(b"".join(output))
    if code == 0 and "results" in answered:
        return decode(answered)
    if "error" in answered:
        error = answered["error"]
        raise failure(error["kind"], error["message"], int(error["exit_code"]))
    if code == client.INTERRUPTED:
        raise dg.Failure(
            description="The dd_etl server stopped during the step (killed, or out of "
            "memory); the next run completes the interrupted epoch.",
        )
    quoted = "\n".join(tail)
    raise dg.Failure(description=f"The step failed in the dd_etl server (exit {code}):\n{quoted}")


def answer_in(output: bytes) -> dict[str, Any]:
    """The JSON line ``answer`` ends its output with; empty if the step ended before it."""
    lines = output.decode(errors="replace").strip().splitlines()
    try:
        answered = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return answered if isinstance(answered, dict) else {}


def _collect(fd: int, chunks: list[bytes]) -> None:
    with open(fd, "rb", closefd=True) as stream:
        chunks.append(stream.read())


def _forward(fd: int, log: Log, tail: deque[str]) -> None:
    with open(fd, encoding="utf-8", errors="replace", closefd=True) as stream:
        for line in stream:
            text = line.rstrip("\n")
            tail.append(text)
            log(text)


def encode(results: Sequence[Result]) -> str:
    """``results`` as one line of JSON (metadata in Dagster's own serialization)."""
    encoded: list[dict[str, Any]] = []
    for r in results:
        if isinstance(r, dg.MaterializeResult):
            assert r.asset_key is not None
            encoded.append(
                {
                    "kind": "materialization",
                    "asset_key": list(r.asset_key.path),
                    "metadata": _serialized(r.metadata),
                    "data_version": r.data_version.value if r.data_version else None,
                }
            )
        else:
            assert r.asset_key is not None
            encoded.append(
                {
                    "kind": "check",
                    "asset_key": list(r.asset_key.path),
                    "check_name": r.check_name,
                    "passed": r.passed,
                    "severity": r.severity.value,
                    "description": r.description,
                    "metadata": _serialized(r.metadata),
                }
            )
    return json.dumps({"results": encoded})


def _serialized(metadata: Mapping[str, Any] | None) -> str:
    values: Any = dict(metadata or {})  # MetadataValues and plain JSON values
    return dg.serialize_value(values)


def decode(answered: Mapping[str, Any]) -> list[Result]:
    results: list[Result] = []
    for r in answered["results"]:
        key = dg.AssetKey(r["asset_key"])
        metadata = dg.deserialize_value(r["metadata"], as_type=dict)
        if r["kind"] == "materialization":
            version = r["data_version"]
            results.append(
                dg.MaterializeResult(
                    asset_key=key,
                    metadata=metadata,
                    data_version=dg.DataVersion(version) if version is not None else None,
                )
            )
        else:
            results.append(
                dg.AssetCheckResult(
                    asset_key=key,
                    check_name=r["check_name"],
                    passed=r["passed"],
                    severity=dg.AssetCheckSeverity(r["severity"]),
                    description=r["description"],
                    metadata=metadata,
                )
            )
    return results
