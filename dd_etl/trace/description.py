"""What a batch of updates guarantees.

A batch with description ``(lower, upper, since)`` holds the updates of a
collection whose times ``t`` satisfy ``lower ≤ t`` and ``not upper ≤ t``, with
every time replaced by ``advance_by(t, since)``. Hence for every time ``t'`` in
advance of ``since``, accumulating the batch at ``t'`` equals accumulating the
full collection restricted to ``[lower, upper)`` at ``t'``.

Batches that are adjacent in a trace share a frontier (``b1.upper == b2.lower``),
so the batches of a trace partition ``[trace lower, trace upper)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_etl.lattice import Antichain, Time, advance_by


@dataclass(frozen=True, slots=True)
class Description:
    lower: Antichain
    upper: Antichain
    since: Antichain

    def admits(self, t: Time) -> bool:
        """Could ``t`` be the stored time of an update in a batch with this description?

        Uncompacted times lie in ``[lower, upper)``; a compacted time is a fixed
        point of ``advance_by(·, since)`` and may land at or beyond ``upper``.
        """
        if not self.lower.less_equal_time(t):
            return False
        return not self.upper.less_equal_time(t) or advance_by(t, self.since) == t

    def to_json(self) -> dict[str, Any]:
        return {
            "lower": self.lower.to_json(),
            "upper": self.upper.to_json(),
            "since": self.since.to_json(),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Description:
        return cls(
            Antichain.from_json(value["lower"]),
            Antichain.from_json(value["upper"]),
            Antichain.from_json(value["since"]),
        )

    def __repr__(self) -> str:
        return f"[{self.lower!r}, {self.upper!r}) since {self.since!r}"
