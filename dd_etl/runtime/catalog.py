"""What evaluating a dataflow needs of the runtime: the dataflow and each node's
trace, opened on demand. ``Runtime`` is one; the evaluations (``recompute``,
``full_refresh``, the loop runner) depend on this much of it and no more, and a
run (``execution.py``) on ``RunTarget``: that, and the decisions the runtime
owns (which views are behind and how each is refreshed, the pending interval,
the runtime's own holds)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from dd_etl.plan import nodes as n
from dd_etl.plan.graph import upstream

if TYPE_CHECKING:
    from dd_etl.plan.dataflow import Dataflow
    from dd_etl.plan.refresh import RefreshChoice
    from dd_etl.runtime.sizing import Thresholds
    from dd_etl.trace.deferred import DeferredAppend
    from dd_etl.trace.delta_trace import DeltaTrace
    from dd_etl.trace.state import TraceState


class TraceCatalog(Protocol):
    @property
    def flow(self) -> Dataflow: ...

    def trace(self, node: n.Node) -> DeltaTrace:
        """The trace ``node`` keeps (a source, an arrangement, a reduction, a view)."""
        ...

    def loop_trace(self, loop: n.Iterate, node: n.Node) -> DeltaTrace:
        """The product-time trace of ``node`` inside ``loop``."""
        ...


class RunTarget(TraceCatalog, Protocol):
    """What one run needs of the runtime it brings up to date."""

    @property
    def thresholds(self) -> Thresholds:
        """The sizes that choose where the run's work happens."""
        ...

    def view(self, name: str) -> n.View:
        """The view ``name``, or an error naming the views there are."""
        ...

    def check_plans(self, views: Sequence[str] | None = None) -> None:
        """Refuse to go on when a view's definition changed since its trace was built."""
        ...

    def discard_stale(self, nodes: Sequence[n.Node]) -> list[n.Node]:
        """Discard the traces among ``nodes`` computed from a source's history that
        was started over since; returns them."""
        ...

    def choose_refresh(self, views: Sequence[str]) -> dict[str, RefreshChoice]: ...

    def behind(self, view: str) -> bool:
        """Whether the sources ``view`` reads hold epochs it has not computed."""
        ...

    def pending(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> tuple[int, int]:
        """The epochs ``[lower, upper)`` a run of ``views`` has to compute."""
        ...

    def stateful_nodes(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> list[n.Node]:
        """Every node with a trace that ``views`` depend on, inputs before users."""
        ...

    def discard_unmaintained(self, recomputed: Collection[str]) -> None: ...

    def record_deferred(self, appends: Mapping[str, DeferredAppend]) -> None:
        """Record the empty appends a run deferred, by trace name, in one commit."""
        ...

    def release(self, node: n.Node, upper: int) -> None:
        """Move the runtime's holds on ``node``'s traces to ``upper - 1``."""
        ...

    def released(self, node: n.Node, through: int) -> Callable[[TraceState], TraceState]:
        """The runtime's holds on ``node``'s trace moved to ``through``, as a
        transition an append commits with its batch."""
        ...


def readable_from(traces: TraceCatalog, view: n.View) -> int:
    """The first epoch ``view`` can be recomputed as of: its sources' history
    before their ``since`` is compacted, so no recomputation can tell it apart."""
    sources = [x for x in upstream([view]) if isinstance(x, n.Source)]
    return max((traces.trace(s).reload().since.epoch_bound() or 0 for s in sources), default=0)
