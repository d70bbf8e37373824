"""A pipeline file as Dagster assets, materialized in-process on the shared Spark:
ticks over several epochs (results, metadata, checks), partial selections, the
backfill jobs (history load, rebuild, restatement) and the equivalence audit."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.dagster.runs import failures
from dd_etl.errors import DdEtlError, InvariantViolation
from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.pipeline import open_pipeline
from dd_etl.pipeline.lock import TickRunning, tick_lock
from dd_etl.pipeline.tick_record import last_tick
from dd_etl.pipeline.verify import compare, verify
from dd_etl.trace.audit import frontier_problems
from dd_etl.trace.errors import TraceNotFound
from dd_etl.trace.state import TraceState
from tests.support.pipeline_fixtures import (
    BY_PC_SQL,
    ZONES,
    bag,
    change_data,
    oracle,
    write_pipeline,
)

pytestmark = pytest.mark.spark

TRIPS, ZONES_KEY = dg.AssetKey(["e2e", "trips"]), dg.AssetKey(["e2e", "zones"])
BY_PC, ZONED = dg.AssetKey(["e2e", "by_pc"]), dg.AssetKey(["e2e", "zoned"])


def definitions(pipeline: Path) -> dg.Definitions:
    return pipeline_definitions([pipeline], spark=SparkResource())


def materializations(result: dg.ExecuteInProcessResult) -> dict[dg.AssetKey, dict[str, Any]]:
    return {
        m.asset_key: {k: v.value for k, v in m.metadata.items()}
        for m in result.asset_materializations_for_node("e2e_assets")
    }


def checks(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], bool]:
    return {
        (e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()
    }


def view_rows(spark: SparkSession, pipeline: Path, view: str) -> Counter[str]:
    rows = open_pipeline(pipeline, spark).runtime.read(view).collect()
    return bag([r.asDict() for r in rows])


def test_ticks_materialize_assets_with_lineage_metadata_and_checks(
    spark: SparkSession, tmp_path: Path
) -> None:
    pipeline = write_pipeline(tmp_path, "dg_ticks", by_pc_sql=BY_PC_SQL, zoned_refresh="auto")
    defs = definitions(pipeline)
    graph = defs.resolve_asset_graph()
    assert graph.get(BY_PC).parent_keys == {TRIPS}  # lineage read from the SQL
    assert graph.get(ZONED).parent_keys == {TRIPS, ZONES_KEY}
    tick = defs.resolve_job_def("e2e_tick")
    instance = dg.DagsterInstance.ephemeral()

    for epoch in range(3):
        change_data(tmp_path, epoch)
        result = tick.execute_in_process(instance=instance)
        assert result.success
        meta = materializations(result)
        assert set(meta) == {TRIPS, ZONES_KEY, BY_PC, ZONED}
        assert meta[TRIPS]["epoch"] == epoch and meta[TRIPS]["upper"] == epoch + 1
        assert meta[BY_PC]["epochs"] == f"{epoch}..{epoch}"
        assert meta[BY_PC]["upper"] == epoch + 1
        assert meta[BY_PC]["refresh"] == "incremental (refresh: incremental)"
        if epoch == 0:
            assert meta[ZONED]["refresh"].startswith("incremental (first build")
        else:
            assert "changed source records against" in meta[ZONED]["refresh"]
        assert meta[BY_PC]["rows out"] > 0 and meta[BY_PC]["rows in"] > 0
        assert meta[BY_PC]["dagster/row_count"] == sum(oracle(tmp_path, "by_pc").values())
        assert meta[ZONED]["dagster/row_count"] == sum(oracle(tmp_path, "zoned").values())
        assert "| pc | trips |" in meta[BY_PC]["preview"]
        assert any(name.startswith("views/by_pc") for name in meta[BY_PC]["trace batches"])
        assert meta[BY_PC]["spark seconds"] >= 0
        assert all(checks(result).values()) and len(checks(result)) == 6
        for view in ("by_pc", "zoned"):
            assert view_rows(spark, pipeline, view) == oracle(tmp_path, view), (epoch, view)
        tick_record = last_tick(Location.of(tmp_path / "warehouse"))
        assert tick_record is not None and tick_record.epoch == epoch

    # A run of part of the pipeline: trips and the view reading only trips move on
    # to epoch 3; zoned waits for zones, so the epoch stays open until a full tick.
    change_data(tmp_path, 3)
    part = tick.execute_in_process(instance=instance, asset_selection=[TRIPS, BY_PC])
    assert part.success
    assert set(materializations(part)) == {TRIPS, BY_PC}
    assert view_rows(spark, pipeline, "by_pc") == oracle(tmp_path, "by_pc")
    tick_record = last_tick(Location.of(tmp_path / "warehouse"))
    assert tick_record is not None and tick_record.epoch == 2
    rest = tick.execute_in_process(instance=instance)
    meta = materializations(rest)
    assert meta[TRIPS]["taken in"] == "already taken in"
    assert meta[ZONES_KEY]["epoch"] == 3 and meta[ZONED]["epochs"] == "3..3"
    assert meta[BY_PC]["epochs"] == "none (up to date)"
    assert view_rows(spark, pipeline, "zoned") == oracle(tmp_path, "zoned")
    tick_record = last_tick(Location.of(tmp_path / "warehouse"))
    assert tick_record is not None and tick_record.epoch == 3
    table = DeltaTable(str(tmp_path / "out" / "by_pc"))
    assert bag(table.to_pyarrow_table().to_pylist()) == oracle(tmp_path, "by_pc")

    audit = defs.resolve_job_def("e2e_audit").execute_in_process(instance=instance)
    assert audit.success
    assert checks(audit) == {("by_pc", "equivalence"): True, ("zoned", "equivalence"): True}

    # a large view is compared on a hash sample of its rows: the same rows on both
    # sides, so wrong rows that fall in the sample are still found
    p = open_pipeline(pipeline, spark)
    sampled = verify(p, ["zoned"], sample_above=5)
    assert sampled.ok and "sample)" in sampled.checked[0], sampled.checked
    expected = p.runtime.trace(p.flow.views["zoned"]).read_at(None)
    wrong = expected.withColumn("_diff", expected["_diff"] + 1)  # every row off by one
    whole = compare(expected, wrong, "view zoned", 3)
    half = compare(expected, wrong, "view zoned", 3, fraction=0.5)
    assert whole is not None and half is not None
    assert whole.differences == len(oracle(tmp_path, "zoned"))  # distinct rows
    assert 0 < half.differences < whole.differences


def test_one_tick_at_a_time_per_pipeline(tmp_path: Path) -> None:
    pipeline: Any = SimpleNamespace(name="e2e", warehouse=Location.of(tmp_path))

    def another_tick() -> None:
        with tick_lock(pipeline):
            pass

    with tick_lock(pipeline), pytest.raises(TickRunning, match="another tick of pipeline 'e2e'"):
        another_tick()
    with tick_lock(pipeline):
        pass  # released when its holder is done


def test_backfills_load_history_rebuild_and_restate(spark: SparkSession, tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, "dg_backfills", by_pc_sql=BY_PC_SQL)
    for epoch in range(4):  # history before the pipeline existed: 10 versions, 4 files
        change_data(tmp_path, epoch)
    defs = definitions(pipeline)
    instance = dg.DagsterInstance.ephemeral()
    load = defs.resolve_job_def("e2e_load_history")

    def run_load(**config: Any) -> dg.ExecuteInProcessResult:
        return load.execute_in_process(
            instance=instance,
            run_config={"ops": {"e2e_load_history_op": {"config": config}}},
            raise_on_error=False,
        )

    loaded = run_load(per_epoch=3)
    assert loaded.success
    assert loaded.output_for_node("e2e_load_history_op") == 4  # versions 0-2, 3-5, 6-8, 9
    p = open_pipeline(pipeline, spark)
    assert p.runtime.trace(p.flow.sources["zones"]).reload().upper.epoch_bound() == 4
    epoch_events = [e for e in loaded.all_events if e.is_step_materialization]
    assert len(epoch_events) == 4 * 4  # every asset, every epoch
    # as of epoch 0 the view saw trips as of version 2: the history is in epochs
    first = DeltaTable(str(tmp_path / "data" / "trips"), version=2).to_pyarrow_table()
    expected_first = Counter(r["pc"] for r in first.to_pylist())
    at_zero = p.runtime.read("by_pc", as_of=0).collect()
    assert {r["pc"]: r["trips"] for r in at_zero} == dict(expected_first)
    for view in ("by_pc", "zoned"):
        assert view_rows(spark, pipeline, view) == oracle(tmp_path, view)

    again = run_load(per_epoch=3, from_epoch=1, to_epoch=3)
    assert again.success and again.output_for_node("e2e_load_history_op") == 0
    refused = run_load(per_epoch=3, from_epoch=9)
    assert not refused.success
    failure = refused.failure_data_for_node("e2e_load_history_op")
    assert failure is not None
    assert "epochs are taken in order" in str(failure.user_failure_data.description)  # type: ignore[union-attr]

    rebuild = defs.resolve_job_def("e2e_rebuild")
    too_early = rebuild.execute_in_process(
        instance=instance,
        run_config={"ops": {"e2e_rebuild_op": {"config": {"views": ["by_pc"], "from_epoch": 0}}}},
        raise_on_error=False,
    )
    failure = too_early.failure_data_for_node("e2e_rebuild_op")
    assert failure is not None
    assert "compacted up to epoch 3" in str(failure.user_failure_data.description)  # type: ignore[union-attr]
    assert view_rows(spark, pipeline, "by_pc") == oracle(tmp_path, "by_pc")  # nothing discarded
    rebuilt = rebuild.execute_in_process(
        instance=instance,
        run_config={"ops": {"e2e_rebuild_op": {"config": {"views": ["by_pc"]}}}},
    )
    assert rebuilt.output_for_node("e2e_rebuild_op") == ["by_pc"]
    assert view_rows(spark, pipeline, "by_pc") == oracle(tmp_path, "by_pc")

    # zone 0's file is corrected in place: a plain tick refuses it (history
    # rewritten), a restatement takes the correction in at a new epoch
    corrected = [{"zone_id": 0, "borough": "b-corrected", "diff": 1}] + [
        {"zone_id": z, "borough": f"b{z % 2}", "diff": 1} for z in (1, 2)
    ]
    pq.write_table(pa.Table.from_pylist(corrected, ZONES), tmp_path / "data/zones/z0.parquet")
    restate = defs.resolve_job_def("e2e_restate")
    config = {"ops": {"e2e_restate_op": {"config": {"source": "zones", "where": "zone_id = 0"}}}}
    restated = restate.execute_in_process(instance=instance, run_config=config)
    assert restated.output_for_node("e2e_restate_op") == 4
    assert view_rows(spark, pipeline, "zoned") == oracle(tmp_path, "zoned")
    assert (
        restate.execute_in_process(instance=instance, run_config=config).output_for_node(
            "e2e_restate_op"
        )
        is None
    )  # nothing left to correct: no epoch
    bad = {"ops": {"e2e_restate_op": {"config": {"source": "zones", "where": "no_such > 1"}}}}
    wrong = restate.execute_in_process(instance=instance, run_config=bad, raise_on_error=False)
    failure = wrong.failure_data_for_node("e2e_restate_op")
    assert failure is not None
    assert "predicate" in str(failure.user_failure_data.description)  # type: ignore[union-attr]


def test_frontier_problems_name_what_went_back() -> None:
    state = TraceState.new("t", 1, ("k",), "{}")
    one = replace(state, upper=Antichain.from_epoch(3))
    two = replace(state, upper=Antichain.from_epoch(2))
    assert frontier_problems([state, one]) == []
    (problem,) = frontier_problems([state, one, two])
    assert problem.startswith("upper went back")


@pytest.mark.parametrize(
    "error", [TraceNotFound("wh/views/v"), InvariantViolation("an invariant", "its evidence")]
)
def test_every_dd_etl_error_fails_the_run_with_its_message(error: DdEtlError) -> None:
    with pytest.raises(dg.Failure) as info, failures():
        raise error
    assert info.value.description == error.message
    metadata = {k: v.value for k, v in info.value.metadata.items()}
    assert metadata == {"error": type(error).__name__, "exit_status": error.exit_code}
    with pytest.raises(KeyError), failures():  # a bug keeps its stack trace
        raise KeyError("k")
