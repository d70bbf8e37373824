"""The failpoint spec the crash tests write: which hit acts, and how."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException

from dd_etl.failpoints import Armed, failpoint, parse_spec, rearm
from dd_etl.spark_memory import exhausted


def test_a_failpoint_kills_at_its_hit_pauses_there_or_raises() -> None:
    spec = "append.committed=3, tick.sources_appended=1:pause,merge.step_committed,a.job=2+:oom"
    assert parse_spec(spec) == {
        "append.committed": Armed(3),
        "tick.sources_appended": Armed(1, "pause"),
        "merge.step_committed": Armed(1),
        "a.job": Armed(2, "oom", onwards=True),
    }
    assert parse_spec("") == {}
    with pytest.raises(ValueError, match="unknown action 'explode'"):
        parse_spec("a=1:explode")


def test_an_out_of_memory_failpoint_raises_as_spark_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """At its hit only, or from it on: what the batch writer tells from a bug."""
    monkeypatch.setenv("DD_ETL_FAILPOINTS", "once.job=2:oom,always.job=1+:oom")
    rearm()
    try:
        failpoint("once.job")
        with pytest.raises(PySparkException) as raised:
            failpoint("once.job")
        assert exhausted(raised.value) == "SparkOutOfMemoryError"
        failpoint("once.job")
        for _ in range(3):
            with pytest.raises(PySparkException):
                failpoint("always.job")
    finally:
        monkeypatch.delenv("DD_ETL_FAILPOINTS")
        rearm()
