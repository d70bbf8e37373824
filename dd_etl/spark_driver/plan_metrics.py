"""What each part of an executed plan did, from the metrics Spark keeps on it.

A layer's traces compute their batches in shared Spark jobs: one plan, a union of
a part per trace (``trace/slots.tagged_union``), under what the job does with
all of them. Spark's status store tells what the job's stages did, not which
part did it; the executed plan does, per operator: Spark's SQL metrics (task
time of generated code, sorts and aggregations, bytes scanned and shuffled,
rows), summed over every task when the action is done. ``parts_of`` walks that
plan in the driver's JVM and sums them per union child, the work above the union
apart.

The walk reads each operator's name, metrics and children: a few JVM calls an
operator, a fraction of a second a layer, so only a run asked for its operators
pays it. Metrics are read from their text (one JVM call per operator, not one
per metric): ``SQLMetric``'s ``toString`` gives the key, name and value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dd_etl.spark_driver import PlanWork

_METRIC = re.compile(r"(\w+) -> SQLMetric\(id: -?\d+, name: .*?, value: (-?\d+)\)")

_MILLIS = {"pipelineTime": "code", "sortTime": "sort", "aggTime": "aggregate"}
_MILLIS |= {"buildTime": "hash build"}
_NANOS = {"shuffleWriteTime": "shuffle write"}
"""Spark's timing metrics worth reporting, by key, and what they are called here."""

_INCLUSIVE = frozenset({"code", "aggregate", "hash build"})
"""Timers that hold the time of the operators feeding theirs in the same task: a
stage of generated code runs its inputs as it runs, an aggregation and a hash
build consume theirs whole. A sort's timer holds the sort alone, a shuffle
write's the write alone."""

_UNCOUNTED = frozenset(
    {
        *("WholeStageCodegen", "InputAdapter", "ColumnarToRow", "AQEShuffleRead"),
        *("Project", "Filter", "Coalesce", "Union", "GlobalLimit", "LocalLimit"),
        "AdaptiveSparkPlan",
    }
)
"""Operators not counted by name: wrappers of the others, the union's own, and
those doing next to nothing."""


def metrics(text: str) -> dict[str, int]:
    """An operator's metrics by key, from the text of its map of ``SQLMetric``s."""
    return {key: int(value) for key, value in _METRIC.findall(text)}


def work_of(name: str, values: Mapping[str, int], covered: bool = False) -> PlanWork:
    """What one operator did, from its name and metrics, ``covered`` by a timer
    above it in the same task or not (``rows`` left to the caller: only a part's
    topmost count says what it yielded). Its task time is what its own timers
    saw, by kind, but for those a timer above it already holds."""
    seconds = {kind: values[key] / 1e9 for key, kind in _NANOS.items() if key in values}
    if not covered:
        seconds |= {kind: values[key] / 1e3 for key, kind in _MILLIS.items() if key in values}
    base = operator_name(name)
    return PlanWork(
        seconds={kind: s for kind, s in seconds.items() if s > 0},
        task_seconds=sum(seconds.values()),
        scanned_bytes=values.get("filesSize", 0),
        shuffled_bytes=values.get("shuffleBytesWritten", 0),
        spilled_bytes=values.get("spillSize", 0),
        operators={} if base in _UNCOUNTED or base.endswith("QueryStage") else {base: 1},
    )


def covers_inputs(values: Mapping[str, int]) -> bool:
    """Whether an operator's timers hold its inputs' time too (``_INCLUSIVE``)."""
    return any(values.get(key, 0) > 0 for key, kind in _MILLIS.items() if kind in _INCLUSIVE)


def _task_boundary(name: str) -> bool:
    """An exchange, below which another stage's tasks ran."""
    return name.endswith(("Exchange", "QueryStage"))


def operator_name(name: str) -> str:
    """``WholeStageCodegen (3)`` → ``WholeStageCodegen``; ``Scan parquet db.t`` →
    ``Scan parquet``."""
    base = re.sub(r" \(\d+\)$", "", name)
    return " ".join(base.split()[:2]) if base.startswith("Scan ") else base


class _Node:
    """An executed plan's operator, through the JVM: name, metrics and children,
    where adaptive execution's stages are looked through and a reused exchange
    (whose work its first use counted) has none."""

    def __init__(self, jvm_node: Any) -> None:
        self._jvm = jvm_node
        self.name = str(jvm_node.nodeName())

    def metrics(self) -> dict[str, int]:
        return metrics(str(self._jvm.metrics().toString()))

    def children(self) -> list[_Node]:
        if self.name == "AdaptiveSparkPlan":
            return [_Node(self._jvm.executedPlan())]
        if self.name.endswith("QueryStage"):
            return [_Node(self._jvm.plan())]
        if self.name == "ReusedExchange":
            return []
        seq = self._jvm.children()
        return [_Node(seq.apply(i)) for i in range(seq.length())]


def parts_of(plan: Any, parts: int) -> tuple[PlanWork, list[PlanWork]] | None:
    """The work of the ``parts`` children of the executed ``plan``'s union (coalesced
    unions of them, as ``tagged_union`` groups them into tasks, looked through),
    and of the rest; None if the plan's union has another number of children.
    All of a plan is the part's if it has one."""
    return split(_Node(plan), parts, _Node.children, _Node.metrics)


def split(
    root: Any,
    parts: int,
    children: Callable[[Any], list[Any]],
    metrics_of: Callable[[Any], dict[str, int]],
) -> tuple[PlanWork, list[PlanWork]] | None:
    """``parts_of`` over any tree of nodes with a ``name``: pure, given how to read
    a node's children and metrics."""
    if parts == 1:  # all of it, whatever unions the part's own plan has
        return PlanWork(), [_work(root, False, children, metrics_of)]
    unions: list[tuple[Any, bool]] = []
    rest = _work(root, False, children, metrics_of, stop_at_union=unions)
    if not unions:
        return None
    union, covered = unions[0]
    found = list(_flattened(union, children))
    if len(found) != parts:
        return None
    return rest, [_work(node, covered, children, metrics_of) for node in found]


def _flattened(union: Any, children: Callable[[Any], list[Any]]) -> Iterator[Any]:
    """A union's children, each union among them (directly, or under a coalesce)
    replaced by its own."""
    for child in children(union):
        inner = children(child) if child.name == "Coalesce" else []
        if child.name == "Union":
            yield from _flattened(child, children)
        elif len(inner) == 1 and inner[0].name == "Union":
            yield from _flattened(inner[0], children)
        else:
            yield child


def _work(
    root: Any,
    covered: bool,
    children: Callable[[Any], list[Any]],
    metrics_of: Callable[[Any], dict[str, int]],
    stop_at_union: list[tuple[Any, bool]] | None = None,
) -> PlanWork:
    """All the work of the subtree at ``root`` (``covered`` by a timer above it in
    its task or not), breadth first; its rows those its topmost count says. With
    ``stop_at_union``, the first union met is not entered but put there."""
    total = PlanWork()
    rows: int | None = None
    queue = [(root, covered)]
    while queue:
        node, inside = queue.pop(0)
        if stop_at_union is not None and node.name == "Union" and not stop_at_union:
            stop_at_union.append((node, inside))
            continue
        values = metrics_of(node)
        if rows is None and "numOutputRows" in values:
            rows = values["numOutputRows"]
        total.add(work_of(node.name, values, inside))
        below = not _task_boundary(node.name) and (inside or covers_inputs(values))
        queue.extend((child, below) for child in children(node))
    total.rows = rows or 0
    return total
