"""Batch files written by Spark's executors: the batches of several traces in one job.

An interval too large for the driver has each trace's batch written by Spark,
and a Spark write per trace is a job of its own, of fixed cost, with a commit
protocol (temporary directories, renames, markers) that a batch file, referenced
only once its trace's log commits it, does not need. Here one job computes the
batches of a layer of traces as one union (``slots.tagged_union``), sorted by
trace and key hash, and a function on the executors writes each trace's rows as
its files with pyarrow, consecutive slices of its key-hash order; only what the
Delta log needs of each file (path, size, records, key-hash and time bounds)
comes back to the driver. A batch of unknown or large size is written in
several slices, each a contiguous range of the key hashes and its own task: key
hashes are uniform, so the ranges need no sampling of the rows to be even. The
function reads nothing of dd_etl: executors need pyarrow, which PySpark's Arrow
exchange needs anyway.

Each file has a name of its own, so a task Spark runs again never overwrites a
file a committed batch holds; the files of a failed attempt are never committed,
and vacuum removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from dd_etl import sql_text
from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location
from dd_etl.profiling import SPARK, count_shared, phase
from dd_etl.sql_text import quote
from dd_etl.trace import hash_slices
from dd_etl.trace.batch import DataFile, WrittenBatch, batch_dir
from dd_etl.trace.columns import KEY_HASH, time_columns
from dd_etl.trace.file_stats import make_stats
from dd_etl.trace.slots import PART, slot, tagged_union

FILES = "part INT, path STRING, size BIGINT, records BIGINT, low ARRAY<BIGINT>, high ARRAY<BIGINT>"
"""What the executors report of each file written: the batch it belongs to (its
index among those written), its path under the trace root, size and records,
and the least and greatest value of the key hash and of each time coordinate."""


@dataclass(frozen=True)
class ExecutorBatch:
    """A batch for the executors to write: ``rows`` in the trace's stored layout,
    consolidated, into ``directory`` of the trace at ``root``."""

    root: Location
    batch_id: str
    rows: DataFrame
    dims: int
    rows_per_file: int
    slices_log2: int = 0
    """The batch is written in ``2 ** slices_log2`` slices of the key-hash range."""
    label: str | None = None
    """What its part of a shared job is profiled as (None: the job's)."""


SLICE = "__slice"
_TASK = "__task"
"""The key that sends slice ``i`` of the union to task ``i`` (``hash_slices``)."""


def write_each(batches: Sequence[ExecutorBatch]) -> list[WrittenBatch]:
    """Write ``batches`` in one Spark job, each slice of each by a task of its own,
    and return each one's files in key-hash order."""
    if not batches:
        return []
    union, placement = tagged_union([b.rows for b in batches], shared=[KEY_HASH])
    firsts = [0]
    for b in batches:
        firsts.append(firsts[-1] + (1 << b.slices_log2))
    total = firsts[-1]
    sliced = sql_text.select(
        union,
        [
            "*",
            f"{_slice_of(batches, firsts)} AS {SLICE}",
            f"{hash_slices.partition_key(quote(SLICE), total)} AS {_TASK}",
        ],
    )
    ordered = sliced.repartition(total, _TASK).sortWithinPartitions(SLICE, KEY_HASH)
    targets = [
        {
            "part": i,
            "directory": (b.root / batch_dir(b.batch_id)).fs_path,
            "filesystem": b.root.filesystem,
            "local": b.root.is_local,
            "relative": batch_dir(b.batch_id),
            "slots": [slot(k) for k in placed],
            "schema": arrow_schema(b.rows.schema),
            "bounded": [KEY_HASH, *time_columns(b.dims)],
            "rows_per_file": b.rows_per_file,
        }
        for i, (b, placed) in enumerate(zip(batches, placement, strict=True))
        for _ in range(1 << b.slices_log2)
    ]
    writing = ordered.mapInArrow(_writer(targets), FILES)
    with phase(SPARK):
        reported = writing.toArrow()
    count_shared(writing, [b.label for b in batches])
    files: list[list[tuple[int, DataFile]]] = [[] for _ in batches]
    for row in reported.to_pylist():
        names = [KEY_HASH, *time_columns(batches[row["part"]].dims)]
        low = dict(zip(names, row["low"], strict=True))
        high = dict(zip(names, row["high"], strict=True))
        stats = make_stats(row["records"], low, high)
        written = DataFile(row["path"], row["size"], row["records"], stats)
        files[row["part"]].append((low[KEY_HASH], written))
    # each task reports its files in the order it wrote them, by key hash, and the
    # slices of a batch hold disjoint ranges of key hashes: a stable sort by the
    # least key hash of each file orders a batch's files
    return [
        WrittenBatch(b.batch_id, tuple(file for _, file in sorted(f, key=lambda lf: lf[0])))
        for b, f in zip(batches, files, strict=True)
    ]


def _slice_of(batches: Sequence[ExecutorBatch], firsts: Sequence[int]) -> str:
    """The slice each row of the union is written in: its batch's first slice, plus
    its slice among the batch's own (``hash_slices``), so that a batch's slices
    follow its key-hash order."""
    cases = [
        f"WHEN {i} THEN {first}"
        + (f" + {hash_slices.slice_of(1 << b.slices_log2)}" if b.slices_log2 else "")
        for i, (b, first) in enumerate(zip(batches, firsts[:-1], strict=True))
    ]
    return f"CASE {quote(PART)} {' '.join(cases)} END"


def _writer(
    targets: list[dict[str, Any]],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs over its rows: it writes the rows of each slice
    (``SLICE``, an index into ``targets``) into files of at most ``rows_per_file``
    rows, in the order it gets them (by key hash), and yields one row per file, of
    the batch (``part``) the slice belongs to. It is pickled with its
    ``targets`` (plain data) and uses pyarrow and the standard library only."""
    slice_column = SLICE

    def write(chunks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        reports: list[dict[str, Any]] = []
        current: dict[str, Any] = {}  # the file being written

        def close() -> None:
            if current:
                current.pop("writer").close()
                current.pop("slice")
                filesystem = current.pop("filesystem")
                current["size"] = filesystem.get_file_info(current.pop("full_path")).size
                reports.append(dict(current))
                current.clear()

        def open_for(index: int) -> None:
            target = targets[index]
            filesystem = target["filesystem"]
            if target["local"]:
                os.makedirs(target["directory"], exist_ok=True)
            name = f"part-{uuid.uuid4().hex}.parquet"
            full_path = f"{target['directory']}/{name}"
            current.update(
                slice=index,
                part=target["part"],
                path=f"{target['relative']}/{name}",
                full_path=full_path,
                filesystem=filesystem,
                writer=pq.ParquetWriter(full_path, target["schema"], filesystem=filesystem),
                records=0,
                low=[None] * len(target["bounded"]),
                high=[None] * len(target["bounded"]),
            )

        def put(index: int, rows: pa.Table) -> None:
            target = targets[index]
            while rows.num_rows:
                if current and (
                    current["slice"] != index or current["records"] == target["rows_per_file"]
                ):
                    close()
                if not current:
                    open_for(index)
                taken = rows.slice(0, target["rows_per_file"] - current["records"])
                rows = rows.slice(taken.num_rows)
                current["writer"].write_table(taken)
                current["records"] += taken.num_rows
                for i, name in enumerate(target["bounded"]):
                    bounds = pc.min_max(taken.column(name))
                    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
                    was_lo, was_hi = current["low"][i], current["high"][i]
                    current["low"][i] = lo if was_lo is None else min(was_lo, lo)
                    current["high"][i] = hi if was_hi is None else max(was_hi, hi)

        for chunk in chunks:
            runs = pc.run_end_encode(chunk.column(slice_column))
            start = 0
            ends = runs.run_ends.to_pylist()
            for index, end in zip(runs.values.to_pylist(), ends, strict=True):
                target = targets[index]
                rows = pa.Table.from_batches([chunk.slice(start, end - start)])
                rows = rows.select(target["slots"]).rename_columns(target["schema"].names)
                put(index, rows.cast(target["schema"]))
                start = end
        close()
        if reports:
            yield pa.RecordBatch.from_pylist(reports, schema=report_schema)

    report_schema = pa.schema(
        [
            ("part", pa.int32()),
            ("path", pa.string()),
            ("size", pa.int64()),
            ("records", pa.int64()),
            ("low", pa.list_(pa.int64())),
            ("high", pa.list_(pa.int64())),
        ]
    )
    return write
