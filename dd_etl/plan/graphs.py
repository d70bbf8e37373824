"""Graph algorithms as loops over collections of edges.

Each is one ``iterate``: a change to the edges or the roots redoes only the
iterations and nodes it affects. Edges are rows ``(src, dst)`` (plus ``weight``
for shortest paths); node ids may be of any type Spark can compare.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from dd_etl.plan.aggregates import count, sum_
from dd_etl.plan.dataflow import Collection, PlanError
from dd_etl.plan.iteration import DEFAULT_ITERATION_LIMIT


def reachable(
    roots: Collection,
    edges: Collection,
    *,
    node: str = "node",
    src: str = "src",
    dst: str = "dst",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """The nodes reachable from ``roots`` (roots included), as ``(node)``."""
    _require(roots, [node], "roots")
    _require(edges, [src, dst], "edges")
    start = roots.select(node).distinct()
    arcs = edges.select(F.col(src).alias("__src"), F.col(dst).alias("__dst"))

    def step(reached: Collection) -> Collection:
        nxt = reached.join(arcs, left_on=[node], right_on=["__src"]).select(
            F.col("__dst").alias(node)
        )
        return start.concat(nxt).distinct()

    return start.iterate(step, max_iterations=max_iterations)


def bfs(
    roots: Collection,
    edges: Collection,
    *,
    node: str = "node",
    src: str = "src",
    dst: str = "dst",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """Hop distances from the nearest root, as ``(node, dist)``; unreachable nodes
    are absent. Differential dataflow's running example."""
    _require(edges, [src, dst], "edges")
    return _distances(roots, edges, F.lit(1).cast("long"), node, src, dst, max_iterations)


def shortest_paths(
    roots: Collection,
    edges: Collection,
    *,
    node: str = "node",
    src: str = "src",
    dst: str = "dst",
    weight: str = "weight",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """Least total ``weight`` from the nearest root, as ``(node, dist)`` (Bellman-Ford
    rounds). Weights must be non-negative: a negative cycle never converges and
    fails at ``max_iterations``."""
    _require(edges, [src, dst, weight], "edges")
    return _distances(roots, edges, F.col(weight), node, src, dst, max_iterations)


def _distances(
    roots: Collection,
    edges: Collection,
    length: Column,
    node: str,
    src: str,
    dst: str,
    max_iterations: int,
) -> Collection:
    """The least sum of edge ``length`` from a root: a loop that extends every
    distance by one edge and keeps the least per node."""
    _require(roots, [node], "roots")
    arcs = edges.select(F.col(src).alias("__src"), F.col(dst).alias("__dst"), length.alias("__len"))
    kind = arcs.node.schema["__len"].dataType
    start = roots.select(node, dist=F.lit(0).cast(kind)).distinct()

    def step(dists: Collection) -> Collection:
        nxt = dists.join(arcs, left_on=[node], right_on=["__src"]).select(
            F.col("__dst").alias(node), (F.col("dist") + F.col("__len")).cast(kind).alias("dist")
        )
        return start.concat(nxt).extreme("min", [node], "dist", hierarchical=False)

    return start.iterate(step, max_iterations=max_iterations)


def connected_components(
    edges: Collection,
    *,
    src: str = "src",
    dst: str = "dst",
    node: str = "node",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """Components of the graph with edges taken both ways, by label propagation:
    ``(node, component)`` where ``component`` is the least node id in it."""
    _require(edges, [src, dst], "edges")
    forward = edges.select(F.col(src).alias("__src"), F.col(dst).alias("__dst"))
    backward = edges.select(F.col(dst).alias("__src"), F.col(src).alias("__dst"))
    arcs = forward.concat(backward)
    start = arcs.select(F.col("__src").alias(node), F.col("__src").alias("component")).distinct()
    return _least_labels(start, arcs, node, "component", max_iterations)


def _least_labels(
    start: Collection, arcs: Collection, node: str, label: str, max_iterations: int
) -> Collection:
    """Label propagation: each node's least ``label`` among the ``start`` labels
    of the nodes that reach it along ``arcs`` (``__src``, ``__dst``)."""

    def step(labels: Collection) -> Collection:
        moved = labels.join(arcs, left_on=[node], right_on=["__src"]).select(
            F.col("__dst").alias(node), label
        )
        return start.concat(moved).extreme("min", [node], label, hierarchical=False)

    return start.iterate(step, max_iterations=max_iterations)


def strongly_connected_components(
    edges: Collection,
    *,
    src: str = "src",
    dst: str = "dst",
    node: str = "node",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """Strongly connected components, as ``(node, component)`` for every node of
    an edge, ``component`` the least node id in it.

    Loops inside a loop: the outer one trims the edges to those inside a cycle
    by forward-backward label propagation, each propagation a loop of its own.
    Labels flowing along the kept edges from every node, the least one wins; an
    edge whose ends get different labels joins two components and is dropped,
    first along the edges, then against them, until nothing is dropped. The
    kept edges then connect exactly the nodes of each component."""
    _require(edges, [src, dst], "edges")
    arcs = (
        edges.select(F.col(src).alias("__src"), F.col(dst).alias("__dst"))
        .filter(F.col("__src") != F.col("__dst"))
        .distinct()
    )
    reverse = arcs.select(F.col("__dst").alias("__src"), F.col("__src").alias("__dst"))

    def trim(cycle: Collection, graph: Collection) -> Collection:
        """The edges of ``graph`` whose ends get the same label when every node
        labels itself and labels flow along ``cycle``, turned around."""
        start = graph.select(F.col("__dst").alias("__node"), F.col("__dst").alias("__label"))
        labels = _least_labels(start.distinct(), cycle, "__node", "__label", max_iterations)
        by_src = labels.select(F.col("__node").alias("__src"), F.col("__label").alias("__from"))
        by_dst = labels.select(F.col("__node").alias("__dst"), F.col("__label").alias("__to"))
        same = graph.join(by_src, on="__src").join(by_dst, on="__dst")
        same = same.filter(F.col("__from") == F.col("__to"))
        return same.select(F.col("__dst").alias("__src"), F.col("__src").alias("__dst"))

    kept = arcs.iterate(
        lambda cycle: trim(trim(cycle, arcs), reverse), max_iterations=max_iterations
    )
    components = connected_components(kept, src="__src", dst="__dst", node=node)
    ends = edges.select(F.col(src).alias(node)).concat(edges.select(F.col(dst).alias(node)))
    alone = ends.distinct().antijoin(components, on=node)
    return components.concat(alone.select(node, component=F.col(node)))


def k_core(
    edges: Collection,
    k: float,
    *,
    src: str = "src",
    dst: str = "dst",
    weight: str | None = None,
    node: str = "node",
    max_iterations: int = DEFAULT_ITERATION_LIMIT,
) -> Collection:
    """The nodes of the ``k``-core of the graph with edges taken both ways (self
    loops ignored), as ``(node)``: every node has at least ``k`` neighbours in it
    (with ``weight``: edge weights to them summing to at least ``k``). Found by
    peeling: from all nodes, keep those whose degree among the nodes kept is at
    least ``k``, until none is dropped. The degrees are COUNT (or SUM) aggregates
    inside the loop."""
    _require(edges, [src, dst, *([weight] if weight else [])], "edges")
    w = F.col(weight) if weight else F.lit(1).cast("long")
    forward = edges.select(F.col(src).alias("__src"), F.col(dst).alias("__dst"), w.alias("__w"))
    backward = forward.select(F.col("__dst").alias("__src"), F.col("__src").alias("__dst"), "__w")
    # parallel edges count once (with their least weight)
    arcs = (
        forward.concat(backward)
        .filter(F.col("__src") != F.col("__dst"))
        .extreme("min", ["__src", "__dst"], "__w", hierarchical=False)
    )
    start = arcs.select(F.col("__src").alias(node)).distinct()
    degree = sum_("__w") if weight else count()

    def peel(kept: Collection) -> Collection:
        inside = arcs.semijoin(kept, left_on=["__src"], right_on=[node]).semijoin(
            kept, left_on=["__dst"], right_on=[node]
        )
        degrees = inside.aggregate(["__src"], __degree=degree)
        return degrees.filter(F.col("__degree") >= k).select(F.col("__src").alias(node))

    return start.iterate(peel, max_iterations=max_iterations)


def _require(c: Collection, columns: list[str], what: str) -> None:
    missing = [x for x in columns if x not in c.columns]
    if missing:
        raise PlanError(f"{what}: no columns {missing}; its columns are {c.columns}")
