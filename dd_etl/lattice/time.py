"""Logical times: tuples of non-negative integers under the product order.

An epoch is the 1-tuple ``(e,)``, totally ordered. Inside a loop a time is
``(epoch, iteration)``; nested loops add one coordinate each. Two times are
comparable only if they have the same number of coordinates (the same scope).

The product order makes times a lattice: ``join`` is the coordinate-wise max
(the least time both precede) and ``meet`` the coordinate-wise min.
"""

from __future__ import annotations

Time = tuple[int, ...]


def epoch(e: int) -> Time:
    """The time of ingest tick ``e`` outside any loop."""
    return (e,)


def _check_scope(a: Time, b: Time) -> None:
    if len(a) != len(b):
        raise ValueError(f"times {a} and {b} belong to different scopes")


def less_equal(a: Time, b: Time) -> bool:
    """``a ≤ b`` in the product order."""
    _check_scope(a, b)
    return all(x <= y for x, y in zip(a, b, strict=True))


def less_than(a: Time, b: Time) -> bool:
    return a != b and less_equal(a, b)


def join(a: Time, b: Time) -> Time:
    """Least upper bound: the first time at which both ``a`` and ``b`` have happened."""
    _check_scope(a, b)
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def meet(a: Time, b: Time) -> Time:
    """Greatest lower bound."""
    _check_scope(a, b)
    return tuple(min(x, y) for x, y in zip(a, b, strict=True))


def minimum(dims: int) -> Time:
    """The bottom element of a scope with ``dims`` coordinates."""
    return (0,) * dims


def enter(t: Time) -> Time:
    """Extend a time into a nested loop scope at iteration 0."""
    return (*t, 0)


def leave(t: Time) -> Time:
    """Project a loop time back to its enclosing scope."""
    if len(t) < 2:
        raise ValueError(f"time {t} is not inside a loop")
    return t[:-1]
