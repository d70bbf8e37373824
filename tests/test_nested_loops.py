"""Loops inside loops, with times ``(epoch, i, j)``: strongly connected components
(an outer trimming loop around label-propagation loops) stay equal to networkx
over random edge insertions and deletions that split and merge components."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.operators.iterative import earlier, iterations, later, not_after
from dd_etl.plan import Dataflow, graphs
from dd_etl.plan.dataflow import Collection
from dd_etl.plan.loops import inner_traces, loop_nest
from dd_etl.plan.nodes import Iterate
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute

pytestmark = pytest.mark.spark

EDGES = StructType([StructField("src", LongType()), StructField("dst", LongType())])
CHANGES = StructType([*EDGES.fields, StructField("_diff", LongType())])
ROOT = StructType([StructField("node", LongType())])
ROOT_CHANGES = StructType([*ROOT.fields, StructField("_diff", LongType())])
NODES = 7

Edge = tuple[int, int]


def components(edges: set[Edge]) -> Counter[tuple[int, int]]:
    g = nx.DiGraph(list(edges))
    return Counter((v, min(c)) for c in nx.strongly_connected_components(g) for v in c)


def test_strongly_connected_components_equal_networkx(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(11)
    flow = Dataflow(spark, tmp_path)
    flow.view("scc", graphs.strongly_connected_components(flow.source("edges", EDGES)))
    rt = Runtime(flow)
    # Two 3-cycles joined one way, a tail, and a self loop.
    edges = {(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5), (5, 3), (5, 6), (6, 6)}
    epochs: list[tuple[list[Edge], list[Edge]]] = [(sorted(edges), [])]
    # Merge the two cycles into one component (and cut a random edge), then split
    # it again (and add a random edge).
    cut = rng.choice(sorted(edges - {(1, 2), (2, 3), (3, 4)}))
    epochs.append(([(4, 1)], [cut]))
    epochs.append(([(rng.randrange(NODES), rng.randrange(NODES))], [(1, 2)]))

    now: set[Edge] = set()
    jobs: list[int | None] = []
    for epoch, (new, cut) in enumerate(epochs):
        new = [e for e in dict.fromkeys(new) if e not in now]
        rows = [(*e, 1) for e in new] + [(*e, -1) for e in cut if e in now]
        now = (now | set(new)) - set(cut)
        rt.append_source("edges", spark.createDataFrame(rows, CHANGES), epoch)
        report = rt.run()
        got = Counter(tuple(r) for r in rt.read("scc").collect())
        assert got == components(now), f"epoch {epoch}: edges {sorted(now)}"
        assert any(r.within for r in report.rounds), "the inner loops ran inside the outer one"
        jobs.append(None if report.profile is None else report.profile.spark_jobs)
    # A nested loop counts its work from the rows the driver holds: no job of its own.
    # Five more each epoch since a layer's writes are a job per task slot, side by
    # side; one fewer before that since they share jobs as memory allows, not a
    # fixed number a job. One fewer each epoch since a join outside the loop reads
    # a trace keyed by its columns, with no arrangement (a layer less to write).
    assert jobs == [81, 89, 102]  # 82, 90, 103 before; 77, 85, 98 and 78, 86, 99 earlier

    last = len(epochs) - 1
    batch = recompute(rt, "scc", last).collect()
    assert Counter({tuple(r)[:-1]: r["_diff"] for r in batch}) == components(now)

    # The inner loops' arrangements keep times (epoch, i, j).
    loop = next(x for x in rt.stateful_nodes() if isinstance(x, Iterate) and loop_nest(x))
    depths = {rt.loop_trace(loop, x).state.dims for x in inner_traces(loop)}
    assert depths == {2, 3}


def test_loops_from_one_collection_inside_a_loop_stay_apart(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two inner loops starting from the same collection get different variables,
    so their state is never mixed up."""
    flow = Dataflow(spark, tmp_path)
    edges = flow.source("edges", EDGES)
    roots = flow.source("roots", ROOT)
    forward = edges.select("src", "dst")
    backward = edges.select(src="dst", dst="src")

    def body(reached: Collection) -> Collection:
        ahead = graphs.reachable(reached, forward)
        behind = graphs.reachable(reached, backward)
        return ahead.semijoin(behind, on="node")

    outer = roots.iterate(body)
    assert isinstance(outer.node, Iterate)
    inner = [x for x, _ in loop_nest(outer.node).values() if isinstance(x, Iterate)]
    assert len(inner) == 2
    assert inner[0].variable is not None and inner[1].variable is not None
    assert inner[0].variable.id != inner[1].variable.id


def test_round_order_is_lexicographic_and_accumulation_is_the_product_order(
    spark: SparkSession,
) -> None:
    """The predicates a round filters with, against Python's tuple order: rounds
    run in lexicographic order, a round accumulates the times below it in the
    product order."""
    times = list(itertools.product(range(3), repeat=3))
    df = spark.createDataFrame(times, iterations(3))
    for t in [(0, 0, 0), (1, 0, 2), (1, 2, 0), (2, 1, 1)]:

        def where(predicate: Column) -> set[tuple[int, ...]]:
            return {tuple(r) for r in df.where(predicate).collect()}

        assert where(earlier(t)) == {s for s in times if s < t}
        assert where(later(t)) == {s for s in times if s > t}
        below = {s for s in times if all(a <= b for a, b in zip(s, t, strict=True))}
        assert where(not_after(t)) == below


def test_a_change_redoes_only_the_outer_iterations_it_affects(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Distances in hops where some edges are free: an outer loop takes one hop
    per iteration, an inner loop closes over the free edges at each distance.
    On a chain of hops 0→1→2→3, each node with a free edge k→10+k, cutting the
    last hop redoes nothing in the inner loops before outer iteration 2, where
    node 2's distance first met that edge."""
    flow = Dataflow(spark, tmp_path)
    hops = flow.source("hops", EDGES).select(h_src="src", h_dst="dst")
    free = flow.source("free", EDGES).select(f_src="src", f_dst="dst")
    start = flow.source("roots", ROOT).select("node", dist=F.lit(0).cast("long"))

    def least(c: Collection) -> Collection:
        return c.extreme("min", ["node"], "dist", hierarchical=False)

    def outer(dists: Collection) -> Collection:
        hopped = dists.join(hops, left_on=["node"], right_on=["h_src"]).select(
            F.col("h_dst").alias("node"), (F.col("dist") + 1).alias("dist")
        )
        reached = least(start.concat(hopped))

        def inner(closed: Collection) -> Collection:
            moved = closed.join(free, left_on=["node"], right_on=["f_src"]).select(
                F.col("f_dst").alias("node"), "dist"
            )
            return least(reached.concat(moved))

        return reached.iterate(inner)

    flow.view("dist", start.iterate(outer))
    rt = Runtime(flow)

    def epoch(e: int, hop: list[tuple[int, int, int]], side: list[tuple[int, int, int]]) -> None:
        rt.append_source("hops", spark.createDataFrame(hop, CHANGES), e)
        rt.append_source("free", spark.createDataFrame(side, CHANGES), e)
        rt.append_source(
            "roots", spark.createDataFrame([(0, 1)] if e == 0 else [], ROOT_CHANGES), e
        )

    def expected(chain: list[Edge]) -> Counter[tuple[int, int]]:
        g = nx.DiGraph()
        g.add_weighted_edges_from([(*e, 1) for e in chain] + [(*e, 0) for e in sides])
        return Counter(nx.single_source_dijkstra_path_length(g, 0).items())

    def dist() -> Counter[tuple[int, int]]:
        return Counter(tuple(r) for r in rt.read("dist").collect())

    chain = [(k, k + 1) for k in range(3)]
    sides = [(k, 10 + k) for k in range(4)]
    epoch(0, [(*e, 1) for e in chain], [(*e, 1) for e in sides])
    load = rt.run()
    assert dist() == expected(chain)
    assert any(r.within and r.updates for r in load.rounds), "the inner loops ran"

    epoch(1, [(2, 3, -1)], [])
    report = rt.run()
    assert dist() == expected(chain[:-1])
    # Round 0 of the outer loop takes the cut in; then nothing runs, outer or
    # inner, before outer iteration 2.
    outer_busy = [r.iteration for r in report.rounds if not r.within and r.updates]
    inner_busy = {r.within[0] for r in report.rounds if r.within and r.updates}
    assert outer_busy[0] == 0 and min(outer_busy[1:]) == 2, outer_busy
    assert inner_busy == {2}, inner_busy
