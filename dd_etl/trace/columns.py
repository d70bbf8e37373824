"""Reserved column names of stored updates.

A stored update is a row of data columns followed by ``_key_hash`` (the 64-bit
hash of the trace's key columns, which files are sorted and pruned by), one
``_time…`` column per time coordinate, and ``_diff``.
"""

from __future__ import annotations

KEY_HASH = "_key_hash"
DIFF = "_diff"
TIME = "_time"


def time_columns(dims: int) -> list[str]:
    """``_time`` for epochs, then ``_time1``, ``_time2``… for loop iterations."""
    return [TIME] + [f"{TIME}{i}" for i in range(1, dims)]
