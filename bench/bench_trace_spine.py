"""Benchmark: the spine of a Delta-backed trace under many small appends.

A trace promises that maintenance keeps its spine at ``O(log n)`` batches for
``n`` appended updates, and that when readers let it compact, the rows it stores
stay bounded by the live collection plus recent history rather than growing
with every update ever appended. This benchmark appends many small epochs of
upserts, inserts and deletes over a fixed key domain to two traces side by side:

* ``compaction``: a reader holds only the last few epochs, and maintenance
  (``exert``) runs after every append, so merges happen and compact history;
* ``no_compaction``: a reader holds epoch 0 forever, so no batch boundary may be
  merged away and nothing can be compacted; this is what the spine prevents.

Every ``--every`` appends it records the number of batches in the spine, rows
stored against live distinct records, the time of an "as of latest" read, and
the mean append+maintenance time, and checks every read against a Python model
of the collection. Results go to ``bench/results/trace_spine.json`` and a plot
``bench/results/trace_spine.png``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import environment, recorded_argv, run_recorded, write_json
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.lattice import Antichain
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.reader_handle import ReaderHandle
from dd_etl.trace.spine import batch_limit

SCHEMA = StructType([StructField("k", LongType(), False), StructField("v", LongType(), False)])
COLUMNS = "k long, v long, _time long, _diff long"
READER = "bench"
COMPACTION = "compaction"
NO_COMPACTION = "no_compaction"

Update = tuple[int, int, int, int]
"""``(k, v, time, diff)``: one row of an updates DataFrame."""
Contents = dict[tuple[int, int], int]


@dataclass(frozen=True)
class BenchConfig:
    appends: int
    batch_size: int
    keys: int
    retain: int
    fuel: int
    every: int
    no_compaction_appends: int
    delete_fraction: float
    rows_per_file: int
    read_repeats: int
    seed: int


# ------------------------------------------------------------------ workload


class Workload:
    """Deterministic epochs of updates over keys ``0..keys-1``, and the live collection.

    Each operation picks a key uniformly: a key not live is inserted; a live key
    is deleted with probability ``delete_fraction`` and otherwise upserted
    (its current row retracted, a row with a fresh value inserted). Live records
    therefore approach ``keys / (1 + delete_fraction)`` and stay there, while the
    update history grows linearly.
    """

    def __init__(self, keys: int, batch_size: int, delete_fraction: float, seed: int) -> None:
        self.keys = keys
        self.batch_size = batch_size
        self.delete_fraction = delete_fraction
        self.rng = random.Random(seed)
        self.live: dict[int, int] = {}
        self.next_value = 0
        self.total_updates = 0

    def _fresh_value(self) -> int:
        self.next_value += 1
        return self.next_value

    def epoch(self, epoch: int) -> list[Update]:
        """The updates of one epoch, applied to the live collection as they are made."""
        updates: list[Update] = []
        while len(updates) < self.batch_size:
            k = self.rng.randrange(self.keys)
            old = self.live.get(k)
            if old is None:
                new = self._fresh_value()
                updates.append((k, new, epoch, 1))
                self.live[k] = new
            elif self.rng.random() < self.delete_fraction:
                updates.append((k, old, epoch, -1))
                del self.live[k]
            else:
                new = self._fresh_value()
                updates += [(k, old, epoch, -1), (k, new, epoch, 1)]
                self.live[k] = new
        self.total_updates += len(updates)
        return updates

    def contents(self) -> Contents:
        return {(k, v): 1 for k, v in self.live.items()}


# ------------------------------------------------------------------ one trace


@dataclass
class Checkpoint:
    appends: int
    total_updates: int
    log2_total_updates: float
    batches: int
    backpressure_limit: int
    spine_levels: list[int]
    merges_in_progress: int
    pending_merge_work: int
    rows_stored: int
    live_records: int
    stored_per_live: float
    since: int | None
    read_latest_seconds: float
    mean_append_seconds: float
    mean_maintenance_seconds: float
    mean_append_and_maintenance_seconds: float


@dataclass
class Run:
    """One trace under one reader policy, with what was measured on it."""

    name: str
    trace: DeltaTrace
    reader: ReaderHandle
    retain: int | None  # None: the reader never moves its hold from epoch 0
    fuel: int
    limit: int
    checkpoints: list[Checkpoint] = field(default_factory=list)
    total_updates: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    rows_stored: list[int] = field(default_factory=list)
    append_seconds: list[float] = field(default_factory=list)
    maintenance_seconds: list[float] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.batches)

    def step(self, epoch: int, updates: DataFrame, total_updates: int) -> None:
        """Append epoch ``[epoch, epoch + 1)``, move the reader's hold, run maintenance."""
        started = time.perf_counter()
        appended = self.trace.compare_and_append(
            updates, Antichain.from_epoch(epoch), Antichain.from_epoch(epoch + 1)
        )
        if not appended:
            raise RuntimeError(f"{self.name}: epoch {epoch} was not appended")
        between = time.perf_counter()
        if self.retain is not None:
            hold = Antichain.from_epoch(max(0, epoch + 1 - self.retain))
            self.reader.downgrade(hold, hold)
        self.trace.exert(self.fuel)
        finished = time.perf_counter()
        self.append_seconds.append(between - started)
        self.maintenance_seconds.append(finished - between)
        self.total_updates.append(total_updates)
        self.batches.append(len(self.trace.state.batches))
        self.rows_stored.append(self.trace.state.records)

    def checkpoint(self, workload: Workload, repeats: int, every: int) -> Checkpoint:
        expected = workload.contents()
        check_contents(self.name, self.trace.read_at(), expected, "latest")
        count, seconds = timed_count(self.trace.read_at, repeats)
        if count != len(expected):
            raise AssertionError(f"{self.name}: read counts {count}, model has {len(expected)}")
        state = self.trace.state
        recent = slice(max(0, self.done - every), self.done)
        appends = mean(self.append_seconds[recent])
        maintenance = mean(self.maintenance_seconds[recent])
        point = Checkpoint(
            appends=self.done,
            total_updates=workload.total_updates,
            log2_total_updates=math.log2(workload.total_updates),
            batches=len(state.batches),
            backpressure_limit=batch_limit(state.records),
            spine_levels=[b.level for b in state.batches],
            merges_in_progress=len(state.merges),
            pending_merge_work=self.trace.pending_work(),
            rows_stored=state.records,
            live_records=len(expected),
            stored_per_live=state.records / max(1, len(expected)),
            since=state.since.epoch_bound(),
            read_latest_seconds=seconds,
            mean_append_seconds=appends,
            mean_maintenance_seconds=maintenance,
            mean_append_and_maintenance_seconds=appends + maintenance,
        )
        self.checkpoints.append(point)
        return point

    def to_json(self) -> dict[str, Any]:
        return {
            "reader_hold": (
                "epoch 0, never moved"
                if self.retain is None
                else f"logical = physical = upper - {self.retain}"
            ),
            "fuel_per_append": self.fuel,
            "appends": self.done,
            "appends_planned": self.limit,
            "checkpoints": [asdict(c) for c in self.checkpoints],
            "per_append": {
                "total_updates": self.total_updates,
                "batches": self.batches,
                "rows_stored": self.rows_stored,
                "append_seconds": [round(s, 4) for s in self.append_seconds],
                "maintenance_seconds": [round(s, 4) for s in self.maintenance_seconds],
            },
        }


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def timed_count(read: Any, repeats: int) -> tuple[int, float]:
    """Count the rows of ``read()`` ``repeats`` times; the count and the best time."""
    best = math.inf
    count = -1
    for _ in range(repeats):
        started = time.perf_counter()
        count = read().count()
        best = min(best, time.perf_counter() - started)
    return count, best


def check_contents(name: str, df: DataFrame, expected: Contents, label: str) -> None:
    got = {(r["k"], r["v"]): r["_diff"] for r in df.collect()}
    if got != expected:
        missing = len(expected.keys() - got.keys())
        extra = len(got.keys() - expected.keys())
        raise AssertionError(
            f"{name}: read as of {label} differs from the model "
            f"({missing} rows missing, {extra} extra, {len(got)} vs {len(expected)})"
        )


def new_run(
    spark: SparkSession, root: Path, name: str, cfg: BenchConfig, retain: int | None, limit: int
) -> Run:
    trace = DeltaTrace.create(
        spark, str(root / name), name, SCHEMA, ["k"], rows_per_file=cfg.rows_per_file
    )
    start = Antichain.from_epoch(0)
    reader = trace.open_reader(READER, start, start)
    return Run(name, trace, reader, retain, cfg.fuel, limit)


# ------------------------------------------------------------------ disk


def disk_usage(root: Path) -> dict[str, int]:
    """Files and bytes under a trace: batch data and the Delta log, separately."""
    usage = {"data_files": 0, "data_bytes": 0, "log_files": 0, "log_bytes": 0}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        kind = "log" if "_delta_log" in path.relative_to(root).parts else "data"
        usage[f"{kind}_files"] += 1
        usage[f"{kind}_bytes"] += path.stat().st_size
    return usage


def vacuum(run: Run, workload: Workload) -> dict[str, Any]:
    root = run.trace.where.path
    before = disk_usage(root)
    started = time.perf_counter()
    removed = run.trace.vacuum(retention_hours=0)
    seconds = time.perf_counter() - started
    check_contents(run.name, run.trace.read_at(), workload.contents(), "latest, after vacuum")
    return {
        "before": before,
        "after": disk_usage(root),
        "files_removed": len(removed),
        "seconds": seconds,
        "live_files_in_log": len(run.trace.files()),
    }


# ------------------------------------------------------------------ driver


def check_held_epoch(run: Run, snapshots: deque[tuple[int, Contents]]) -> None:
    """The compacted trace still reads correctly as of the oldest epoch its reader holds."""
    since = run.trace.state.since.epoch_bound()
    for epoch, contents in snapshots:
        if epoch == since:
            check_contents(run.name, run.trace.read_at((epoch,)), contents, f"epoch {epoch}")
            return
    raise AssertionError(f"{run.name}: no model snapshot for since {since}")


def run_benchmark(spark: SparkSession, cfg: BenchConfig, root: Path) -> dict[str, Any]:
    workload = Workload(cfg.keys, cfg.batch_size, cfg.delete_fraction, cfg.seed)
    runs = [
        new_run(spark, root, COMPACTION, cfg, cfg.retain, cfg.appends),
        new_run(spark, root, NO_COMPACTION, cfg, None, cfg.no_compaction_appends),
    ]
    snapshots: deque[tuple[int, Contents]] = deque(maxlen=cfg.retain + 1)
    result: dict[str, Any] = {}
    started = time.perf_counter()
    for epoch in range(cfg.appends):
        rows = workload.epoch(epoch)
        snapshots.append((epoch, workload.contents()))
        updates = spark.createDataFrame(rows, COLUMNS)
        for run in runs:
            if run.done < run.limit:
                run.step(epoch, updates, workload.total_updates)
        for run in runs:
            if run.done == epoch + 1 and (run.done % cfg.every == 0 or run.done == run.limit):
                report(run.name, run.checkpoint(workload, cfg.read_repeats, cfg.every))
                if run.retain is not None:
                    check_held_epoch(run, snapshots)
        if (epoch + 1) % cfg.every == 0:
            result = assemble(spark, cfg, runs, time.perf_counter() - started, {})
            write_json("trace_spine", result)
    vacuumed = vacuum(runs[0], workload)
    disk = {run.name: disk_usage(run.trace.where.path) for run in runs}
    result = assemble(
        spark,
        cfg,
        runs,
        time.perf_counter() - started,
        {"compaction_vacuum": vacuumed, "final_disk_usage": disk},
    )
    result["complete"] = True
    return result


def assemble(
    spark: SparkSession,
    cfg: BenchConfig,
    runs: list[Run],
    seconds: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    notes = []
    if cfg.no_compaction_appends < cfg.appends:
        notes.append(
            f"{NO_COMPACTION} is capped at {cfg.no_compaction_appends} of {cfg.appends} appends"
        )
    return {
        "benchmark": "trace_spine",
        "complete": False,
        "argv": recorded_argv(),
        "config": asdict(cfg),
        "environment": environment(spark),
        "notes": notes,
        "wall_seconds": round(seconds, 1),
        "runs": {run.name: run.to_json() for run in runs},
        **extra,
    }


def report(name: str, c: Checkpoint) -> None:
    print(
        f"{name:>13} {c.appends:>5} appends: {c.batches:>4} batches, "
        f"{c.rows_stored:>6} rows stored / {c.live_records} live, "
        f"read {c.read_latest_seconds:.3f}s, "
        f"append+maintenance {c.mean_append_and_maintenance_seconds:.3f}s",
        flush=True,
    )


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(13, 9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    styles = {COMPACTION: "tab:blue", NO_COMPACTION: "tab:red"}
    runs: dict[str, Any] = result["runs"]
    cfg = result["config"]
    plot_batches(axes[0][0], runs, styles, cfg)
    plot_rows(axes[0][1], runs, styles)
    plot_checkpoint_series(
        axes[1][0], runs, styles, "read_latest_seconds", "'as of latest' read, best of 3 (s)"
    )
    plot_checkpoint_series(
        axes[1][1],
        runs,
        styles,
        "mean_append_and_maintenance_seconds",
        f"append + maintenance, mean over last {cfg['every']} (s)",
    )
    fig.suptitle(
        f"Trace spine: {cfg['appends']} appends of ~{cfg['batch_size']} updates "
        f"over {cfg['keys']} keys, fuel {cfg['fuel']}, retain {cfg['retain']} epochs"
    )
    fig.savefig(path, dpi=110)


def plot_batches(
    ax: Axes, runs: dict[str, Any], styles: dict[str, str], cfg: dict[str, Any]
) -> None:
    for name, run in runs.items():
        batches = run["per_append"]["batches"]
        ax.plot(range(1, len(batches) + 1), batches, color=styles[name], label=name)
    totals = runs[COMPACTION]["per_append"]["total_updates"]
    ax.plot(
        range(1, len(totals) + 1),
        [math.log2(n) for n in totals],
        "k--",
        label="log2(total updates appended)",
    )
    points = runs[COMPACTION]["checkpoints"]
    ax.plot(
        [p["appends"] for p in points],
        [p["backpressure_limit"] for p in points],
        color=styles[COMPACTION],
        linestyle=":",
        marker="o",
        markersize=3,
        label=f"{COMPACTION}: back-pressure limit",
    )
    ax.set_yscale("log")
    ax.set_xlabel("appends")
    ax.set_ylabel("batches in the spine")
    ax.set_title(f"spine size (reader holds: last {cfg['retain']} epochs vs epoch 0)")
    ax.legend()


def plot_rows(ax: Axes, runs: dict[str, Any], styles: dict[str, str]) -> None:
    for name, run in runs.items():
        rows = run["per_append"]["rows_stored"]
        ax.plot(range(1, len(rows) + 1), rows, color=styles[name], label=f"{name}: rows stored")
    points = runs[COMPACTION]["checkpoints"]
    ax.plot(
        [p["appends"] for p in points],
        [p["live_records"] for p in points],
        "k--",
        marker="o",
        markersize=3,
        label="live distinct records",
    )
    ax.set_yscale("log")
    ax.set_xlabel("appends")
    ax.set_ylabel("rows")
    ax.set_title("rows stored vs live records")
    ax.legend()


def plot_checkpoint_series(
    ax: Axes, runs: dict[str, Any], styles: dict[str, str], key: str, title: str
) -> None:
    for name, run in runs.items():
        points = run["checkpoints"]
        ax.plot(
            [p["appends"] for p in points],
            [p[key] for p in points],
            color=styles[name],
            marker="o",
            label=name,
        )
    ax.set_ylim(bottom=0)
    ax.set_xlabel("appends")
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.legend()


# ------------------------------------------------------------------ CLI


def parse_args(argv: list[str]) -> tuple[BenchConfig, Path | None, bool]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--appends", type=int, default=1000, help="epochs appended (default 1000)")
    p.add_argument("--batch-size", type=int, default=50, help="updates per epoch (default 50)")
    p.add_argument("--keys", type=int, default=2000, help="size of the key domain (default 2000)")
    p.add_argument("--retain", type=int, default=5, help="epochs the compaction reader holds")
    p.add_argument(
        "--fuel", type=int, default=None, help="merge fuel per append (default 20 x batch)"
    )
    p.add_argument("--every", type=int, default=100, help="appends between checkpoints")
    p.add_argument(
        "--no-compaction-appends",
        type=int,
        default=None,
        help="cap on the appends of the no_compaction trace (default: --appends)",
    )
    p.add_argument("--delete-fraction", type=float, default=0.1)
    p.add_argument("--rows-per-file", type=int, default=250_000)
    p.add_argument("--read-repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", type=Path, default=None, help="where scratch traces go")
    p.add_argument("--keep", action="store_true", help="keep the scratch traces")
    a = p.parse_args(argv)
    cfg = BenchConfig(
        appends=a.appends,
        batch_size=a.batch_size,
        keys=a.keys,
        retain=a.retain,
        fuel=a.fuel if a.fuel is not None else 20 * a.batch_size,
        every=a.every,
        no_compaction_appends=min(a.appends, a.no_compaction_appends or a.appends),
        delete_fraction=a.delete_fraction,
        rows_per_file=a.rows_per_file,
        read_repeats=a.read_repeats,
        seed=a.seed,
    )
    return cfg, a.workdir, a.keep


def main(argv: list[str] | None = None) -> None:
    cfg, workdir, keep = parse_args(sys.argv[1:] if argv is None else argv)
    run_recorded(
        "trace_spine",
        lambda spark, root: run_benchmark(spark, cfg, root),
        plot,
        workdir,
        keep,
        memory="2g",
    )


if __name__ == "__main__":
    main()
