"""A code location for the pipeline files named in ``DD_ETL_PIPELINES``
(``os.pathsep``-separated): what ``dd-etl ui`` serves."""

import os

from dd_etl.dagster.definitions import pipeline_definitions
from dd_etl.dagster.names import PIPELINES_ENV

defs = pipeline_definitions([p for p in os.environ.get(PIPELINES_ENV, "").split(os.pathsep) if p])
