"""The runtime's holds on its traces, moved only through the handles it owns.

On every trace the runtime holds what its next run reads (``reading``: history
from the last run's ``upper - 1`` on). On a view's trace it also keeps past
epochs readable (``retaining``: ``read --as-of``, ``changes``). Those reads
filter stored times, so retention holds times back, never batch boundaries, or
the view's spine could never merge and would grow by a batch per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_etl.lattice import Antichain
from dd_etl.trace.reader_handle import HoldChange, ReaderHandle
from dd_etl.trace.trace import Trace

RUNTIME_READER = "runtime"
RETENTION_READER = "retention"


@dataclass(frozen=True, slots=True)
class RuntimeHolds:
    """The runtime's handles on one trace: ``reading``, and for a view ``retaining``."""

    reading: ReaderHandle
    retaining: ReaderHandle | None = None

    @classmethod
    def open(cls, trace: Trace[Any], retains: bool) -> RuntimeHolds:
        """Open the runtime's readers of ``trace``, holding it all (or adopting the
        holds a previous process left); ``retains``: a view's, which past epochs
        are read from."""
        bottom = Antichain.minimum(trace.state.dims)
        reading = trace.open_reader(RUNTIME_READER, bottom, bottom)
        if not retains:
            return cls(reading)
        retaining = trace.open_reader(RETENTION_READER, bottom, Antichain.empty())
        if not retaining.hold.physical.is_empty():  # as traces of earlier versions held it
            retaining.downgrade(physical=Antichain.empty())
        return cls(reading, retaining)

    def released(self, through: Antichain, keep: Antichain | None) -> HoldChange:
        """The holds moved forward (never back) in one change: ``reading`` to
        ``through``, ``retaining`` to ``keep`` (None: where it is)."""
        reading = self.reading.advanced(through, through)
        if self.retaining is None or keep is None:
            return reading
        retaining = self.retaining.advanced(keep)
        return lambda state: retaining(reading(state))

    def restart(self, since: Antichain) -> None:
        """Move both holds to ``since``, where a rebuilt view is readable from."""
        self.reading.downgrade(since, since)
        if self.retaining is not None:
            self.retaining.downgrade(since)
