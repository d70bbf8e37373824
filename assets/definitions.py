"""The project's Dagster code location: maintenance of the traces under ``traces/``."""

from pathlib import Path

from dd_etl.dagster import maintenance_definitions

defs = maintenance_definitions(Path(__file__).resolve().parent.parent / "traces")
