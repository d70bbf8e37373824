"""Runs dataflows: brings every view up to date for the pending epochs."""

from dd_etl.runtime.runner import RunReport, Runtime

__all__ = ["RunReport", "Runtime"]
