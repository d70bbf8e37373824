"""Dagster integration: a thin translation of dd_etl's work into Dagster objects."""

from dd_etl.dagster.definitions import maintenance_definitions
from dd_etl.dagster.resources import SparkResource

__all__ = ["SparkResource", "maintenance_definitions"]
