"""Which batches to merge, and how much of a merge a given amount of fuel buys.

The spine keeps a trace's batches contiguous in time and in geometrically
decreasing sizes, so a trace of ``n`` appended records holds ``O(log n)`` batches.
Each batch sits on the level ``⌈log2 records⌉``; two adjacent batches merge
when the newer one's level reaches the older one's — a binary counter over
records, so a settled spine has strictly decreasing levels (at most one batch
per level) and every record is merged ``O(log n)`` times. The oldest such pair
merges first: it is the largest imbalance, and taking newer pairs first would
let fresh appends starve old history of its compaction.

A merge reads its inputs in slices of the key-hash space. Fuel is counted in
input records; one unit of fuel merges about one record. A merge of ``w``
records given fuel ``f`` advances its cursor by ``f / w`` of the hash space, so a
large merge spreads over many maintenance steps while readers keep using its
inputs. All functions here are pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dd_etl.lattice import Antichain
from dd_etl.trace.batch import Batch

HASH_SPACE = 1 << 64
"""Key hashes are signed 64-bit integers; merge cursors count from ``-2**63`` upwards."""


def merge_candidate(
    batches: Sequence[Batch], busy: set[str], physical: Antichain
) -> tuple[int, int] | None:
    """Indices ``(i, i + 1)`` of the oldest adjacent pair that should merge, if any.

    Only batches whose upper the physical frontier has passed may merge: a reader
    holding ``physical`` must still be able to tell updates apart at boundaries
    beyond it.
    """
    for i in range(len(batches) - 1):
        older, newer = batches[i], batches[i + 1]
        if older.id in busy or newer.id in busy:
            continue
        if not newer.description.upper.less_equal(physical):
            continue
        if older.level <= newer.level:
            return i, i + 1
    return None


def cursor_after(cursor: int, work: int, fuel: int) -> int:
    """The hash-space position a merge reaches when spending ``fuel`` from ``cursor``."""
    if work <= 0 or fuel >= work:
        return HASH_SPACE
    step = -(-fuel * HASH_SPACE // work)  # ceiling division, at least one hash
    return min(HASH_SPACE, cursor + max(step, 1))


def remaining_work(cursor: int, work: int) -> int:
    return -(-(HASH_SPACE - cursor) * work // HASH_SPACE)


def batch_limit(total_records: int) -> int:
    """How many batches a healthy spine holds at most before appends apply back-pressure.

    A settled spine has at most one batch per level, ``⌈log2 n⌉ + 1``; the slack
    lets merges run in the background before appends have to help.
    """
    return 2 * max(total_records, 1).bit_length() + 4


@dataclass(frozen=True, slots=True)
class HashRange:
    """A half-open slice ``[start, end)`` of the hash space, in signed hash values."""

    start: int
    end: int

    @classmethod
    def between(cls, cursor_from: int, cursor_to: int) -> HashRange:
        offset = 1 << 63
        return cls(cursor_from - offset, cursor_to - offset)

    def overlaps(self, lo: int, hi: int) -> bool:
        """Does the closed interval ``[lo, hi]`` of a file's hashes meet this range?"""
        return lo < self.end and hi >= self.start
