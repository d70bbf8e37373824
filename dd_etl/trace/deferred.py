"""Empty appends that a trace's own log does not hold yet.

A trace whose inputs did not change in an interval appends an empty batch: it
only moves the trace's upper. In a pipeline of hundreds of views most traces
take nothing in at a small epoch, and a Delta commit for each would cost more
than the changes. Such an append is deferred instead: recorded with the others
of its run in one commit of the runtime's own log (``trace/deferred_log.py``),
and applied to the trace's state wherever it is read, as the empty batch
``[lower, upper)`` it stands for. The trace's next commit, whatever it is,
carries that batch into its log like any other.

A deferred append holds only while the trace's log is where it was deferred
from: the same generation, its upper still ``lower``. Once the trace's log
moved on (its next append carried the batch), or the trace was discarded and
created again, the record is stale and applies to nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from dd_etl.lattice import Antichain
from dd_etl.trace.description import Description
from dd_etl.trace.state import TraceState

_IDS = uuid.UUID("5b0c8f57-6f4e-4d38-9a55-0f3d5c1a2e71")


@dataclass(frozen=True, slots=True)
class DeferredAppend:
    """The empty batch ``[lower, upper)`` of the trace generation ``generation``."""

    generation: str
    lower: Antichain
    upper: Antichain

    @property
    def batch_id(self) -> str:
        """The same for every reader of the same deferral, so that states read twice
        are equal; another deferral (a later upper) is another batch."""
        key = f"{self.generation}/{self.lower.to_json()}/{self.upper.to_json()}"
        return uuid.uuid5(_IDS, key).hex

    def holds_for(self, state: TraceState) -> bool:
        """Whether ``state``, as the trace's log holds it, is the one deferred from."""
        return (
            state.generation == self.generation
            and state.upper == self.lower
            and not self.upper.less_equal(self.lower)
        )

    def applied_to(self, state: TraceState) -> TraceState:
        """``state`` with the empty batch appended, where the deferral holds for it;
        else ``state`` itself."""
        if not self.holds_for(state):
            return state
        since = Antichain.minimum(state.dims)
        return state.append(self.batch_id, Description(self.lower, self.upper, since), 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "lower": self.lower.to_json(),
            "upper": self.upper.to_json(),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> DeferredAppend:
        return cls(
            value["generation"],
            Antichain.from_json(value["lower"]),
            Antichain.from_json(value["upper"]),
        )
