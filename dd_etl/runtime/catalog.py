"""What evaluating a dataflow needs of the runtime: the dataflow and each node's
trace, opened on demand. ``Runtime`` is one; the evaluations (``recompute``,
``full_refresh``, the loop runner) depend on this much of it and no more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from dd_etl.plan import nodes as n
from dd_etl.plan.graph import upstream

if TYPE_CHECKING:
    from dd_etl.plan.dataflow import Dataflow
    from dd_etl.trace.delta_trace import DeltaTrace


class TraceCatalog(Protocol):
    @property
    def flow(self) -> Dataflow: ...

    def trace(self, node: n.Node) -> DeltaTrace:
        """The trace ``node`` keeps (a source, an arrangement, a reduction, a view)."""
        ...

    def loop_trace(self, loop: n.Iterate, node: n.Node) -> DeltaTrace:
        """The product-time trace of ``node`` inside ``loop``."""
        ...


def readable_from(traces: TraceCatalog, view: n.View) -> int:
    """The first epoch ``view`` can be recomputed as of: its sources' history
    before their ``since`` is compacted, so no recomputation can tell it apart."""
    sources = [x for x in upstream([view]) if isinstance(x, n.Source)]
    return max((traces.trace(s).reload().since.epoch_bound() or 0 for s in sources), default=0)
