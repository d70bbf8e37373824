"""Errors are rendered once, for every ``dd-etl`` command: the message as one
paragraph on standard error and the exit status of the error's class, the same
under ``dd-etl trace …`` as under the pipeline commands. No Spark here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.cli.render import root_cause
from dd_etl.errors import InvariantViolation
from dd_etl.spark import SPARK_LOGS_ENV
from dd_etl.trace import delta_log
from dd_etl.trace.errors import TraceError
from tests.test_errors import broken_state

PIPELINE = """\
name: p
warehouse: wh
sources:
  payments: {format: csv, path: data, schema: {id: bigint, amount: bigint}}
views:
  total: {sql: "SELECT COUNT(*) AS n FROM payments"}
"""


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stderr


def fail_with(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Reading any trace's log, or a pipeline's status, raises ``error``."""

    def raises(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(delta_log, "load", raises)
    monkeypatch.setattr("dd_etl.pipeline.status.pipeline_status", raises)


def test_a_trace_error_exits_alike_under_trace_and_pipeline_commands(
    pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_with(monkeypatch, TraceError("trace 'total': its log cannot be read"))
    under_trace = invoke("trace", "status", str(tmp_path / "wh" / "views" / "total"))
    under_pipeline = invoke("status", str(pipeline))
    assert under_trace == under_pipeline
    code, stderr = under_trace
    assert code == TraceError.exit_code == 3
    assert stderr.strip() == "error: trace 'total': its log cannot be read"


def test_a_missing_trace_is_rendered_as_one_paragraph(tmp_path: Path) -> None:
    code, stderr = invoke("trace", "status", str(tmp_path / "nothing"))
    assert code == 3
    assert stderr.strip() == f"error: no dd_etl trace at {tmp_path / 'nothing'}"


def test_a_broken_invariant_exits_70_with_its_evidence(
    pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvariantViolation) as info:
        broken_state().check()
    fail_with(monkeypatch, info.value)
    for args in (["trace", "status", str(tmp_path)], ["status", str(pipeline)]):
        code, stderr = invoke(*args)
        assert code == 70, stderr
        assert "internal error: trace invariant 'batches are contiguous'" in stderr
        assert "batch b2 starts at {2}" in stderr
        assert "Traceback" not in stderr


def test_an_unexpected_exception_is_an_internal_error(
    pipeline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_with(monkeypatch, KeyError("upper"))
    monkeypatch.setenv(SPARK_LOGS_ENV, "")  # --debug sets it: restored after the test
    code, stderr = invoke("status", str(pipeline))
    assert code == 70
    assert "KeyError: 'upper' (an internal error; `dd-etl --debug …` shows where)" in stderr
    code, stderr = invoke("--debug", "status", str(pipeline))
    assert code == 70
    assert "Traceback" in stderr


def test_usage_errors_keep_exit_status_2(pipeline: Path) -> None:
    assert invoke("status")[0] == 2
    assert invoke("rebuild", str(pipeline))[0] == 2


def test_an_error_from_sparks_jvm_is_shown_by_its_cause() -> None:
    """Not by the py4j call that carried it (``o75224.getResult``)."""
    text = (
        "An error occurred while calling o75224.getResult.\n"
        ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
        "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:70)\n"
        "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages\n"
        "Caused by: java.lang.ArithmeticException: / by zero\n"
    )
    assert root_cause(text) == "java.lang.ArithmeticException: / by zero"
    short = "An error occurred while calling o1.sql.\n: org.apache.spark.SparkException: bad\n"
    assert root_cause(short) == "org.apache.spark.SparkException: bad"
    assert root_cause("a plain message\nand more") == "a plain message"
