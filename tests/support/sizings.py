"""Runs forced to a sizing their few records would not get by themselves."""

from __future__ import annotations

import pytest

from dd_etl.runtime import sizing


def force_medium(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run (and every layer of it) sized medium: its work on Spark's executors,
    without adaptive execution, each lookup broadcasting its keys."""
    monkeypatch.setattr(sizing, "SMALL_INTERVAL_RECORDS", -1)
    monkeypatch.setattr(sizing, "MEDIUM_SHARE", float("inf"))
