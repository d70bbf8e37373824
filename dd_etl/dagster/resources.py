"""The SparkSession as a Dagster resource: created once per run, shared by its steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Spark for dd_etl's jobs. Unset ``master`` and ``remote`` use the pipeline's
    own ``spark:`` section (local Spark by default); set ``master``
    (``spark://host:7077``) to send every pipeline of the code location to a
    cluster, or ``remote`` (``sc://host:15002``) to a Spark Connect server.
    ``conf`` adds to the pipeline's."""

    master: str | None = None
    remote: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    def session(
        self,
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
        remote: str | None = None,
        *,
        object_storage: bool = False,
    ) -> SparkSession:
        """The process's session (Spark keeps one per process: the first run's
        settings hold for the steps after it); ``object_storage``: with the jars
        that reach object stores."""
        from dd_etl.spark import session

        if self.remote or self.master:
            master, remote = self.master, self.remote
        conf = {**(conf or {}), **self.conf}
        return session(
            "dd_etl-dagster",
            master=master,
            conf=conf,
            remote=remote,
            object_storage=object_storage,
        )
