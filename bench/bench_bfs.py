"""Benchmark: BFS under a long sequence of edge changes (the differential dataflow
paper's experiment, scaled to local Spark).

A random directed graph (``--nodes``, ``--edges``) and one root are loaded at
epoch 0 and ``graphs.bfs`` computes hop distances. Then random single-edge
changes (an existing edge deleted or a new one inserted, half and half) are
applied, ``g`` changes per epoch for each group size ``g`` of ``--groups``,
each group size on a fresh warehouse. For every epoch the benchmark records:

* the wall time of ``Runtime.run()`` (the epoch's latency) and the number of
  changes applied so far, so latency can be read after 10, 100, 1000 changes;
* the updates each loop iteration processed (the paper's figure 1: a change
  touches a few iterations with few updates, the load all of them);
* the records held by the loop's traces, which stay bounded because maintenance
  (``maintain``, every ``--maintain-every`` epochs, timed separately as it runs
  off the critical path) advances and consolidates them.

Every ``--scratch-every`` epochs it also times the from-scratch evaluation of the
same loop on the same Spark (``recompute``), for the ratio of incremental to
from-scratch time, and at the end of each sequence checks the result against
networkx. Results: ``bench/results/bfs.json`` and ``bench/results/bfs.png``.

A sequence stopped by its ``--budget`` goes on later with ``--resume DIR``, DIR
being the scratch directory its run kept (``--keep``): the changes are drawn
again from the seeded generator, the warehouse is checked to hold their result,
and a new process applies the rest. The runtime picks up from its committed
traces, as after any restart; the plot marks where.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from itertools import groupby
from pathlib import Path
from typing import Any

import networkx as nx
from common import RESULTS, code_version, environment, run_recorded, write_json
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow, graphs
from dd_etl.plan.loops import inner_traces
from dd_etl.plan.nodes import Iterate
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.maintenance import find_traces, maintain

EDGES = StructType(
    [
        StructField("src", LongType()),
        StructField("dst", LongType()),
        StructField("_diff", LongType()),
    ]
)
ROOTS = StructType([StructField("node", LongType()), StructField("_diff", LongType())])
WINDOWS = ((1, 10), (11, 100), (101, 1000))
"""Latency is summarised over the epochs whose changes-so-far fall in each window."""
QUIET_LOAD = 3.0
"""The benchmark alone keeps a 2-core machine's 1-minute load average at 2-3: an
epoch recorded above this shared the machine with other work."""


class Graph:
    """The edge set and its random changes, mirrored in networkx for checking."""

    def __init__(self, nodes: int, edges: int, seed: int) -> None:
        self.nodes = nodes
        self.rng = random.Random(seed)
        self.edges: set[tuple[int, int]] = set()
        while len(self.edges) < edges:
            self.edges.add(self._random_edge())

    def _random_edge(self) -> tuple[int, int]:
        while True:
            a, b = self.rng.randrange(self.nodes), self.rng.randrange(self.nodes)
            if a != b:
                return a, b

    def changes(self, count: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        for _ in range(count):
            if self.rng.random() < 0.5:
                edge = self.rng.choice(sorted(self.edges))
                self.edges.discard(edge)
                out.append((*edge, -1))
            else:
                edge = self._random_edge()
                while edge in self.edges:
                    edge = self._random_edge()
                self.edges.add(edge)
                out.append((*edge, 1))
        return out

    def distances(self, root: int) -> Counter[tuple[int, int]]:
        g = nx.DiGraph(list(self.edges))
        g.add_node(root)
        return Counter(nx.single_source_shortest_path_length(g, root).items())


def loop_records(rt: Runtime) -> int:
    loop = next(x for x in rt.stateful_nodes() if isinstance(x, Iterate))
    return sum(rt.loop_trace(loop, x).reload().records for x in inner_traces(loop))


def sequence(
    spark: SparkSession,
    root: Path,
    args: argparse.Namespace,
    group: int,
    total: int,
    before: dict[str, Any] | None,
    record: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Apply ``total`` changes, ``group`` per epoch, or as many as the budget allows;
    ``before`` is this group's sequence recorded so far on ``root``, to go on with.
    ``record`` gets the sequence so far after every epoch, so a killed run loses at
    most the epoch it was in and can be resumed."""
    graph = Graph(args.nodes, args.edges, args.seed)
    flow = Dataflow(spark, root / f"group_{group}")
    edges = flow.source("edges", StructType(EDGES.fields[:2]))
    roots = flow.source("roots", StructType(ROOTS.fields[:1]))
    flow.view("bfs", graphs.bfs(roots, edges))
    rt = Runtime(flow)
    settings = {"maintain_every": args.maintain_every, "scratch_every": args.scratch_every}
    if before is None:
        out = {
            "group": group,
            **load(spark, rt, graph),
            "settings": settings,
            "code": code_version(),
            "resumed": [],
        }
        applied = 0
    else:
        out, applied = resume(rt, graph, before, settings, group, total)
    epochs: list[dict[str, Any]] = out["epochs"]
    deadline = time.monotonic() + args.budget
    while applied < total and time.monotonic() < deadline:
        epoch = rt.pending()[1]  # the sources' next epoch
        batch = graph.changes(min(group, total - applied))
        applied += len(batch)
        rt.append_source("edges", spark.createDataFrame(batch, EDGES), epoch)
        rt.append_source("roots", spark.createDataFrame([], ROOTS), epoch)
        started = time.perf_counter()
        report = rt.run()
        seconds = time.perf_counter() - started
        row: dict[str, Any] = {
            "epoch": epoch,
            "changes_so_far": applied,
            "seconds": round(seconds, 3),
            "rounds": [[r.iteration, r.updates] for r in report.rounds],
            "loop_trace_records": loop_records(rt),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "at": time.strftime("%H:%M:%S", time.gmtime()),
        }
        if epoch % args.maintain_every == 0:
            started = time.perf_counter()
            for path in find_traces(root / f"group_{group}"):
                maintain(DeltaTrace(spark, path), None, retention_hours=0)
            row["maintenance_seconds"] = round(time.perf_counter() - started, 3)
            row["loop_trace_records_after_maintenance"] = loop_records(rt)
        if epoch % args.scratch_every == 0:
            started = time.perf_counter()
            recompute(rt, "bfs", epoch).count()
            row["from_scratch_seconds"] = round(time.perf_counter() - started, 3)
        epochs.append(row)
        record(summary(out, total, applied, None))
        print(f"group {group}: epoch {epoch}, {applied} changes, {seconds:.1f}s", file=sys.stderr)
    got = Counter(tuple(r) for r in rt.read("bfs").collect())
    return summary(out, total, applied, got == graph.distances(0))


def summary(out: dict[str, Any], total: int, applied: int, equal: bool | None) -> dict[str, Any]:
    """The sequence as recorded; ``equal`` is None while it is still running."""
    return summarised(
        out | {"changes_requested": total, "changes_applied": applied, "equals_networkx": equal}
    )


def summarised(sequence: dict[str, Any]) -> dict[str, Any]:
    """The sequence with its summaries, and those of each stretch of it that one
    code version measured (a resumed run may run newer code than the epochs before)."""

    def code(epoch: dict[str, Any]) -> str | None:
        measured_by = sequence.get("code")
        for r in sequence.get("resumed", []):
            if r["changes"] < epoch["changes_so_far"]:
                measured_by = r.get("code")
        return measured_by

    by_code = []
    for version, stretch in groupby(sequence["epochs"], key=code):
        part = list(stretch)
        span = f"{part[0]['changes_so_far']}-{part[-1]['changes_so_far']}"
        by_code.append({"code": version, "changes": span, **summaries(part)})
    return sequence | summaries(sequence["epochs"]) | {"by_code": by_code}


def summaries(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the recorded epochs say, computed from them alone."""
    return {
        "latency_by_window": windows(epochs),
        "latency_by_hundred": hundreds(epochs),
        "two_round_trend": two_round_trend(epochs),
        "two_round_trend_quiet": two_round_trend(
            [e for e in epochs if e.get("load_average_1min", math.inf) <= QUIET_LOAD]
        ),
        "incremental_over_from_scratch": ratio(epochs),
    }


def load(spark: SparkSession, rt: Runtime, graph: Graph) -> dict[str, Any]:
    """Epoch 0, the whole graph and the root, run incrementally and from scratch."""
    recorded = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    rows = [(a, b, 1) for a, b in sorted(graph.edges)]
    rt.append_source("edges", spark.createDataFrame(rows, EDGES), 0)
    rt.append_source("roots", spark.createDataFrame([(0, 1)], ROOTS), 0)
    started = time.perf_counter()
    report = rt.run()
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    recompute(rt, "bfs", 0).count()
    return {
        "recorded": recorded,
        "load_seconds": round(load_seconds, 3),
        "load_rounds": [[r.iteration, r.updates] for r in report.rounds],
        "from_scratch_load_seconds": round(time.perf_counter() - started, 3),
        "epochs": [],
    }


def resume(
    rt: Runtime,
    graph: Graph,
    before: dict[str, Any],
    settings: dict[str, int],
    group: int,
    total: int,
) -> tuple[dict[str, Any], int]:
    """Replay the recorded changes on ``graph`` (its generator is seeded, so they come
    out the same) and check the warehouse holds their result, so a sequence its
    budget stopped, or a kill interrupted, goes on in a new process where it left off.

    A process killed after committing an epoch but before recording it leaves the
    warehouse an epoch ahead of the record: that epoch's changes are drawn again
    and left unrecorded (its time was lost with the process), and a run interrupted
    half-way is finished before anything is timed. Returns the sequence to go on
    with and the changes applied so far."""
    if before.get("settings", settings) != settings:
        raise SystemExit(f"--resume: group {before['group']} was run with {before['settings']}")
    applied = 0
    for e in before["epochs"]:
        applied += len(graph.changes(e["changes_so_far"] - applied))
    appended = rt.pending()[1] - 1  # epochs after the load the sources hold
    unrecorded = appended - len(before["epochs"])
    for _ in range(unrecorded):
        applied += len(graph.changes(min(group, total - applied)))
    rt.run()
    got = Counter(tuple(r) for r in rt.read("bfs").collect())
    if got != graph.distances(0):
        raise SystemExit(
            f"--resume: the warehouse of group {before['group']} does not hold the result "
            f"of its {applied} recorded changes"
        )
    at = {
        "changes": applied,
        "unrecorded_epochs": unrecorded,
        "code": code_version(),
        "recorded": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    out = before | {
        "settings": settings,
        "resumed": [*before.get("resumed", []), at],
        "epochs": list(before["epochs"]),
    }
    return out, applied


def windows(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for lo, hi in WINDOWS:
        times = [e["seconds"] for e in epochs if lo <= e["changes_so_far"] <= hi]
        if times:
            q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
            out.append(
                {
                    "changes": f"{lo}-{hi}",
                    "epochs": len(times),
                    "median_s": round(statistics.median(times), 2),
                    "p10_s": round(q[0], 2),
                    "p90_s": round(q[-1], 2),
                }
            )
    return out


def two_rounds(epoch: dict[str, Any]) -> bool:
    """The commonest single-change epoch: the input round and one more. Epochs of
    this shape do the same work, so their latency over the run isolates the cost
    of history from the cost of the change."""
    return len(epoch["rounds"]) == 2


def hundreds(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median latency per hundred changes, of all epochs and of two-round ones."""
    blocks: dict[int, list[dict[str, Any]]] = {}
    for e in epochs:
        blocks.setdefault((e["changes_so_far"] - 1) // 100, []).append(e)
    out = []
    for block, members in sorted(blocks.items()):
        same = [e["seconds"] for e in members if two_rounds(e)]
        out.append(
            {
                "changes": f"{100 * block + 1}-{100 * (block + 1)}",
                "epochs": len(members),
                "median_s": round(statistics.median(e["seconds"] for e in members), 2),
                "two_round_epochs": len(same),
                "two_round_median_s": round(statistics.median(same), 2) if same else None,
            }
        )
    return out


def two_round_trend(epochs: list[dict[str, Any]]) -> dict[str, float] | None:
    """How much an epoch of the same work slows down per hundred changes of history:
    the Theil-Sen slope (median of pairwise slopes, so a few slow epochs do not
    tilt it) of two-round epochs' latency against the changes applied, and the
    latency the fit gives at the first of them."""
    points = [(e["changes_so_far"], e["seconds"]) for e in epochs if two_rounds(e)]
    slopes = [
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(points)
        for x2, y2 in points[i + 1 :]
        if x2 != x1
    ]
    if len(points) < 3 or not slopes:
        return None
    slope = statistics.median(slopes)
    return {
        "epochs": len(points),
        "seconds_at_start": round(
            statistics.median(y - slope * (x - points[0][0]) for x, y in points), 2
        ),
        "seconds_per_100_changes": round(100 * slope, 3),
    }


def ratio(epochs: list[dict[str, Any]]) -> float | None:
    pairs = [
        e["seconds"] / e["from_scratch_seconds"] for e in epochs if "from_scratch_seconds" in e
    ]
    return round(statistics.median(pairs), 3) if pairs else None


def benchmark(spark: SparkSession, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "bfs",
        "nodes": args.nodes,
        "edges": args.edges,
        "seed": args.seed,
        "environment": environment(spark),
        "sequences": [],
    }
    runs = [tuple(int(x) for x in spec.split(":")) for spec in args.groups.split(",")]
    recorded = recorded_sequences(args)
    kept = [s for s in recorded if s["group"] not in {group for group, _ in runs}]
    for group, total in runs:
        before = next((s for s in recorded if s["group"] == group), None) if args.resume else None
        if args.resume and before is None:
            raise SystemExit(f"--resume: no recorded sequence of group {group} to go on with")

        def record(running: dict[str, Any], done: list[dict[str, Any]] = kept) -> None:
            result["sequences"] = sorted([*done, running], key=lambda x: x["group"])
            write_json("bfs", result)  # partial results survive an interrupted run

        finished = sequence(spark, root, args, group, total, before, record)
        record(finished)
        kept.append(finished)
    return result


def recorded_sequences(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The sequences already recorded for the same graph, so one group size can be
    measured again (or resumed) on its own without losing the others."""
    path = RESULTS / "bfs.json"
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    if (old["nodes"], old["edges"], old["seed"]) != (args.nodes, args.edges, args.seed):
        return []
    return list(old["sequences"])


def rolling_median(values: list[float], width: int = 25) -> list[float]:
    return [statistics.median(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def plot(result: dict[str, Any], path: Path) -> None:
    """Latency as history grows (every epoch, the same-work epochs, the distribution
    per window), the paper's figure 1, the loop's state and the from-scratch time."""
    fig = Figure(figsize=(15, 9))
    (latency, distribution, same_work), (per_iteration, state, scratch) = fig.subplots(2, 3)
    boxes: list[list[float]] = []
    labels: list[str] = []
    for s in result["sequences"]:
        xs = [e["changes_so_far"] for e in s["epochs"]]
        seconds = [e["seconds"] for e in s["epochs"]]
        dots = latency.plot(xs, seconds, ".", alpha=0.35)[0]
        color = dots.get_color()
        latency.plot(xs, rolling_median(seconds), "-", color=color, label=f"{s['group']} per epoch")
        for at in s.get("resumed", []):  # a new process went on from here
            latency.axvline(at["changes"], linestyle=":", color=color)
        for lo, hi in WINDOWS:
            window = [e["seconds"] for e in s["epochs"] if lo <= e["changes_so_far"] <= hi]
            if window:
                boxes.append(window)
                labels.append(f"{s['group']}/ep\n{lo}-{hi}")
        same = [e for e in s["epochs"] if two_rounds(e)]
        if len(same) > 10:
            sx = [e["changes_so_far"] for e in same]
            sy = [e["seconds"] for e in same]
            same_work.plot(sx, sy, ".", alpha=0.35, color=color)
            same_work.plot(
                sx, rolling_median(sy), "-", color=color, label=f"{s['group']} per epoch"
            )
        records = [e["loop_trace_records"] for e in s["epochs"]]
        line = state.plot(xs, records, "-", label=f"{s['group']} per epoch")[0]
        merged = [e for e in s["epochs"] if "loop_trace_records_after_maintenance" in e]
        state.plot(
            [e["changes_so_far"] for e in merged],
            [e["loop_trace_records_after_maintenance"] for e in merged],
            "v",
            color=line.get_color(),
        )
        timed = [e for e in s["epochs"] if "from_scratch_seconds" in e]
        scratch.plot(
            [e["changes_so_far"] for e in timed],
            [e["from_scratch_seconds"] for e in timed],
            "x--",
            color=color,
            label=f"from scratch ({s['group']}/ep)",
        )
        scratch.plot(
            xs, rolling_median(seconds), "-", color=color, label=f"incremental ({s['group']}/ep)"
        )
    latency.set(xlabel="changes applied", ylabel="epoch latency (s)")
    latency.set_title("latency per epoch (line: median of the last 25)")
    latency.legend()
    distribution.boxplot(boxes, whis=(10, 90), showfliers=False)
    distribution.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    distribution.set(ylabel="epoch latency (s)")
    distribution.set_title("latency by changes so far (box p25-p75, whiskers p10-p90)")
    same_work.set(xlabel="changes applied", ylabel="epoch latency (s)")
    same_work.set_title("epochs of two rounds (the same work): history's cost")
    if same_work.lines:
        same_work.legend()
    first = result["sequences"][0]
    per_iteration.plot(*zip(*first["load_rounds"], strict=True), "o-", label="from scratch (load)")
    busiest = max(first["epochs"], key=lambda e: sum(u for _, u in e["rounds"]), default=None)
    if busiest is not None and busiest["rounds"]:
        it, updates = zip(*busiest["rounds"], strict=True)
        label = "busiest single-edge epoch"
        per_iteration.plot(it, [max(u, 0.8) for u in updates], "s-", label=label)
    per_iteration.set(yscale="log", xlabel="iteration", ylabel="updates processed")
    per_iteration.set_title("updates per iteration (paper fig. 1)")
    per_iteration.legend()
    state.set(xscale="log", xlabel="changes applied", ylabel="records in the loop's traces")
    state.set_title("loop state (▼ after maintenance)")
    state.legend()
    scratch.set(xlabel="changes applied", ylabel="seconds")
    scratch.set_title("incremental epoch vs from-scratch fixed point")
    scratch.legend(fontsize=8)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--edges", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--groups",
        default="1:1000,10:1000,100:1000",
        help="group size:total changes, comma-separated",
    )
    parser.add_argument("--budget", type=float, default=3600, help="seconds per sequence")
    parser.add_argument("--maintain-every", type=int, default=10)
    parser.add_argument("--scratch-every", type=int, default=10)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the warehouses (to --resume)")
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="a kept scratch directory: go on with its recorded sequences where they stopped",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        help="only summarise and draw again the epochs recorded in results/bfs.json",
    )
    args = parser.parse_args()
    if args.plot:
        result = json.loads((RESULTS / "bfs.json").read_text())
        result["sequences"] = [summarised(s) for s in result["sequences"]]
        write_json("bfs", result)
        plot(result, RESULTS / "bfs.png")
        return
    run_recorded(
        "bfs",
        lambda spark, root: benchmark(spark, root, args),
        plot,
        args.workdir,
        args.keep,
        reuse=args.resume,
    )


if __name__ == "__main__":
    main()
