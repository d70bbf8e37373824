"""What a rule sees of the evaluation that asks it for a node's updates.

One node is computed in three settings: as the changes of a run's interval, as
the updates of one round of a loop, and as a whole collection recomputed from
scratch. Each setting offers its rules the services below (its inputs'
updates, their histories, where to stage what a round produces), and nothing
of how it schedules nodes, sizes work or commits traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n

if TYPE_CHECKING:
    import pyarrow as pa

    from dd_etl.operators.iterative import Known, LoopTime
    from dd_etl.plan.dataflow import Dataflow
    from dd_etl.runtime.catalog import TraceCatalog

History = Callable[[DataFrame], DataFrame]
"""Given keys, a trace's history for them (``IntervalScope.history``)."""


class IntervalScope(Protocol):
    """A run's interval ``[lower, upper)``: every node's changes there, and the
    history before it."""

    @property
    def traces(self) -> TraceCatalog: ...

    @property
    def lower(self) -> int: ...

    @property
    def upper(self) -> int: ...

    @property
    def driver_rows(self) -> bool:
        """The interval's rows pass through the driver: it can tell keys apart
        from rows it reads, with no Spark job."""
        ...

    def delta(self, node: n.Node) -> DataFrame:
        """``node``'s changes in the interval, computed once."""
        ...

    def delta_from(self, node: n.Node, start: int) -> DataFrame:
        """``node``'s changes at epochs ``start`` and later."""
        ...

    def unchanged(self, node: n.Node) -> bool:
        """Whether ``node`` surely has no changes in the interval, as the trace
        logs tell (no Spark job)."""
        ...

    def history(
        self,
        node: n.Node,
        before: int | None = None,
        probes: Sequence[n.Node] = (),
        accumulated: bool = True,
        hashes: Sequence[int] | None = None,
    ) -> History:
        """``node``'s trace accumulated before epoch ``before`` (default: ``lower``),
        for some keys, and maybe other keys' rows (sharing their key hashes, or
        all of a small trace's): the consumer joins it on its keys."""
        ...

    def run_loop(self, loop: n.Iterate, start: int) -> DataFrame:
        """A top-level loop run over the epochs ``[start, upper)``: its output's
        changes, its inner traces appended."""
        ...


class RoundScope(Protocol):
    """One round ``t`` of a loop's epoch: the updates at ``t`` of the nodes the
    round has run so far, and the epoch's staged updates."""

    @property
    def t(self) -> LoopTime: ...

    def changes(self, node: n.Node) -> DataFrame:
        """``node``'s updates at ``t`` (none if it has none)."""
        ...

    def live(self, node: n.Node) -> bool:
        """Whether ``node`` has updates at ``t``."""
        ...

    def rows(self, node: n.Node) -> pa.Table | None:
        """The driver's rows of ``changes(node)``, where it holds them."""
        ...

    def staged(self, node: n.Node) -> bool:
        """Whether updates of ``node`` are staged at ``t``'s iteration."""
        ...

    def due(self, node: n.Node) -> bool:
        """Whether a reduction scheduled keys for ``t``'s iteration."""
        ...

    def at(self, node: n.Node) -> DataFrame:
        """``node``'s staged updates at ``t``."""
        ...

    def rows_at(self, node: n.Node) -> pa.Table | None:
        """``at(node)``'s rows, where the driver holds the node's staging."""
        ...

    def due_keys(self, node: n.Reduce) -> DataFrame:
        """The keys ``node`` scheduled for ``t``."""
        ...

    def known(self, node: n.Node) -> Known:
        """Every update of ``node`` seen so far, at any time, for keys."""
        ...

    def before(self, node: n.Node) -> Known:
        """``node``'s updates processed before round ``t``, for keys."""
        ...

    def stage(self, node: n.Node, updates: DataFrame, rows: pa.Table | None = None) -> None:
        """Stage ``updates`` of ``node`` (``rows``: the driver's, if it holds them)."""
        ...

    def reconsider(self, node: n.Reduce, updates: DataFrame, later: DataFrame) -> None:
        """Stage ``updates`` of a reduction, and the keys it must evaluate again
        at ``later`` times."""
        ...

    def busy(self, loop: n.Iterate) -> bool:
        """Whether anything of ``loop``'s nest is staged or due at ``t``'s iteration."""
        ...

    def nested(self, loop: n.Iterate) -> DataFrame:
        """A loop nested in this one run to its fixed point at ``t``."""
        ...


class ScratchScope(Protocol):
    """A view evaluated from scratch at one epoch, every collection as distinct
    rows with their multiplicity."""

    @property
    def flow(self) -> Dataflow: ...

    def evaluate(self, node: n.Node) -> DataFrame:
        """``node``'s whole collection, computed once."""
        ...

    def reads_trace(self, node: n.View) -> bool:
        """Whether ``node`` is read from its trace rather than recomputed."""
        ...

    def read(self, node: n.Node) -> DataFrame:
        """``node``'s trace, accumulated at the epoch."""
        ...

    def fixed_point(self, loop: n.Iterate) -> DataFrame:
        """The body applied to the whole collection until it stops changing."""
        ...
