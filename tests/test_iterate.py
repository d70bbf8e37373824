"""Loops with times ``(epoch, iteration)``: graph algorithms stay equal to networkx
over random edge insertions and deletions, a loop's history stays bounded under
compaction, and loops that cannot work fail clearly."""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path

import duckdb
import networkx as nx
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.lattice import Antichain
from dd_etl.plan import Dataflow, graphs
from dd_etl.plan.dataflow import Collection, PlanError
from dd_etl.plan.loops import inner_traces
from dd_etl.plan.nodes import Iterate
from dd_etl.plan.sql import compile_view
from dd_etl.runtime import Runtime
from dd_etl.runtime.iteration import LoopDiverged
from dd_etl.runtime.recompute import recompute
from dd_etl.trace.maintenance import maintain
from dd_etl.trace.spark_files import read_files
from tests.support import loop_workload
from tests.support.child_process import run_workload

pytestmark = pytest.mark.spark

EDGES = StructType(
    [
        StructField("src", LongType()),
        StructField("dst", LongType()),
        StructField("weight", LongType()),
    ]
)
ROOTS = StructType([StructField("node", LongType())])
NODES = 14

Edge = tuple[int, int, int]


def graph_flow(spark: SparkSession, warehouse: Path) -> Runtime:
    flow = Dataflow(spark, warehouse)
    edges = flow.source("edges", EDGES)
    roots = flow.source("roots", ROOTS)
    flow.view("reach", graphs.reachable(roots, edges))
    flow.view("hops", graphs.bfs(roots, edges))
    flow.view("components", graphs.connected_components(edges))
    flow.view("paths", graphs.shortest_paths(roots, edges))
    return Runtime(flow)


def expected(edges: set[Edge], roots: set[int]) -> dict[str, Counter[tuple[object, ...]]]:
    g = nx.DiGraph()
    for a, b, w in edges:  # parallel edges: the lightest one counts
        if not g.has_edge(a, b) or g[a][b]["weight"] > w:
            g.add_edge(a, b, weight=w)
    g.add_nodes_from(roots)
    hops: dict[int, int] = {}
    paths: dict[int, int] = {}
    for r in roots:
        for v, d in nx.single_source_shortest_path_length(g, r).items():
            hops[v] = min(d, hops.get(v, d))
        for v, d in nx.single_source_dijkstra_path_length(g, r).items():
            paths[v] = min(int(d), paths.get(v, int(d)))
    undirected = nx.Graph(list(g.edges()))
    components = {v: min(c) for c in nx.connected_components(undirected) for v in c}
    return {
        "reach": Counter((v,) for v in hops),
        "hops": Counter(hops.items()),
        "paths": Counter(paths.items()),
        "components": Counter(components.items()),
    }


def random_edge(rng: random.Random) -> Edge:
    return (rng.randrange(NODES), rng.randrange(NODES), rng.randint(1, 5))


def test_graph_algorithms_equal_networkx_under_random_changes(
    spark: SparkSession, tmp_path: Path
) -> None:
    rng = random.Random(7)
    rt = graph_flow(spark, tmp_path)
    edges = {random_edge(rng) for _ in range(22)}
    roots = {0, 1}
    epochs: list[tuple[list[Edge], list[Edge], list[int], list[int]]] = [
        (sorted(edges), [], sorted(roots), []),
    ]
    for epoch in range(1, 4):
        # Cut every edge out of a root once (disconnects), drop a root, add another.
        cut = sorted(e for e in edges if e[0] == 0) if epoch == 2 else []
        cut += rng.sample(sorted(set(edges) - set(cut)), 3)
        new = [random_edge(rng) for _ in range(3)]
        new = [e for e in dict.fromkeys(new) if e not in edges]
        dropped, added = ([1], [5]) if epoch == 3 else ([], [])
        edges = (edges - set(cut)) | set(new)
        roots = (roots - set(dropped)) | set(added)
        epochs.append((new, cut, added, dropped))

    edges_now: set[Edge] = set()
    roots_now: set[int] = set()
    for epoch, (new, cut, added, dropped) in enumerate(epochs):
        edge_rows = [(*e, 1) for e in new] + [(*e, -1) for e in cut]
        root_rows = [(r, 1) for r in added] + [(r, -1) for r in dropped]
        rt.append_source("edges", spark.createDataFrame(edge_rows, _with_diff(EDGES)), epoch)
        rt.append_source("roots", spark.createDataFrame(root_rows, _with_diff(ROOTS)), epoch)
        edges_now = (edges_now - set(cut)) | set(new)
        roots_now = (roots_now - set(dropped)) | set(added)
        report = rt.run()
        assert report.rounds, "the loops ran"
        want = expected(edges_now, roots_now)
        for view, rows in want.items():
            got = Counter(tuple(r) for r in rt.read(view).collect())
            assert got == rows, f"{view} at epoch {epoch}"
    # The from-scratch evaluation of the same loops (what `verify` runs) agrees too.
    for view, rows in expected(edges_now, roots_now).items():
        batch = recompute(rt, view, len(epochs) - 1).collect()
        assert Counter({tuple(r)[:-1]: r["_diff"] for r in batch}) == rows, view


def peeled(edges: set[Edge], k: int, weighted: bool) -> Counter[tuple[object, ...]]:
    """The k-core by peeling, in plain Python (parallel edges: the lightest counts)."""
    w: dict[tuple[int, int], int] = {}
    for a, b, x in edges:
        if a != b:
            for pair in ((a, b), (b, a)):
                w[pair] = min(x, w.get(pair, x))
    kept = {a for a, _ in w}
    while True:
        degree = Counter[int]()
        for (a, b), x in w.items():
            if a in kept and b in kept:
                degree[a] += x if weighted else 1
        now = {v for v in kept if degree[v] >= k}
        if now == kept:
            return Counter((v,) for v in kept)
        kept = now


def test_k_core_sums_inside_the_loop(spark: SparkSession, tmp_path: Path) -> None:
    """SUM in a loop body (built as a reduction over product times) follows
    insertions that grow the core and deletions that shrink it."""
    rng = random.Random(3)
    flow = Dataflow(spark, tmp_path)
    edges = flow.source("edges", EDGES)
    # SUM of weights (COUNT comes from the same per-key accumulation)
    flow.view("heavy_core", graphs.k_core(edges, 4, weight="weight"))
    rt = Runtime(flow)
    now: set[Edge] = set()
    for epoch in range(3):
        new = {random_edge(rng) for _ in range(14 if epoch == 0 else 4)} - now
        cut = set(rng.sample(sorted(now), min(len(now), 4)))
        rows = [(*e, 1) for e in sorted(new)] + [(*e, -1) for e in sorted(cut)]
        rt.append_source("edges", spark.createDataFrame(rows, _with_diff(EDGES)), epoch)
        now = (now - cut) | new
        rt.run()
        g = nx.Graph([(a, b) for a, b, _ in now if a != b])
        assert Counter((v,) for v in nx.k_core(g, 2)) == peeled(now, 2, weighted=False)
        got = Counter(tuple(r) for r in rt.read("heavy_core").collect())
        assert got == peeled(now, 4, True), f"epoch {epoch}"
    assert any(peeled(now, 4, True)), "the core is not trivially empty"
    batch = recompute(rt, "heavy_core", 2).collect()  # what `verify` runs
    assert Counter({tuple(r)[:-1]: r["_diff"] for r in batch}) == peeled(now, 4, True)


RECURSIVE_SQL = {
    # UNION: the least set containing the roots and closed under edges
    "reach_sql": "WITH RECURSIVE reach(node) AS (SELECT node FROM roots UNION "
    "SELECT e.dst FROM reach r JOIN edges e ON r.node = e.src) SELECT node FROM reach",
    # UNION ALL: a bag, one row per walk of at most 3 edges from a root
    "walks_sql": "WITH RECURSIVE walk(node, hops) AS (SELECT node, 0 FROM roots UNION ALL "
    "SELECT e.dst, w.hops + 1 FROM walk w JOIN edges e ON w.node = e.src WHERE w.hops < 3) "
    "SELECT node, hops, COUNT(*) AS walks FROM walk GROUP BY node, hops",
    # an INT base and a BIGINT step: the column is BIGINT
    "from_zero_sql": "WITH RECURSIVE r(node) AS (SELECT 0 UNION "
    "SELECT e.dst FROM r JOIN edges e ON r.node = e.src) SELECT node FROM r",
    "counter_sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
    "SELECT n FROM r",
}


def test_with_recursive_equals_duckdb(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    tables = {"edges": flow.source("edges", EDGES), "roots": flow.source("roots", ROOTS)}
    for name, sql in RECURSIVE_SQL.items():
        compile_view(flow, sql, tables, name, dialect="duckdb")
    rt = Runtime(flow)
    rng = random.Random(3)
    # An edge to nowhere: the step yields a NULL node where `SELECT 0` cannot.
    edges: list[tuple[int, int | None, int]] = [random_edge(rng) for _ in range(12)]
    edges.append((0, None, 1))
    roots = [0, 0, 3]  # a duplicate root
    changes = [(edges, [], roots, [])]
    for _ in range(2):
        cut = rng.sample(edges, 3)
        new = [random_edge(rng) for _ in range(3)]
        for e in cut:
            edges.remove(e)
        edges += new
        changes.append((new, cut, [5], [3]) if not changes[1:] else (new, cut, [], []))
    db = duckdb.connect()
    db.execute("CREATE TABLE edges (src BIGINT, dst BIGINT, weight BIGINT)")
    db.execute("CREATE TABLE roots (node BIGINT)")
    current_edges: Counter[tuple[int, int | None, int]] = Counter()
    current_roots: Counter[int] = Counter()
    for epoch, (new, cut, added, dropped) in enumerate(changes):
        current_edges.update(new)
        current_edges.subtract(cut)
        current_roots.update(added)
        current_roots.subtract(dropped)
        edge_rows = [(*e, 1) for e in new] + [(*e, -1) for e in cut]
        root_rows = [(r, 1) for r in added] + [(r, -1) for r in dropped]
        rt.append_source("edges", spark.createDataFrame(edge_rows, _with_diff(EDGES)), epoch)
        rt.append_source("roots", spark.createDataFrame(root_rows, _with_diff(ROOTS)), epoch)
        rt.run()
        db.execute("DELETE FROM edges")
        db.execute("DELETE FROM roots")
        db.executemany("INSERT INTO edges VALUES (?, ?, ?)", list(current_edges.elements()))
        db.executemany("INSERT INTO roots VALUES (?)", [(r,) for r in current_roots.elements()])
        for name, sql in RECURSIVE_SQL.items():
            want = Counter(tuple(r) for r in db.execute(sql).fetchall())
            got = Counter(tuple(r) for r in rt.read(name).collect())
            assert got == want, f"{name} at epoch {epoch}"


def test_a_change_redoes_only_the_iterations_it_affects(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A path 0→1→…→9: the first epoch takes one round per hop (iteration ``i``
    reaches hop ``i + 1``, and one more finds nothing new); cutting the last edge
    redoes nothing before the iteration that first used it.

    The Spark jobs are pinned: in a small interval a round computes what it
    stages (a reduction's output and the keys it must evaluate again, together)
    into the driver, which counts the loop's remaining work from those rows with
    no job of its own, and stages with no job what follows from rows it holds
    (the result fed back to the variable, a renaming of the variable); an epoch
    reads what enters the loop and the histories it looks up in one job, and
    computes the batches of all the loop's traces in one more; and Spark prunes
    what reads an empty collection."""
    flow = Dataflow(spark, tmp_path)
    edges = flow.source("edges", EDGES)
    roots = flow.source("roots", ROOTS)
    flow.view("hops", graphs.bfs(roots, edges))
    rt = Runtime(flow)
    path = [(i, i + 1, 1, 1) for i in range(9)]
    rt.append_source("edges", spark.createDataFrame(path, _with_diff(EDGES)), 0)
    rt.append_source("roots", spark.createDataFrame([(0, 1)], _with_diff(ROOTS)), 0)
    report = rt.run()
    first = report.rounds
    assert [r.iteration for r in first] == list(range(10))
    assert report.profile is not None and report.profile.sizing == "small"
    # 26 when a layer's writes were one job (now a job per task slot), 27, 37 before
    # the driver fed rows back, 92 earlier
    assert report.profile.spark_jobs == 28
    rt.append_source("edges", spark.createDataFrame([(8, 9, 1, -1)], _with_diff(EDGES)), 1)
    rt.append_source("roots", spark.createDataFrame([], _with_diff(ROOTS)), 1)
    report = rt.run()
    second = report.rounds
    # 10 when a layer's writes were one job; 13, 15, 22, 33 before
    assert report.profile is not None and report.profile.spark_jobs == 11
    busy = [r.iteration for r in second if r.updates]
    assert busy and min(busy[1:]) >= 8, busy  # round 0: the edge entering
    assert sorted(tuple(r) for r in rt.read("hops").collect()) == [(i, i) for i in range(9)]


def test_loop_history_is_compacted_across_epochs(spark: SparkSession, tmp_path: Path) -> None:
    """Once epochs are complete, their iterations are advanced to the compaction
    frontier and consolidated: a trace of the loop keeps one record per (key,
    iteration) that still matters, not one per epoch."""
    flow = Dataflow(spark, tmp_path)
    edges = flow.source("edges", EDGES)
    roots = flow.source("roots", ROOTS)
    flow.view("hops", graphs.bfs(roots, edges))
    rt = Runtime(flow)
    rt.append_source("roots", spark.createDataFrame([(0, 1)], _with_diff(ROOTS)), 0)
    rt.append_source("edges", spark.createDataFrame([(0, 1, 1, 1)], _with_diff(EDGES)), 0)
    rt.run()
    for epoch in range(1, 7):  # the edge 1→2 flickers in and out
        diff = 1 if epoch % 2 else -1
        rt.append_source("roots", spark.createDataFrame([], _with_diff(ROOTS)), epoch)
        edge = spark.createDataFrame([(1, 2, 1, diff)], _with_diff(EDGES))
        rt.append_source("edges", edge, epoch)
        rt.run()
    loop = next(x for x in rt.stateful_nodes() if isinstance(x, Iterate))
    before = {}
    for node in inner_traces(loop):
        trace = rt.loop_trace(loop, node)
        before[node.id] = Counter(tuple(r) for r in trace.read_at((6, 50)).collect())
        maintain(trace, None, retention_hours=0)
        trace.reload()
        # The runtime still reads epoch 6 (its hold is (6, 0)): merged batches have
        # every earlier epoch advanced to it, and each (row, iteration) once.
        assert trace.state.since == Antichain.of((6, 0))
        merged = [b.id for b in trace.state.batches if b.description.since == trace.state.since]
        assert merged, "maintenance merged the epochs' batches"
        rows = read_files(spark, trace.where, trace.state, trace.files(merged)).collect()
        assert {r["_time"] for r in rows} == {6}
        width = len(node.columns)
        assert Counter((r["_time1"], *tuple(r)[:width]) for r in rows).most_common(1)[0][1] == 1
        after = Counter(tuple(r) for r in trace.read_at((6, 50)).collect())
        assert after == before[node.id]
    assert sorted(tuple(r) for r in rt.read("hops").collect()) == [(0, 0), (1, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("failpoint", ["loop.epoch_appended=3"])
def test_a_run_killed_inside_a_loop_recovers(
    spark: SparkSession, tmp_path: Path, failpoint: str
) -> None:
    """Killed in the second run, after the loop's inner traces took epoch 2 but
    before its result did: the next run redoes the epoch from history that
    excludes it, and the inner appends are no-ops."""
    proc = run_workload("tests.support.loop_workload", tmp_path, failpoint)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr[-2000:]
    rt = loop_workload.run(spark, tmp_path)
    want = [
        {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 2},
        {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 2},
        {0: 0},
        {0: 0, 1: 1, 2: 2, 3: 3, 4: 1, 5: 2},
    ]
    for epoch, hops in enumerate(want):
        assert dict(tuple(r) for r in rt.read("hops", epoch).collect()) == hops, epoch


def test_a_loop_that_does_not_converge_names_the_view(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    roots = flow.source("roots", ROOTS)
    flow.view(
        "forever", roots.iterate(lambda x: x.select(node=F.col("node") + 1), max_iterations=4)
    )
    rt = Runtime(flow)
    rt.append_source("roots", spark.createDataFrame([(0,)], ROOTS), 0)
    with pytest.raises(LoopDiverged, match=r"'forever'.*within 4 iterations at epoch 0"):
        rt.run()
    assert rt.pending() == (0, 1), "nothing of the failed epoch was committed"


def test_loop_bodies_are_checked_when_built(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    roots = flow.source("roots", ROOTS)
    with pytest.raises(PlanError, match=r"must return the loop variable's columns \(node bigint\)"):
        roots.iterate(lambda x: x.select("node", two=F.lit(2)))
    with pytest.raises(PlanError, match="max_iterations must be ≥ 1"):
        roots.iterate(lambda x: x, max_iterations=0)


def _with_diff(schema: StructType) -> StructType:
    return StructType([*schema.fields, StructField("_diff", LongType())])


def test_a_multiway_join_inside_a_loop(spark: SparkSession, tmp_path: Path) -> None:
    """``join_all`` in a loop body (built there as a chain of joins): the nodes an
    even number of hops from a root, two hops per iteration."""
    flow = Dataflow(spark, tmp_path)
    edges = flow.source("edges", EDGES)
    roots = flow.source("roots", ROOTS)
    first = edges.select(node="src", mid="dst")
    second = edges.select(mid="src", next="dst")

    def step(reached: Collection) -> Collection:
        hops = reached.join_all(first, second).select(node="next")
        return roots.concat(hops).distinct()

    flow.view("even", roots.iterate(step))
    rt = Runtime(flow)
    edges_now = {(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 4, 1), (1, 5, 1), (5, 6, 1), (6, 0, 1)}
    changes = [(sorted(edges_now), []), ([(4, 5, 1)], [(1, 2, 1)])]
    for epoch, (new, cut) in enumerate(changes):
        rows = [(*e, 1) for e in new] + [(*e, -1) for e in cut]
        rt.append_source("edges", spark.createDataFrame(rows, _with_diff(EDGES)), epoch)
        roots_rows = [(0, 1)] if epoch == 0 else []
        rt.append_source("roots", spark.createDataFrame(roots_rows, _with_diff(ROOTS)), epoch)
        edges_now = (edges_now | set(new)) - set(cut)
        rt.run()
        g = nx.DiGraph([(a, b) for a, b, _ in edges_now])
        square = nx.DiGraph([(a, c) for a, b in g.edges for c in g.successors(b)])
        square.add_node(0)
        want = Counter((v,) for v in nx.descendants(square, 0) | {0})
        assert Counter(tuple(r) for r in rt.read("even").collect()) == want, epoch
