"""Delta Lake's jars for the Spark dd_etl starts: fetched once, then read from a cache.

Spark reads and writes Delta tables through the ``delta-spark`` jars, which PyPI
does not carry: they come from Maven Central. Spark can resolve them itself
(``spark.jars.packages``), but Ivy then resolves at every start and pulls
33 artifacts (86 MB), nearly all of them older copies of jars PySpark already
ships. Delta needs two that it does not: ``delta-spark`` built for this Spark's
minor version, and ``delta-storage``. ``maven_jars`` fetches them into its cache.

``DD_ETL_SPARK_JARS`` names a directory holding the jars instead (a deployment
that provisions them itself: every jar dd_etl gives Spark, S3's too, is then
that directory's); ``DD_ETL_MAVEN_REPOSITORY`` a mirror of Maven Central.
``python -m dd_etl.delta_jars`` fetches them and prints where they are.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from pyspark.version import __version__ as PYSPARK_VERSION

from dd_etl import maven_jars
from dd_etl.maven_jars import JARS_ENV, MAVEN_CENTRAL, REPOSITORY_ENV, Artifact

__all__ = [
    "EXTENSIONS",
    "JARS_ENV",
    "MAVEN_CENTRAL",
    "REPOSITORY_ENV",
    "Artifact",
    "artifacts",
    "jars",
    "spark_options",
]

SCALA = "2.13"

EXTENSIONS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What makes a session speak Delta SQL (MERGE, DESCRIBE HISTORY, ``delta.`path```)."""


def artifacts() -> list[Artifact]:
    """The jars Delta adds to this PySpark: its version follows the installed
    ``delta-spark`` package, its Spark build the installed PySpark's minor version."""
    delta = version("delta-spark")
    spark = ".".join(PYSPARK_VERSION.split(".")[:2])
    return [
        Artifact("io.delta", f"delta-spark_{spark}_{SCALA}", delta),
        Artifact("io.delta", "delta-storage", delta),
    ]


def spark_options() -> dict[str, str]:
    """The options that give a session Delta: its jars and its SQL extension."""
    return {"spark.jars": ",".join(str(j) for j in jars()), **EXTENSIONS}


def jars() -> list[Path]:
    """The jar files, fetched first if the cache does not hold them yet."""
    return maven_jars.spark_jars(artifacts())


if __name__ == "__main__":
    for jar in jars():
        print(jar)
