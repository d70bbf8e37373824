"""Logical times, frontiers and the lattice operations differential dataflow builds on."""

from dd_etl.lattice.antichain import Antichain, advance_by, meet_all
from dd_etl.lattice.time import Time, enter, epoch, join, leave, less_equal, less_than, meet

__all__ = [
    "Antichain",
    "Time",
    "advance_by",
    "enter",
    "epoch",
    "join",
    "leave",
    "less_equal",
    "less_than",
    "meet",
    "meet_all",
]
