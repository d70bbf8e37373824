"""A batch cut into slices of its key-hash range, each written by a task of its own.

Batch files are sorted by key hash, so the rows of a batch written by several
tasks must reach them in contiguous ranges of key hash. Spark's range
partitioning finds such ranges by sampling: a job of its own, which computes
the batch's whole plan once more before the job that writes it (at a load,
reading the source again). Key hashes are uniform (``xxhash64``), so ranges of
equal width hold about equal rows and need no sampling: slice ``i`` of ``n``
over ``[low, high)`` holds the hashes of ``[low + i·w, low + (i+1)·w)``.

Spark's hash partitioning puts a row in the partition ``pmod(murmur3(k), n)``
of its key ``k``, which would give two slices to one task and none to another.
So each slice is given as key a number Spark's hash sends to the partition of
the slice's own index (``partition_keys``): slice ``i`` is partition ``i``,
and a Spark write's files, named by partition, come in key-hash order.
"""

from __future__ import annotations

from functools import cache

from dd_etl.sql_text import quote
from dd_etl.trace.columns import KEY_HASH

LOWEST = -(1 << 63)
"""The least key hash; the hash space is ``[LOWEST, -LOWEST)``."""

_SEED = 42
"""The seed of Spark's ``Murmur3Hash``, which its hash partitioning uses."""

_MASK = 0xFFFFFFFF


def murmur3_int(value: int, seed: int = _SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt``: the hash Spark partitions an INT by."""
    k = (value * 0xCC9E2D51) & _MASK
    k = _rotate_left(k, 15)
    k = (k * 0x1B873593) & _MASK
    h = _rotate_left((seed & _MASK) ^ k, 13)
    h = (h * 5 + 0xE6546B64) & _MASK
    h ^= 4  # the input's length in bytes
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def _rotate_left(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


@cache
def partition_keys(partitions: int) -> tuple[int, ...]:
    """For each partition ``p`` of ``partitions``, the least INT ``k ≥ 0`` that
    Spark's hash partitioning sends to ``p``."""
    keys: list[int | None] = [None] * partitions
    missing, k = partitions, 0
    while missing:
        p = murmur3_int(k) % partitions
        if keys[p] is None:
            keys[p] = k
            missing -= 1
        k += 1
    return tuple(k for k in keys if k is not None)


def slice_of(slices: int, low: int = LOWEST, high: int = -LOWEST) -> str:
    """SQL: the slice (``0 ≤ i < slices``) of a row's key hash in ``[low, high)``,
    non-decreasing in the hash, so slices follow key-hash order. A double's
    rounding may move a hash next to a boundary into the slice beside it; the
    order holds all the same."""
    position = f"(CAST({quote(KEY_HASH)} AS DOUBLE) - {float(low)!r}D) * {slices / (high - low)!r}D"
    return f"least({slices - 1}, greatest(0, CAST(floor({position}) AS INT)))"


def partition_key(slice_sql: str, partitions: int) -> str:
    """SQL: the key whose hash partitioning (into ``partitions``) puts the rows of
    slice ``slice_sql`` in the partition of that index."""
    keys = ", ".join(map(str, partition_keys(partitions)))
    return f"element_at(array({keys}), {slice_sql} + 1)"
