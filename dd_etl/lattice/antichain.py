"""Antichains of times, used as frontiers.

An antichain is a set of mutually incomparable times. As a *frontier* ``F`` it
stands for the set of times in advance of it, ``{t : ∃ f ∈ F, f ≤ t}``: "every
time still to come is ≥ some element of F". The empty frontier has no time in
advance of it: the collection is complete.

Frontiers are ordered by inclusion of those sets: ``F ≤ G`` (``F.less_equal(G)``)
iff every element of ``G`` is in advance of ``F``, i.e. ``G`` is at or beyond ``F``.
Under that order the frontier ``meet`` (minimal elements of the union) is the
earliest frontier beyond neither, and the frontier ``join`` (minimal elements of
pairwise time joins) is the earliest frontier beyond both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dd_etl.lattice import time as tm
from dd_etl.lattice.time import Time


def _minimal(times: Iterable[Time]) -> tuple[Time, ...]:
    unique = sorted(set(times))
    kept = [t for t in unique if not any(tm.less_than(o, t) for o in unique)]
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class Antichain:
    """An immutable antichain; elements are kept sorted so equal antichains compare equal."""

    elements: tuple[Time, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", _minimal(self.elements))
        dims = {len(t) for t in self.elements}
        if len(dims) > 1:
            raise ValueError(f"antichain mixes scopes: {self.elements}")

    @classmethod
    def of(cls, *times: Time) -> Antichain:
        return cls(tuple(times))

    @classmethod
    def from_epoch(cls, e: int) -> Antichain:
        return cls(((e,),))

    @classmethod
    def minimum(cls, dims: int) -> Antichain:
        """The frontier before any time: everything is still possible."""
        return cls((tm.minimum(dims),))

    @classmethod
    def empty(cls) -> Antichain:
        """The frontier of a complete collection: no time is still possible."""
        return cls(())

    def __iter__(self) -> Iterator[Time]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def is_empty(self) -> bool:
        return not self.elements

    def insert(self, t: Time) -> Antichain:
        """The antichain with ``t`` added, dropping elements that ``t`` precedes.

        Returns ``self`` unchanged when some element already precedes ``t``.
        """
        if self.less_equal_time(t):
            return self
        return Antichain((*self.elements, t))

    def less_equal_time(self, t: Time) -> bool:
        """Is ``t`` in advance of this frontier (some element ≤ t)?"""
        return any(tm.less_equal(f, t) for f in self.elements)

    def less_than_time(self, t: Time) -> bool:
        return any(tm.less_than(f, t) for f in self.elements)

    def less_equal(self, other: Antichain) -> bool:
        """Frontier order: every element of ``other`` is in advance of ``self``."""
        return all(self.less_equal_time(t) for t in other.elements)

    def dominates(self, other: Antichain) -> bool:
        """``self`` is at or beyond ``other``: nothing ``self`` admits is earlier."""
        return other.less_equal(self)

    def meet(self, other: Antichain) -> Antichain:
        """The earliest frontier that neither ``self`` nor ``other`` is before."""
        return Antichain((*self.elements, *other.elements))

    def join(self, other: Antichain) -> Antichain:
        """The earliest frontier beyond both: times in advance of both frontiers."""
        return Antichain(tuple(tm.join(a, b) for a in self.elements for b in other.elements))

    def epoch_bound(self) -> int | None:
        """The least epoch any element names; ``None`` for the empty frontier.

        Monotone in the frontier order, so it can number commits that advance it.
        """
        return min((t[0] for t in self.elements), default=None)

    def to_json(self) -> list[list[int]]:
        return [list(t) for t in self.elements]

    @classmethod
    def from_json(cls, value: Iterable[Iterable[int]]) -> Antichain:
        return cls(tuple(tuple(int(x) for x in t) for t in value))

    def __repr__(self) -> str:
        inner = ", ".join(str(t[0]) if len(t) == 1 else str(t) for t in self.elements)
        return "{" + inner + "}"


def meet_all(frontiers: Iterable[Antichain]) -> Antichain:
    """Meet of many frontiers; the meet of none is the empty (complete) frontier."""
    acc = Antichain.empty()
    for f in frontiers:
        acc = acc.meet(f)
    return acc


def advance_by(t: Time, frontier: Antichain) -> Time:
    """Advance ``t`` as far as no reader at or beyond ``frontier`` can tell.

    ``advance_by(t, F) = meet_{f ∈ F} join(t, f)``. Guarantee: for every ``t'`` in
    advance of ``F``, ``t ≤ t'`` iff ``advance_by(t, F) ≤ t'``. So times may be
    replaced by their advanced form, and updates consolidated, without any reader
    at or beyond ``F`` seeing a difference. The empty frontier has no such reader;
    ``t`` is then returned unchanged.
    """
    if frontier.is_empty():
        return t
    acc: Time | None = None
    for f in frontier.elements:
        joined = tm.join(t, f)
        acc = joined if acc is None else tm.meet(acc, joined)
    assert acc is not None
    return acc
