"""One error model: every error dd_etl defines derives from ``DdEtlError`` and
carries the exit status of its kind; a trace's broken invariant is a bug of
dd_etl (``InvariantViolation``, exit 70) that states its evidence."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from dd_etl.errors import (
    ConfigError,
    DdEtlError,
    HistoryLost,
    InvariantViolation,
    PipelineError,
    PlanError,
    SourceError,
)
from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.trace import delta_log
from dd_etl.trace.audit import audit
from dd_etl.trace.batch import Batch
from dd_etl.trace.description import Description
from dd_etl.trace.errors import TraceError, TraceNotFound
from dd_etl.trace.state import TraceState
from tests.test_imports import modules


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def error_classes() -> list[type[BaseException]]:
    """Every exception class a module of dd_etl defines."""
    found = []
    for name in modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_every_error_of_dd_etl_derives_from_the_base() -> None:
    classes = error_classes()
    names = {c.__name__ for c in classes}
    assert {"TraceError", "StaleVersion", "SqlError", "PlanChanged", "TickRunning"} <= names
    # A BaseException that is no Exception is a signal, as SystemExit is, never
    # shown to a user (the server's SettingsDiffer, and its NeedsFullCompiler): not
    # an error.
    errors = [c for c in classes if issubclass(c, Exception)]
    strays = [f"{c.__module__}.{c.__qualname__}" for c in errors if not issubclass(c, DdEtlError)]
    assert strays == []
    assert sorted(c.__name__ for c in classes if c not in errors) == [
        "NeedsFullCompiler",
        "SettingsDiffer",
    ]
    assert all(isinstance(c.exit_code, int) for c in classes if issubclass(c, DdEtlError))


def test_exit_statuses_follow_the_kind_of_error() -> None:
    from dd_etl.plan.sql.errors import SqlError
    from dd_etl.runtime.runner import PlanChanged

    statuses = {
        ConfigError: 2,
        PlanError: 2,
        SqlError: 2,
        PipelineError: 3,
        SourceError: 3,
        TraceError: 3,
        TraceNotFound: 3,
        HistoryLost: 4,
        PlanChanged: 4,
        InvariantViolation: 70,
    }
    assert {c: c.exit_code for c in statuses} == statuses
    assert issubclass(PlanError, ValueError)  # as before the common base


def test_the_message_is_one_paragraph() -> None:
    error = SourceError("trips", "its new data cannot be taken in:\n  bad value 'x'")
    assert error.message == "source 'trips': its new data cannot be taken in: bad value 'x'. " + (
        "Nothing was committed."
    )


def broken_state() -> TraceState:
    """Two batches with a gap between them: [0, 1) then [2, 3)."""
    state = TraceState.new("t", 1, ("k",), "{}")
    first = Batch("b1", Description(e(0), e(1), e(0)), 1)
    second = Batch("b2", Description(e(2), e(3), e(0)), 1)
    return replace(state, batches=(first, second), upper=e(3))


def test_a_broken_trace_invariant_is_an_internal_error_with_its_evidence() -> None:
    with pytest.raises(InvariantViolation) as info:
        broken_state().check()
    error = info.value
    assert error.exit_code == 70
    assert not isinstance(error, TraceError)  # never blamed on the data
    assert "batches are contiguous" in error.message
    assert "batch b2 starts at {2}, the upper of batch b1 is {1}" in error.message
    assert "bug in dd_etl" in error.message


def test_since_past_a_hold_is_an_internal_error() -> None:
    state = TraceState.new("t", 1, ("k",), "{}").register_reader("r", e(1), e(1))
    batch = Batch("b", Description(e(0), e(2), e(0)), 0)
    compacted_too_far = replace(state, since=e(2), upper=e(2), batches=(batch,))
    with pytest.raises(InvariantViolation, match=r"since is \{2\}, reader 'r' holds \{1\}"):
        compacted_too_far.check()


def test_the_audit_reports_a_broken_state_from_the_log(tmp_path: Path) -> None:
    uri = Location.of(tmp_path / "t")
    delta_log.create(uri, broken_state(), pa.schema([("k", pa.int64())]))
    report = audit(uri)
    assert not report.ok
    (problem,) = report.problems
    assert problem.startswith("trace invariant 'batches are contiguous' does not hold")
    assert "batch b2 starts at {2}" in problem
