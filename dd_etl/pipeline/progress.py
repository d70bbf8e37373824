"""How a tick tells its caller (a progress bar, Dagster, nobody) what it does."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Told when a step (``source:trips``, ``run``, ``view:fares``, ``sink:fares``)
    starts (``done=0``), how far it got and what it did (``done=1``: finished)."""

    def __call__(self, step: str, detail: str, done: float = 1.0) -> None: ...
