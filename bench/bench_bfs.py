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
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx
from common import RESULTS, environment, run_recorded, write_json
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow, graphs
from dd_etl.plan.iteration import inner_traces
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
) -> dict[str, Any]:
    """Apply ``total`` changes, ``group`` per epoch, or as many as the budget allows;
    ``before`` is this group's sequence recorded so far on ``root``, to go on with."""
    graph = Graph(args.nodes, args.edges, args.seed)
    flow = Dataflow(spark, root / f"group_{group}")
    edges = flow.source("edges", StructType(EDGES.fields[:2]))
    roots = flow.source("roots", StructType(ROOTS.fields[:1]))
    flow.view("bfs", graphs.bfs(roots, edges))
    rt = Runtime(flow)
    settings = {"maintain_every": args.maintain_every, "scratch_every": args.scratch_every}
    if before is None:
        out = {"group": group, **load(spark, rt, graph), "settings": settings, "resumed": []}
    else:
        out = resume(rt, graph, before, settings)
    epochs: list[dict[str, Any]] = out["epochs"]
    applied = epochs[-1]["changes_so_far"] if epochs else 0
    deadline = time.monotonic() + args.budget
    while applied < total and time.monotonic() < deadline:
        epoch = len(epochs) + 1
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
        }
        if epoch % args.maintain_every == 0:
            started = time.perf_counter()
            for path in find_traces(root / f"group_{group}"):
                maintain(DeltaTrace(spark, str(path)), None, retention_hours=0)
            row["maintenance_seconds"] = round(time.perf_counter() - started, 3)
            row["loop_trace_records_after_maintenance"] = loop_records(rt)
        if epoch % args.scratch_every == 0:
            started = time.perf_counter()
            recompute(rt, "bfs", epoch).count()
            row["from_scratch_seconds"] = round(time.perf_counter() - started, 3)
        epochs.append(row)
        print(f"group {group}: epoch {epoch}, {applied} changes, {seconds:.1f}s", file=sys.stderr)
    got = Counter(tuple(r) for r in rt.read("bfs").collect())
    return out | {
        "changes_requested": total,
        "changes_applied": applied,
        "equals_networkx": got == graph.distances(0),
        "epochs": epochs,
        "latency_by_window": windows(epochs),
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
    rt: Runtime, graph: Graph, before: dict[str, Any], settings: dict[str, int]
) -> dict[str, Any]:
    """Replay the recorded changes on ``graph`` (its generator is seeded, so they come
    out the same) and check the warehouse holds their result, so a sequence its
    budget stopped goes on in a new process where it left off."""
    if before.get("settings", settings) != settings:
        raise SystemExit(f"--resume: group {before['group']} was run with {before['settings']}")
    applied = 0
    for e in before["epochs"]:
        applied += len(graph.changes(e["changes_so_far"] - applied))
    got = Counter(tuple(r) for r in rt.read("bfs").collect())
    if got != graph.distances(0):
        raise SystemExit(
            f"--resume: the warehouse of group {before['group']} does not hold the result "
            f"of its {applied} recorded changes"
        )
    at = {"changes": applied, "recorded": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    return before | {
        "settings": settings,
        "resumed": [*before.get("resumed", []), at],
        "epochs": list(before["epochs"]),
    }


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
        kept.append(sequence(spark, root, args, group, total, before))
        result["sequences"] = sorted(kept, key=lambda s: s["group"])
        write_json("bfs", result)  # partial results survive an interrupted run
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


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(13, 4.5))
    latency, per_iteration, state = fig.subplots(1, 3)
    for s in result["sequences"]:
        xs = [e["changes_so_far"] for e in s["epochs"]]
        seconds = [e["seconds"] for e in s["epochs"]]
        dots = latency.plot(xs, seconds, ".", label=f"{s['group']} per epoch")[0]
        for at in s.get("resumed", []):  # a new process went on from here
            latency.axvline(at["changes"], linestyle=":", color=dots.get_color())
        records = [e["loop_trace_records"] for e in s["epochs"]]
        line = state.plot(xs, records, "-", label=f"{s['group']} per epoch")[0]
        merged = [e for e in s["epochs"] if "loop_trace_records_after_maintenance" in e]
        state.plot(
            [e["changes_so_far"] for e in merged],
            [e["loop_trace_records_after_maintenance"] for e in merged],
            "v",
            color=line.get_color(),
        )
    latency.set(xscale="log", xlabel="changes applied", ylabel="epoch latency (s)")
    latency.set_title("BFS: latency per epoch as history grows")
    latency.legend()
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
    args = parser.parse_args()
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
