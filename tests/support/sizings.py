"""Runs sized as their few records would not size them by themselves."""

from __future__ import annotations

from dd_etl.runtime.sizing import DEFAULT_THRESHOLDS, Thresholds

DEFAULT = DEFAULT_THRESHOLDS
MEDIUM = Thresholds(small_records=-1, medium_share=float("inf"))
"""Every run (and every layer of it) sized medium: its work on Spark's executors,
without adaptive execution, each lookup broadcasting its keys."""
