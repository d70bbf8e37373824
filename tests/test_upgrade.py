"""An upgrade as a user meets it: a warehouse an earlier release wrote (kept in
``tests/fixtures/upgrade``, made by that release) taken on by this one's
``dd-etl run``. The views whose plans this release changed (CHANGELOG lists
them) are rebuilt, no other; every view, materialized table and change feed is
then what a pipeline run by this release from the start holds, epoch by epoch,
and stays so as later epochs run incrementally."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.pipeline import open_pipeline
from tests.support.upgrade_fixture import (
    EPOCHS_KEPT,
    FEEDS,
    FIXTURE,
    MATERIALIZED,
    VIEWS,
    new_pipeline,
    pin_file_times,
    write_epoch,
)

pytestmark = pytest.mark.spark

CHANGED_SINCE_FIXTURE = {"borough_links", "busiest_links"}
"""The views whose plans changed since the fixture's release (as CHANGELOG says)."""


def run(pipeline: Path) -> str:
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 0, result.stderr
    return result.stderr


def bag(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The rows, their doubles to 9 places: a SUM of doubles depends on the
    order it adds them in, which the traces' batches do not fix."""
    rounded = [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
    return Counter(tuple(sorted(r.items())) for r in rounded)


def table(path: Path) -> Counter[tuple[Any, ...]]:
    return bag(DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def view(pipeline: Path, name: str) -> Counter[tuple[Any, ...]]:
    return bag([r.asDict() for r in open_pipeline(pipeline).runtime.read(name).collect()])


def test_a_warehouse_of_an_earlier_release_is_carried_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    kept, fresh = tmp_path / "kept", tmp_path / "fresh"
    shutil.copytree(FIXTURE, kept)
    pin_file_times(kept)
    fresh_pipeline = new_pipeline(fresh)
    for epoch in range(EPOCHS_KEPT):
        write_epoch(fresh, epoch)
        run(fresh_pipeline)
    kept_pipeline = kept / "pipeline.yaml"
    assert set(open_pipeline(kept_pipeline).runtime.changed_plans()) == CHANGED_SINCE_FIXTURE
    for epoch in (EPOCHS_KEPT, EPOCHS_KEPT + 1):
        for root in (kept, fresh):
            write_epoch(root, epoch)
        said = run(kept_pipeline)
        run(fresh_pipeline)
        rebuilt = {v for v in VIEWS if f"rebuilt {v}:" in said}
        if epoch == EPOCHS_KEPT:  # the changed views and what reads them, once
            reading = open_pipeline(kept_pipeline).runtime.dependants(sorted(CHANGED_SINCE_FIXTURE))
            assert rebuilt == set(reading), said
        else:
            assert rebuilt == set(), said
        for name in VIEWS:
            assert view(kept_pipeline, name) == view(fresh_pipeline, name), (epoch, name)
        for name in MATERIALIZED:
            assert table(kept / "out" / name) == table(fresh / "out" / name), (epoch, name)
        # the feeds: every epoch's changes, those before the upgrade kept as they were
        for name in FEEDS:
            feed = f"{name}_changes"
            assert table(kept / "out" / feed) == table(fresh / "out" / feed), (epoch, name)
