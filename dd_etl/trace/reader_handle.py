"""A reader's handle on a trace: the one way to move that reader's hold.

As differential dataflow's ``TraceAgent`` or Materialize persist's ``ReadHandle``,
whoever opens a reader owns its hold, and only through the handle can the hold
move: forward (``downgrade``) or away (``release``). Code holding no handle of a
reader cannot move its hold, so one reader's progress never releases history
another still reads.

The hold itself lives in the trace's state, persisted with it: a handle moves it
by committing ``TraceState``'s pure transitions, in a commit of its own or within
another one (``downgraded``, ``advanced``: e.g. an append's ``holds``). A new
process of the same reader opens its handle again and adopts the persisted hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dd_etl.lattice import Antichain
from dd_etl.trace.errors import ReleasedReader, UnknownReader
from dd_etl.trace.holds import ReaderHold
from dd_etl.trace.state import TraceState

HoldChange = Callable[[TraceState], TraceState]
"""A pure change of readers' holds, committed on its own or with another change."""


class HeldTrace(Protocol):
    """What a handle needs of the trace it holds (``Trace`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> TraceState: ...

    def move_holds(self, holds: HoldChange) -> None: ...


class ReaderHandle:
    """The hold of ``reader`` on a trace, moved only through this handle; opened by
    ``Trace.open_reader``. Once released, the handle refuses any further use."""

    __slots__ = ("_released", "_trace", "reader")

    def __init__(self, trace: HeldTrace, reader: str) -> None:
        self._trace = trace
        self.reader = reader
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    @property
    def hold(self) -> ReaderHold:
        """The hold as of the trace's latest known state."""
        self._check()
        return self._held(self._trace.state)

    def downgraded(
        self, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> HoldChange:
        """The change moving the hold forward to ``logical`` and ``physical`` (None:
        where it is), to commit with another (``Trace.compare_and_append``'s
        ``holds``); it raises ``HoldRegression`` where it would move the hold back."""
        self._check()

        def change(state: TraceState) -> TraceState:
            self._check()
            return state.downgrade_reader(self.reader, logical, physical)

        return change

    def advanced(
        self, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> HoldChange:
        """As ``downgraded``, to the join of the hold with ``logical`` and ``physical``
        in the state the change applies to: a hold already past them stays."""
        self._check()

        def change(state: TraceState) -> TraceState:
            self._check()
            held = self._held(state)
            return state.downgrade_reader(
                self.reader,
                None if logical is None else held.logical.join(logical),
                None if physical is None else held.physical.join(physical),
            )

        return change

    def downgrade(
        self, logical: Antichain | None = None, physical: Antichain | None = None
    ) -> None:
        """Move the hold forward in a commit of its own (``downgraded``)."""
        self._trace.move_holds(self.downgraded(logical, physical))

    def release(self) -> None:
        """Drop the hold, so the trace may compact past it; the handle is spent."""
        self._check()
        self._trace.move_holds(lambda state: state.drop_reader(self.reader))
        self._released = True

    def _held(self, state: TraceState) -> ReaderHold:
        hold = state.hold_map.get(self.reader)
        if hold is None:
            raise UnknownReader(state.name, self.reader)
        return hold

    def _check(self) -> None:
        if self._released:
            raise ReleasedReader(self._trace.name, self.reader)
