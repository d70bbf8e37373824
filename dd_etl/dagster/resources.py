"""The SparkSession as a Dagster resource: created once per run, shared by its steps."""

from __future__ import annotations

import dagster as dg
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from dd_etl.spark import session


class SparkResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Local Spark by default; set ``master`` (e.g. ``spark://host:7077``) for a cluster."""

    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    _session: SparkSession | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._session = session("dd_etl-dagster", master=self.master, conf=self.conf)

    @property
    def spark(self) -> SparkSession:
        if self._session is None:
            self._session = session("dd_etl-dagster", master=self.master, conf=self.conf)
        return self._session
