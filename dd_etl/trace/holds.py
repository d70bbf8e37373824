"""Reader holds: what keeps a shared trace from compacting under its readers.

Each reader of a trace holds two frontiers (differential dataflow's TraceAgent):

* ``logical``: the reader will only accumulate the trace at times in advance of
  it, so the trace may advance stored times by (the meet of) these frontiers;
* ``physical``: the reader still needs to tell updates before this frontier
  apart from those after it, so batch boundaries beyond it must not be merged away.

Holds only move forward. The trace compacts to the meet of all holds; dropping a
reader releases its hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_etl.lattice import Antichain


@dataclass(frozen=True, slots=True)
class ReaderHold:
    logical: Antichain
    physical: Antichain

    def to_json(self) -> dict[str, Any]:
        return {"logical": self.logical.to_json(), "physical": self.physical.to_json()}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ReaderHold:
        return cls(Antichain.from_json(value["logical"]), Antichain.from_json(value["physical"]))
