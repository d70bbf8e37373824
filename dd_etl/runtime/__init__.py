"""Runs dataflows: brings every view up to date for the pending epochs."""

from dd_etl.runtime.execution import RunReport
from dd_etl.runtime.runner import Runtime

__all__ = ["RunReport", "Runtime"]
