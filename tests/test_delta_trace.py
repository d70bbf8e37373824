"""The Delta-backed trace on Spark, checked against the in-memory model and the
reference list of updates, plus what only the Delta store can show: recovery
from the log alone, file pruning, idempotent commits, racing writers, vacuum."""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)

from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.runtime.sizing import applied, medium
from dd_etl.trace import arrow_files, delta_log, delta_trace, spark_files
from dd_etl.trace.batch import DataFile, WrittenBatch
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.delta_trace import (
    DeltaStorage,
    DeltaTrace,
    PlannedBatch,
    collect_batches,
)
from dd_etl.trace.errors import SinceViolation, UpperMismatch
from dd_etl.trace.executor_writes import write_each
from dd_etl.trace.file_stats import hash_bounds
from dd_etl.trace.placement import BULK, DRIVER, LOOKUPS, Placement
from dd_etl.trace.reader_handle import ReaderHandle
from dd_etl.trace.trace import Trace
from tests.support.kv_trace import SCHEMA, contents, frame
from tests.support.model_storage import Update, accumulate, consolidate, model_trace

pytestmark = pytest.mark.spark


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def new_trace(spark: SparkSession, path: Path, rows_per_file: int = 4) -> DeltaTrace:
    return DeltaTrace.create(spark, str(path), "t", SCHEMA, ["k"], rows_per_file=rows_per_file)


@pytest.mark.parametrize("seed", [1, 2])
def test_delta_trace_matches_the_model_through_appends_holds_and_merges(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    delta = new_trace(spark, tmp_path / "t", rows_per_file=3)
    model = model_trace(rows_per_file=3)
    reference: list[Update] = []
    delta_reader, model_reader = delta.open_reader("r"), model.open_reader("r")
    for epoch in range(8):
        updates = [
            ((rng.randrange(12), rng.choice(["a", "b", None])), (epoch,), rng.choice([1, 1, -1, 2]))
            for _ in range(rng.randrange(0, 9))
        ]
        reference += updates
        # A caller may bound the updates it appends (exactly, loosely, or as 0 when
        # there are none), so they are written without being counted first.
        distinct = len(consolidate(updates))
        at_most = rng.choice([None, distinct, distinct + rng.randrange(1, 8)])
        appended = delta.compare_and_append(
            frame(spark, updates), e(epoch), e(epoch + 1), at_most=at_most
        )
        assert appended
        model.compare_and_append(updates, e(epoch), e(epoch + 1), at_most=at_most)
        if rng.random() < 0.6:
            hold = e(rng.randrange(delta.state.since.epoch_bound() or 0, epoch + 2))
            hold = delta_reader.hold.logical.join(hold)
            delta_reader.downgrade(hold, hold)
            model_reader.downgrade(hold, hold)
        fuel = rng.choice([None, 2, 5, 20])
        delta.exert(fuel)
        model.exert(fuel)
        delta.state.check()
        assert [b.description for b in delta.state.batches] == [
            b.description for b in model.state.batches
        ]
        since = delta.state.since.epoch_bound() or 0
        for t in range(since, epoch + 2):
            expected = accumulate(reference, (t,))
            assert contents(delta.read_at((t,))) == expected
            assert model.read_at((t,)) == expected
        latest = accumulate(reference, None)
        assert delta.size() == sum(latest.values())
        assert_first_rows(delta, latest, limit=3)
    # the size and the first rows are read in the driver: a trace with no Spark
    driverless = DeltaTrace(None, delta.where)  # type: ignore[arg-type]
    assert driverless.size() == delta.size()
    first = driverless.first_rows(3)
    assert first is not None and first.equals(delta.first_rows(3))
    assert_descriptions_hold(spark, delta)


def assert_first_rows(trace: DeltaTrace, latest: dict[tuple[object, ...], int], limit: int) -> None:
    """``first_rows`` shows ``limit`` rows of the collection, or all it has, each
    at most as often as its multiplicity, of the keys with the smallest hashes:
    every row of a key hashed below the last one shown is shown."""
    rows = trace.first_rows(limit)
    assert rows is not None
    shown = Counter((r["k"], r["v"]) for r in rows.to_pylist())
    positive = {d: n for d, n in latest.items() if n > 0}
    assert shown.total() == min(limit, sum(positive.values()))
    assert all(n <= positive.get(d, 0) for d, n in shown.items())
    stored = trace.stored_rows()
    assert stored is not None
    hash_of = dict(
        zip(stored.column("k").to_pylist(), stored.column(KEY_HASH).to_pylist(), strict=True)
    )
    last = max((hash_of[k] for k, _ in shown), default=None)
    for d, n in positive.items():
        if last is not None and hash_of[d[0]] < last:
            assert shown[d] == n, (d, n, shown)


def test_first_rows_widen_past_retracted_keys(spark: SparkSession, tmp_path: Path) -> None:
    """The rows are sought in a slice of the hash space sized for about four times
    those wanted; where retractions emptied it, the slice widens until it holds
    enough."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=500)
    keys = range(2000)
    trace.compare_and_append(frame(spark, [((k, "x"), (0,), 1) for k in keys]), e(0), e(1))
    kept = set(range(0, 2000, 20))
    gone = [((k, "x"), (1,), -1) for k in keys if k not in kept]
    trace.compare_and_append(frame(spark, gone), e(1), e(2))
    assert trace.size() == len(kept)
    assert_first_rows(trace, {(k, "x"): 1 for k in kept}, limit=10)


def test_first_rows_leave_nested_columns_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    schema = StructType([StructField("k", LongType()), StructField("xs", ArrayType(LongType()))])
    trace = DeltaTrace.create(spark, str(tmp_path / "t"), "t", schema, ["k"])
    rows = spark.createDataFrame(
        [(1, [1, 2], 0, 2)], "k long, xs array<long>, _time long, _diff long"
    )
    trace.compare_and_append(rows, e(0), e(1))
    assert trace.first_rows(10) is None
    assert trace.size() == 2


def assert_descriptions_hold(spark: SparkSession, trace: DeltaTrace) -> None:
    """Invariant 1 (descriptions), read off the stored files of every batch."""
    for b in trace.state.batches:
        df = spark_files.read_files(spark, trace.where, trace.state, trace.files([b.id]))
        for row in df.select("_time").distinct().collect():
            assert b.description.admits((row["_time"],)), (b.description, row)


def test_spine_is_recovered_from_the_delta_log_alone(spark: SparkSession, tmp_path: Path) -> None:
    trace = new_trace(spark, tmp_path / "t")
    reader = trace.open_reader("r")
    for epoch in range(3):
        rows = [((k, "x"), (epoch,), 1) for k in range(epoch * 5, epoch * 5 + 5)]
        trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
    reader.downgrade(e(2), e(2))
    trace.exert(3)  # leave a merge in progress
    assert trace.state.merges
    # No Spark at all: the state and file list come from the Delta log.
    recovered = Trace(DeltaStorage(None, Location.of(tmp_path / "t")))  # type: ignore[arg-type]
    assert recovered.state == trace.state
    assert recovered.snapshot.files == trace.snapshot.files
    assert delta_log.load(Location.of(tmp_path / "t")).version == trace.snapshot.version


def test_a_merge_of_few_records_needs_no_spark(spark: SparkSession, tmp_path: Path) -> None:
    """Back-pressure asks small traces for merges every few epochs; the driver
    makes them, so the storage's Spark session is never used."""
    trace = new_trace(spark, tmp_path / "t")
    reader = trace.open_reader("r")
    epochs = [
        [((1, "x"), (0,), 1), ((2, "y"), (0,), 1)],
        [((1, "x"), (1,), -1), ((3, "z"), (1,), 2)],  # retracts an update of epoch 0
        [((2, "y"), (2,), 1)],
    ]
    for epoch, rows in enumerate(epochs):
        trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
    reader.downgrade(e(3), e(3))
    driver_only = Trace(DeltaStorage(None, Location.of(tmp_path / "t")))  # type: ignore[arg-type]
    assert driver_only.exert(None) > 0
    assert not driver_only.state.merges
    merged, last = driver_only.state.batches
    assert (merged.description.lower, merged.description.upper) == (e(0), e(2))
    # times advanced to the hold and consolidated: the retracted update is gone
    assert merged.records == 2 and last.records == 1
    trace.reload()
    assert trace.state == driver_only.state
    assert contents(trace.read_at()) == {(2, "y"): 2, (3, "z"): 2}


def test_key_lookups_read_only_files_that_can_hold_the_keys(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's lookups in a large trace collect the keys' hashes to prune the files
    they read; a trace of few records is scanned whole, with no job before."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=10)
    trace.open_reader("r")
    trace.compare_and_append(frame(spark, [((k, "x"), (0,), 1) for k in range(400)]), e(0), e(1))
    trace.compare_and_append(
        frame(spark, [((k, "y"), (1,), 1) for k in range(0, 400, 2)]), e(1), e(2)
    )
    files = trace.files()
    assert len(files) >= 40
    probe = spark.createDataFrame([(7,), (200,), (1000,)], "k long")
    few = jobs_of(spark, "few", lambda: trace._files_for_keys(files, probe, LOOKUPS))
    assert few == 0 and len(trace._files_for_keys(files, probe, LOOKUPS)) == len(files)
    monkeypatch.setattr(delta_trace, "WHOLE_SCAN_RECORDS", 100)  # 600 records are many
    touched = trace._files_for_keys(files, probe, LOOKUPS)
    assert 1 <= len(touched) <= 2 * 3  # at most one file per key per batch
    assert contents(trace.read_at((1,), keys=probe)) == {(7, "x"): 1, (200, "x"): 1, (200, "y"): 1}


def test_appending_an_interval_twice_is_a_noop_and_gaps_are_conflicts(
    spark: SparkSession, tmp_path: Path
) -> None:
    trace = new_trace(spark, tmp_path / "t")
    batch = frame(spark, [((1, "x"), (0,), 1)])
    assert trace.compare_and_append(batch, e(0), e(1))
    assert not trace.compare_and_append(batch, e(0), e(1))
    with pytest.raises(UpperMismatch, match=r"trace is at \{1\}"):
        trace.compare_and_append(batch, e(2), e(3))
    table = DeltaTable(str(tmp_path / "t"))
    assert table.transaction_version("dd_etl/t") == 1
    assert contents(trace.read_at()) == {(1, "x"): 1}
    with pytest.raises(SinceViolation):
        trace.read_at((0,))  # nobody held epoch 0, so it was free to compact


def test_a_reload_reads_the_log_only_after_another_writers_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = tmp_path / "t"
    mine = new_trace(spark, uri)
    assert mine.compare_and_append(frame(spark, [((1, "x"), (0,), 1)]), e(0), e(1))
    known = mine.snapshot
    mine.reload()
    assert mine.snapshot is known  # its own commit is the latest: nothing to read
    other = DeltaTrace(spark, str(uri), rows_per_file=4)
    assert other.compare_and_append(frame(spark, [((2, "y"), (1,), 1)]), e(1), e(2))
    assert mine.reload().upper == e(2)
    assert mine.snapshot is not known
    assert contents(mine.read_at()) == {(1, "x"): 1, (2, "y"): 1}


def test_an_append_moves_holds_in_its_own_commit(spark: SparkSession, tmp_path: Path) -> None:
    trace = new_trace(spark, tmp_path / "t")
    reader = trace.open_reader("r", e(0), e(0))
    version = trace.snapshot.version
    batch = frame(spark, [((1, "x"), (0,), 1)])
    assert trace.compare_and_append(batch, e(0), e(1), holds=reader.downgraded(e(1), e(1)))
    assert trace.snapshot.version == version + 1
    stored = DeltaTrace(spark, str(tmp_path / "t")).state
    assert stored.upper == e(1)
    assert stored.hold_map["r"].logical == e(1)
    assert stored.hold_map["r"].physical == e(1)


def test_a_batch_is_summed_by_the_driver_and_distinct_updates_only_sorted(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A batch computed into the driver is planned up to the stored layout, with no
    aggregation: the driver sums equal updates and sorts them by key hash once it
    holds them, and only sorts ``distinct`` ones. Nested columns, which Arrow does
    not group, Spark sums."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=100)
    rows = [((k, "x"), (0,), 1 if k % 2 else -1) for k in range(6)]
    updates = frame(spark, rows)

    def plan(distinct: bool) -> PlannedBatch:
        planned = trace.batch_plan(updates, distinct)
        assert "Aggregate" not in str(planned.frame()._jdf.queryExecution().executedPlan())
        return planned

    summed, laid_out = collect_batches([[plan(False), plan(True)]])
    assert summed is not None and laid_out is not None
    assert laid_out.rows.equals(summed.rows)  # the same rows in the same key-hash order
    hashes = summed.rows.column(KEY_HASH).to_pylist()
    assert hashes == sorted(hashes)
    [twice] = collect_batches([[trace.batch_plan(frame(spark, rows + rows))]])
    assert twice is not None and twice.rows.column(DIFF).to_pylist() == [
        2 * d for d in summed.rows.column(DIFF).to_pylist()
    ]
    assert trace.compare_and_append(updates, e(0), e(1), distinct=True)
    assert contents(trace.read_at()) == {(k, "x"): 1 if k % 2 else -1 for k in range(6)}

    schema = StructType([StructField("k", LongType()), StructField("xs", ArrayType(LongType()))])
    nested = DeltaTrace.create(spark, str(tmp_path / "n"), "n", schema, ["k"])
    both = spark.createDataFrame(
        [(1, [1], 0, 1), (1, [1], 0, 1)], "k long, xs array<long>, _time long, _diff long"
    )
    planned = nested.batch_plan(both)
    assert planned.summed
    assert "Aggregate" in str(planned.frame()._jdf.queryExecution().executedPlan())
    [batch] = collect_batches([[planned]])
    assert batch is not None and batch.rows.column(DIFF).to_pylist() == [2]


def test_racing_writers_never_duplicate_or_lose_an_interval(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = tmp_path / "t"
    new_trace(spark, uri)
    epochs = 5
    data = {i: [((i * 10 + j, "w"), (i,), 1) for j in range(3)] for i in range(epochs)}
    outcomes: list[str] = []

    def writer() -> None:
        trace = DeltaTrace(spark, str(uri), rows_per_file=4)
        for i in range(epochs):
            try:
                done = trace.compare_and_append(frame(spark, data[i]), e(i), e(i + 1))
                outcomes.append("won" if done else "noop")
            except UpperMismatch:
                outcomes.append("conflict")

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trace = DeltaTrace(spark, str(uri))
    trace.state.check()
    assert trace.state.upper == e(epochs)
    assert outcomes.count("won") == epochs
    expected = accumulate([u for i in range(epochs) for u in data[i]], None)
    assert contents(trace.read_at()) == expected


def two_epochs_and_a_stray(
    spark: SparkSession, uri: Path
) -> tuple[DeltaTrace, ReaderHandle, list[DataFile]]:
    """A trace of two epochs, held by reader ``r`` (its handle), and the files of a
    crashed append: written, never committed."""
    trace = new_trace(spark, uri, rows_per_file=2)
    reader = trace.open_reader("r")
    for epoch in range(2):
        rows = [((k, "x"), (epoch,), 1) for k in range(8)]
        trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
    stray = trace.storage.write_batch(trace.state, "deadbeef", frame(spark, [((99, "z"), (2,), 1)]))
    return trace, reader, stray


def test_vacuum_removes_stray_and_merged_away_files_but_keeps_staged_ones(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = tmp_path / "t"
    trace, reader, stray = two_epochs_and_a_stray(spark, uri)
    assert all((uri / f.path).exists() for f in stray)
    reader.downgrade(e(2), e(2))
    merged_inputs = trace.files()
    trace.exert(4)  # first step of the merge: staged files exist
    staged = [f for m in trace.state.merges for f in m.staged]
    assert staged
    removed = trace.vacuum(retention_hours=0)
    assert {f.path for f in stray} <= set(removed)
    assert all((uri / f.path).exists() for f in staged)
    trace.exert(None)
    removed = trace.vacuum(retention_hours=0)
    assert {f.path for f in merged_inputs} <= set(removed)
    live = {f.path for f in trace.files()}
    on_disk = {p.relative_to(uri).as_posix() for p in (uri / "data").rglob("*.parquet")}
    assert on_disk == live
    assert contents(trace.read_at((2,))) == {(k, "x"): 2 for k in range(8)}


def test_vacuum_keeps_files_a_merge_removed_recently_however_old(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A reader that opened the trace just before a merge still reads the merged
    batches: their retention runs from the merge, not from when they were written."""
    uri = tmp_path / "t"
    trace, reader, stray = two_epochs_and_a_stray(spark, uri)
    before_merge = DeltaTrace(spark, str(uri))
    reader.downgrade(e(2), e(2))
    merged_inputs = trace.files()
    trace.exert(None)
    two_days_ago = time.time() - 48 * 3600
    for f in [*merged_inputs, *stray]:
        os.utime(uri / f.path, (two_days_ago, two_days_ago))
    removed = trace.vacuum(retention_hours=24)
    assert {f.path for f in stray} <= set(removed)
    assert not {f.path for f in merged_inputs} & set(removed)
    assert contents(before_merge.read_at((1,))) == {(k, "x"): 2 for k in range(8)}


def _log_versions(uri: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (uri / "_delta_log").glob("*.json"))


def _annotate_until(trace: DeltaTrace, version: int) -> None:
    """State-only commits (no Spark job) until the table is at ``version``."""
    while trace.snapshot.version < version:
        trace.annotate({"step": str(trace.snapshot.version)})


def test_vacuum_shortens_the_log_to_the_latest_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Every open lists the whole log, so vacuum drops the entries before the latest
    checkpoint: the trace still opens and reads the same, and a writer that loaded
    a version no longer in the log finds itself stale and commits on the new one."""
    uri = tmp_path / "t"
    trace = new_trace(spark, uri)
    trace.compare_and_append(frame(spark, [((1, "a"), (0,), 1)]), e(0), e(1))
    stale = DeltaTrace(spark, str(uri))
    # delta-rs checkpoints the versions before each multiple of the interval
    _annotate_until(trace, 3 * delta_log.CHECKPOINT_INTERVAL + 2)
    removed = trace.vacuum(retention_hours=0)
    assert "_delta_log/00000000000000000000.json" in removed
    assert _log_versions(uri)[0] == 3 * delta_log.CHECKPOINT_INTERVAL - 1
    reopened = DeltaTrace(spark, str(uri))
    assert reopened.state == trace.state
    assert contents(reopened.read_at()) == {(1, "a"): 1}
    stale.annotate({"late": "yes"})
    assert DeltaTrace(spark, str(uri)).state.meta_map["late"] == "yes"


def test_vacuum_keeps_the_log_back_to_the_latest_state(spark: SparkSession, tmp_path: Path) -> None:
    """A checkpoint written at a commit of another Delta tool (no trace state) must
    not take the state before it out of the log."""
    uri = tmp_path / "t"
    trace = new_trace(spark, uri)
    foreign = 2 * delta_log.CHECKPOINT_INTERVAL - 1
    _annotate_until(trace, foreign - 1)
    table = DeltaTable(str(uri))
    table.create_write_transaction([], "append", table.schema())  # checkpointed
    assert (uri / "_delta_log" / f"{foreign:020}.checkpoint.parquet").exists()
    trace.vacuum(retention_hours=0)
    assert _log_versions(uri)[0] == foreign - 1
    assert DeltaTrace(spark, str(uri)).state == trace.reload()


@pytest.mark.parametrize("driver", [False, True], ids=["spark_scan", "driver_read"])
def test_key_lookups_stay_exact_when_the_probe_keys_have_another_type(
    spark: SparkSession, tmp_path: Path, driver: bool
) -> None:
    """Stored hashes are of bigint keys; probes of int keys hash differently, so
    pruning by their hashes would drop files that hold matches."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=10)
    trace.open_reader("r")
    trace.compare_and_append(frame(spark, [((k, "x"), (0,), 1) for k in range(100)]), e(0), e(1))
    assert len(trace.files()) > 4
    probe = spark.createDataFrame([(7,), (42,), (1000,)], "k int")
    hashes = sorted(r[0] for r in probe.selectExpr(spark_files.key_hash(["k"])).collect())
    # a caller that got the probe's hashes wrong: the driver read trusts them, so
    # the runtime passes hashes only from a trace whose key types are the same
    key_hashes = hashes if driver else None
    expected = {} if driver else {(7, "x"): 1, (42, "x"): 1}
    found = contents(trace.read_at((0,), keys=probe, key_hashes=key_hashes))
    assert found == expected


def test_driver_lookups_read_the_rows_of_the_touched_keys_only(
    spark: SparkSession, tmp_path: Path
) -> None:
    trace = new_trace(spark, tmp_path / "t", rows_per_file=50)
    reader = trace.open_reader("r")
    for epoch in range(2):  # merged below: the history is in a merge's files
        rows = [((k, "x"), (epoch,), 1) for k in range(200 * epoch, 200 * (epoch + 1))]
        trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
    reader.downgrade(e(1), e(2))
    trace.exert(None)
    assert len(trace.state.batches) == 1
    changes = [((k, "y"), (2,), 1) for k in (3, 250)] + [((3, "x"), (2,), -1)]
    trace.compare_and_append(frame(spark, changes), e(2), e(3))
    probe = spark.createDataFrame([(3,), (250,)], "k long")
    touched = trace.key_hashes_since((2,))
    assert touched == sorted(r[0] for r in probe.selectExpr(spark_files.key_hash(["k"])).collect())
    assert contents(trace.read_at((1,), keys=probe, key_hashes=touched)) == {
        (3, "x"): 1,
        (250, "x"): 1,
    }
    assert contents(trace.read_at((2,), keys=probe, key_hashes=touched)) == {
        (3, "y"): 1,
        (250, "x"): 1,
        (250, "y"): 1,
    }
    assert contents(trace.read_at((2,), keys=probe, key_hashes=[])) == {}


def test_driver_reads_are_accumulated_by_the_driver_and_joined_only_when_exact(
    spark: SparkSession, tmp_path: Path
) -> None:
    """In the driver's placement a lookup's rows are summed by the driver: no
    aggregation in the plan, and no join either for a caller that joins on its
    keys itself (then rows of other keys may stay: here key 5's, whose hash the
    caller passed, or a small trace's all)."""
    trace = new_trace(spark, tmp_path / "t")
    trace.open_reader("r")
    updates = [((k, "x"), (0,), 1) for k in range(8)]
    updates += [
        ((3, "x"), (1,), -1),
        ((3, "y"), (1,), 2),
        ((5, "z"), (1,), 1),
        ((6, "x"), (2,), -1),
    ]
    trace.compare_and_append(frame(spark, updates), e(0), e(3))
    probe = spark.createDataFrame([(3,), (6,)], "k long")
    hashes = sorted(
        r[0]
        for r in spark.createDataFrame([(3,), (5,), (6,)], "k long")
        .selectExpr(spark_files.key_hash(["k"]))
        .collect()
    )
    loose = trace.read_at((1,), probe, hashes, DRIVER, exact=False)
    assert contents(loose) == {(3, "y"): 2, (5, "x"): 1, (5, "z"): 1, (6, "x"): 1}
    plan = loose._jdf.queryExecution().optimizedPlan().toString()
    assert "Aggregate" not in plan and "Join" not in plan
    exact = trace.read_at((2,), probe, hashes, DRIVER)
    assert contents(exact) == {(3, "y"): 2}
    assert (
        "Aggregate" not in exact._jdf.queryExecution().optimizedPlan().toString().split("Join")[0]
    )
    assert contents(trace.read_at((2,), placement=DRIVER)) == contents(trace.read_at((2,)))


def test_driver_reads_are_cut_to_their_columns_and_times_before_spark_sees_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Rows the driver reads reach Spark as a local relation of just the columns and
    times asked for (no select or filter over it to analyse), equal to what a
    Spark scan of the same files gives."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=50)
    reader = trace.open_reader("r")
    for epoch in range(3):
        rows = [((k, f"e{epoch}"), (epoch,), 1) for k in range(4)]
        trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
    reader.downgrade(e(1), e(3))
    trace.exert(None)  # epochs 0 and 1 merged, their times advanced to 1

    def both(at: int, since: int, columns: list[str]) -> set[tuple[object, ...]]:
        def read(placement: Placement) -> DataFrame:
            return trace.updates(at=(at,), since=(since,), placement=placement, columns=columns)

        mine = read(DRIVER)
        analysed = mine._jdf.queryExecution().analyzed().toString()
        assert "Project" not in analysed and "Filter" not in analysed, analysed
        rows = {tuple(r) for r in mine.collect()}
        assert rows == {tuple(r) for r in read(BULK).collect()}
        return rows

    assert both(1, 1, ["v", DIFF, "k"]) == {(v, 1, k) for v in ("e0", "e1") for k in range(4)}
    assert both(2, 2, ["k"]) == {(k,) for k in range(4)}
    probe = spark.createDataFrame([(2,)], "k long")
    hashes = [r[0] for r in probe.selectExpr(spark_files.key_hash(["k"])).collect()]
    until = trace.updates_until((1,), probe, hashes, DRIVER)
    assert until.columns == ["k", "v", DIFF]
    assert {tuple(r) for r in until.collect()} == {(2, "e0", 1), (2, "e1", 1)}


def test_files_written_by_the_driver_and_by_spark_read_back_alike(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A batch of one file's worth is written by the driver, a larger one by Spark,
    and they store timestamps differently: every read sees the same values."""
    schema = StructType(
        [
            StructField("k", LongType()),
            StructField("at", TimestampType()),
            StructField("day", DateType()),
            StructField("price", DecimalType(12, 2)),
        ]
    )
    trace = DeltaTrace.create(spark, str(tmp_path / "t"), "t", schema, ["k"], rows_per_file=2)
    reader = trace.open_reader("r")
    start = dt.datetime(2026, 3, 29, 1, 30, 0, 123456)
    rows = [
        (k, start + dt.timedelta(hours=k), dt.date(2026, 1, 1 + k), Decimal(f"{k}.25"))
        for k in range(5)
    ]
    updates = [*schema.fieldNames(), TIME, DIFF]
    for epoch, (batch, placement) in enumerate([(rows[:2], DRIVER), (rows[2:], BULK)]):
        df = spark.createDataFrame([(*r, epoch, 1) for r in batch], [*updates])
        columns = df.select(*[F.col(c) for c in updates])
        trace.compare_and_append(columns, e(epoch), e(epoch + 1), placement=placement)
    writers = {
        pq.ParquetFile(tmp_path / "t" / f.path).metadata.created_by.split()[0]
        for f in trace.files()
    }
    assert writers == {"parquet-cpp-arrow", "parquet-mr"}
    expected = {r: 1 for r in rows}

    def read(local: bool) -> dict[tuple[object, ...], int]:
        placement = DRIVER if local else BULK
        return {tuple(r[:4]): r[4] for r in trace.read_at((1,), placement=placement).collect()}

    assert read(local=False) == expected
    assert read(local=True) == expected
    reader.downgrade(e(1), e(2))
    trace.exert(None)  # the merge reads both kinds of file
    assert len(trace.state.batches) == 1
    assert read(local=False) == read(local=True) == expected


def test_one_job_collects_batches_of_different_layouts_each_whole_or_not_at_all(
    spark: SparkSession,
) -> None:
    frames = [
        spark.createDataFrame([(1, "a", 2.5), (2, None, 3.0)], "k long, s string, x double"),
        spark.createDataFrame(
            [("b", 7, 8, dt.date(2026, 1, 2))], "s string, a long, b long, d date"
        ),
        spark.createDataFrame([(Decimal("1.25"),)], "p decimal(12,2)"),
        spark.createDataFrame([(i,) for i in range(5)], "k long"),
    ]
    frames = [f.coalesce(1) for f in frames]
    tables = arrow_files.collect_each(frames, [10, 10, 10, 4])
    assert [None if t is None else t.to_pylist() for t in tables] == [
        [{"k": 1, "s": "a", "x": 2.5}, {"k": 2, "s": None, "x": 3.0}],
        [{"s": "b", "a": 7, "b": 8, "d": dt.date(2026, 1, 2)}],
        [{"p": Decimal("1.25")}],
        None,  # 5 rows, more than its 4
    ]
    assert arrow_files.collect_each([], []) == []


@pytest.mark.parametrize(
    ("placement", "writer"), [(DRIVER, "parquet-cpp-arrow"), (LOOKUPS, "parquet-mr")]
)
def test_a_batch_of_unknown_size_is_written_in_slices_of_the_hash_order_without_a_count(
    spark: SparkSession, tmp_path: Path, placement: Placement, writer: str
) -> None:
    """Spark estimates a range small, but it is several files' worth: in the
    driver's placement the one job that computes it brings it to the driver; on
    executors one Spark task writes it. Either way, files of consecutive key-hash
    ranges (what key lookups prune by), and no job counting it first."""
    trace = new_trace(spark, tmp_path / "t", rows_per_file=4)
    updates = spark.range(11).select(
        F.col("id").alias("k"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
        F.lit(0).cast("long").alias(TIME),
        F.lit(1).cast("long").alias(DIFF),
    )

    def append() -> None:
        trace.compare_and_append(updates, e(0), e(1), placement=placement)

    with applied(spark, medium(2)):  # no adaptive execution: a plan is one job
        assert jobs_of(spark, f"unknown-size-{placement.name}", append) == 1
    files = trace.files()
    assert [f.records for f in files] == [4, 4, 3]
    assert {
        pq.ParquetFile(tmp_path / "t" / f.path).metadata.created_by.split()[0] for f in files
    } == {writer}
    bounds = [hash_bounds(f) for f in files]
    assert [b for pair in bounds if pair is not None for b in pair] == sorted(
        b for pair in bounds if pair is not None for b in pair
    )
    assert None not in bounds
    assert contents(trace.read_at()) == {(k, f"v{k}"): 1 for k in range(11)}


@pytest.mark.parametrize("placement", [DRIVER, LOOKUPS])
def test_a_batch_the_caller_bounds_is_written_without_a_count(
    spark: SparkSession, tmp_path: Path, placement: Placement
) -> None:
    """Spark cannot estimate rows made from Python: unbounded on executors, such a
    batch is counted before it is written; bounded by the caller (a run, from its
    trace logs), the one job that computes it writes it (in the driver's
    placement, brings it to the driver)."""
    rows = [((k, "x"), (0,), 1) for k in range(6)]
    counted, bounded = new_trace(spark, tmp_path / "c"), new_trace(spark, tmp_path / "b")

    def unbounded_append() -> None:
        counted.compare_and_append(frame(spark, rows), e(0), e(1), placement=LOOKUPS)

    def bounded_append() -> None:
        bounded.compare_and_append(frame(spark, rows), e(0), e(1), at_most=6, placement=placement)

    with applied(spark, medium(2)):  # no adaptive execution: a plan is one job
        assert jobs_of(spark, f"counted-{placement.name}", unbounded_append) > 1
        assert jobs_of(spark, f"bounded-{placement.name}", bounded_append) == 1
    expected = {(k, "x"): 1 for k in range(6)}
    assert contents(bounded.read_at()) == contents(counted.read_at()) == expected


def test_a_large_batch_is_written_in_slices_of_the_hash_space_without_sampling(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch bounded above what one task writes is written by Spark in slices of
    equal width of the hash space (a file's worth each, at most ``SLICES_PER_CORE``
    per task Spark runs at once), slice ``i`` by task ``i``: one job, with no job
    sampling range boundaries, files of consecutive key-hash ranges, each within
    one slice and of at most a file's worth, in the order the trace lists them,
    duplicates summed."""
    monkeypatch.setattr(spark_files, "ONE_TASK_RECORDS", 8)
    trace = new_trace(spark, tmp_path / "t", rows_per_file=10)
    rows = [((k, f"v{k}"), (0,), 1) for k in range(200)]
    updates = frame(spark, rows + rows[:20])

    def append() -> None:
        trace.compare_and_append(updates, e(0), e(1), at_most=220, placement=BULK)

    with applied(spark, medium(2)):  # no adaptive execution: a plan is one job
        assert jobs_of(spark, "sliced-spark-write", append) == 1
    bounds = [hash_bounds(f) for f in trace.files()]
    flat = [h for b in bounds if b for h in b]
    assert None not in bounds and flat == sorted(flat)
    n = spark_files.SLICES_PER_CORE * spark.sparkContext.defaultParallelism
    assert n < 22  # a file's worth each would be 22 slices
    slices = {((lo + 2**63) * n >> 64, (hi + 2**63) * n >> 64) for lo, hi in filter(None, bounds)}
    assert all(a == b for a, b in slices) and len(slices) == n
    assert max(f.records for f in trace.files()) <= 10
    expected = {(k, f"v{k}"): 2 if k < 20 else 1 for k in range(200)}
    assert contents(trace.read_at()) == expected


def jobs_of(spark: SparkSession, group: str, work: Callable[[], object]) -> int:
    """The Spark jobs ``work`` launches."""
    spark.sparkContext.setJobGroup(group, "a test's work")
    try:
        work()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_the_batches_of_several_traces_are_written_by_one_job_on_the_executors(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A layer's batches, of traces of different layouts, computed and written by
    one Spark job: each trace's files slices of its key-hash order, with the
    bounds its log records; each trace commits its own, and a trace that holds
    the interval already commits nothing and leaves no file behind."""
    kv = new_trace(spark, tmp_path / "kv", rows_per_file=4)
    wide_schema = StructType(
        [StructField("id", LongType()), StructField("d", DateType()), StructField("n", LongType())]
    )
    wide = DeltaTrace.create(
        spark, str(tmp_path / "wide"), "w", wide_schema, ["id"], rows_per_file=2
    )
    kv_rows = [((k % 7, f"v{k % 7}"), (0,), 1) for k in range(10)]  # duplicates consolidate
    wide_rows = spark.createDataFrame(
        [(i, dt.date(2026, 1, i), i * 10, 0, 1) for i in range(1, 4)],
        "id long, d date, n long, _time long, _diff long",
    )
    planned = [kv.executor_batch(frame(spark, kv_rows)), wide.executor_batch(wide_rows)]
    batches: list[WrittenBatch] = []
    with applied(spark, medium(2)):
        assert jobs_of(spark, "executor-writes", lambda: batches.extend(write_each(planned))) == 1
    kv_batch, wide_batch = batches
    assert [f.records for f in kv_batch.files] == [4, 3]
    assert [f.records for f in wide_batch.files] == [2, 1]
    for batch, root in ((kv_batch, tmp_path / "kv"), (wide_batch, tmp_path / "wide")):
        bounds = [hash_bounds(f) for f in batch.files]
        assert None not in bounds
        assert [b for pair in bounds if pair for b in pair] == sorted(
            b for pair in bounds if pair for b in pair
        )
        for f in batch.files:
            assert (root / f.path).stat().st_size == f.size
            assert pq.ParquetFile(root / f.path).metadata.num_rows == f.records

    assert kv.append_written(kv_batch, e(0), e(1))
    assert wide.append_written(wide_batch, e(0), e(1))
    assert contents(kv.read_at()) == {(k, f"v{k}"): 2 if k < 3 else 1 for k in range(7)}
    assert sorted((r["id"], r["n"], r["_diff"]) for r in wide.read_at().collect()) == [
        (1, 10, 1),
        (2, 20, 1),
        (3, 30, 1),
    ]
    again = write_each([wide.executor_batch(wide_rows)])[0]
    assert not wide.append_written(again, e(0), e(1))
    assert not any((tmp_path / "wide" / f.path).exists() for f in again.files)


def test_a_batch_written_in_slices_holds_disjoint_ranges_of_key_hashes_in_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A batch of unknown size is written in slices of the key-hash space, each by
    a task of the same job as the layer's other batches: every file lies within
    one slice, the batch's files are in key-hash order, and it reads back whole."""
    sliced = new_trace(spark, tmp_path / "sliced", rows_per_file=16)
    single = new_trace(spark, tmp_path / "single", rows_per_file=16)
    rows = [((k, f"v{k}"), (0,), 1) for k in range(300)]
    planned = [
        sliced.executor_batch(frame(spark, rows), slices_log2=2),
        single.executor_batch(frame(spark, rows[:5])),
    ]
    batches: list[WrittenBatch] = []
    with applied(spark, medium(2)):
        assert jobs_of(spark, "sliced-writes", lambda: batches.extend(write_each(planned))) == 1
    sliced_batch, single_batch = batches
    bounds = [hash_bounds(f) for f in sliced_batch.files]
    assert all(b is not None for b in bounds)
    flat = [h for b in bounds if b for h in b]
    assert flat == sorted(flat)
    quarters = {((lo + 2**63) >> 62, (hi + 2**63) >> 62) for lo, hi in filter(None, bounds)}
    assert all(a == b for a, b in quarters) and len(quarters) == 4
    assert sum(f.records for f in sliced_batch.files) == 300
    assert sliced.append_written(sliced_batch, e(0), e(1))
    assert single.append_written(single_batch, e(0), e(1))
    assert contents(sliced.read_at()) == {(k, f"v{k}"): 1 for k in range(300)}
    assert contents(single.read_at()) == {(k, f"v{k}"): 1 for k in range(5)}
