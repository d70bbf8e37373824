"""How one kind of plan node is computed: as a change, inside a loop, from scratch.

A kind's rule is the one place that knows its operator's three formulas; the
evaluations around it (``runtime/interval.py``, ``runtime/iteration.py``,
``runtime/recompute.py``) only schedule nodes and hand each rule the scope it
computes in. A kind a setting does not support keeps the default, which
refuses it by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from pyspark.sql import DataFrame

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n

if TYPE_CHECKING:
    import pyarrow as pa

    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope

N = TypeVar("N", bound=n.Node)


class Rule(Generic[N]):
    def changes(self, node: N, interval: IntervalScope, start: int) -> DataFrame | None:
        """``node``'s changes at epochs ``[start, upper)`` of the interval: for a
        node that keeps a trace, the batch it appends from its trace's upper
        ``start``; for another, its changes in the interval (``start`` is
        ``lower``). None: a source's, appended by whoever feeds it."""
        raise PlanError(f"no runtime rule for operator {type(node).__name__}")

    def batch_in_driver(self, node: N, interval: IntervalScope) -> pa.Table | None:
        """The batch ``changes`` would plan, made by the driver from the few rows it
        reads (in the stored layout of the node's trace), in any sizing: asked
        first, it reads no more than the driver keeps (``DRIVER_KEPT_RECORDS``)
        and costs no Spark plan; None: plan it."""
        return None

    def unchanged(self, node: N, interval: IntervalScope) -> bool:
        """Whether ``node`` surely has no changes in the interval when, as the
        trace logs tell, its inputs have none: nothing in, nothing out."""
        return all(interval.unchanged(i) for i in node.inputs)

    def in_loop(self, node: N, round: RoundScope) -> DataFrame | None:
        """``node``'s updates at the round's time (and any it lands later), or
        None when it has none."""
        if not any(round.live(i) for i in node.inputs):
            return None  # nothing in, nothing out
        raise PlanError(f"iterate: no loop rule for operator {type(node).__name__}")

    def rows_in_loop(self, node: N, round: RoundScope) -> pa.Table | None:
        """The driver's rows of ``in_loop``'s updates, where they follow with no
        Spark job from rows it holds."""
        return None

    def from_scratch(self, node: N, scratch: ScratchScope) -> DataFrame:
        """``node``'s whole collection at the scratch's epoch, as distinct rows
        with their multiplicity."""
        raise PlanError(f"no batch rule for operator {type(node).__name__}")
