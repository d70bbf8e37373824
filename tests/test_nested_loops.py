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
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.operators.iterative import earlier, iterations, later, not_after
from dd_etl.plan import Dataflow, graphs
from dd_etl.plan.dataflow import Collection
from dd_etl.plan.iteration import inner_traces, loop_nest
from dd_etl.plan.nodes import Iterate
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute

pytestmark = pytest.mark.spark

EDGES = StructType([StructField("src", LongType()), StructField("dst", LongType())])
CHANGES = StructType([*EDGES.fields, StructField("_diff", LongType())])
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
    for epoch, (new, cut) in enumerate(epochs):
        new = [e for e in dict.fromkeys(new) if e not in now]
        rows = [(*e, 1) for e in new] + [(*e, -1) for e in cut if e in now]
        now = (now | set(new)) - set(cut)
        rt.append_source("edges", spark.createDataFrame(rows, CHANGES), epoch)
        report = rt.run()
        got = Counter(tuple(r) for r in rt.read("scc").collect())
        assert got == components(now), f"epoch {epoch}: edges {sorted(now)}"
        assert any(r.within for r in report.rounds), "the inner loops ran inside the outer one"

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
    roots = flow.source("roots", StructType([StructField("node", LongType())]))
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
