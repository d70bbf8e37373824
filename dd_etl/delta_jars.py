"""Delta Lake's jars for the Spark dd_etl starts: fetched once, then read from a cache.

Spark reads and writes Delta tables through the ``delta-spark`` jars, which PyPI
does not carry: they come from Maven Central. Spark can resolve them itself
(``spark.jars.packages``), but Ivy then resolves at every start and pulls
33 artifacts (86 MB), nearly all of them older copies of jars PySpark already
ships. Delta needs two that it does not: ``delta-spark`` built for this Spark's
minor version, and ``delta-storage``. They are fetched into a cache beside the
installation (its ``share/dd_etl/jars``, or the user's cache directory when the
installation is read-only), checked against the repository's SHA-1, and moved
into place whole; after that, nothing is fetched again and Spark starts offline.

``DD_ETL_SPARK_JARS`` names a directory holding the jars instead (a deployment
that provisions them itself); ``DD_ETL_MAVEN_REPOSITORY`` a mirror of Maven Central.
``python -m dd_etl.delta_jars`` fetches them and prints where they are.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from pyspark.version import __version__ as PYSPARK_VERSION

from dd_etl.errors import ConfigError

JARS_ENV = "DD_ETL_SPARK_JARS"
REPOSITORY_ENV = "DD_ETL_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
SCALA = "2.13"
TIMEOUT_SECONDS = 120

EXTENSIONS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What makes a session speak Delta SQL (MERGE, DESCRIBE HISTORY, ``delta.`path```)."""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str

    @property
    def file(self) -> str:
        return f"{self.group}_{self.name}-{self.version}.jar"

    def url(self, repository: str) -> str:
        path = "/".join([*self.group.split("."), self.name, self.version])
        return f"{repository.rstrip('/')}/{path}/{self.name}-{self.version}.jar"


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
    given = os.environ.get(JARS_ENV)
    if given:
        found = sorted(Path(given).glob("*.jar"))
        if not found:
            raise ConfigError("the environment", JARS_ENV, f"{given} holds no .jar files")
        return found
    directory = _cache()
    repository = os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL
    paths = []
    for artifact in artifacts():
        path = directory / artifact.file
        if not path.exists():
            _fetch(artifact, repository, path)
        paths.append(path)
    return paths


def _cache() -> Path:
    for root in (Path(sys.prefix) / "share", _user_cache()):
        directory = root / "dd_etl" / "jars"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise ConfigError("the environment", JARS_ENV, "no writable directory for Delta's jars")


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def _fetch(artifact: Artifact, repository: str, path: Path) -> None:
    """Download ``artifact`` to ``path``: checked, then renamed into place, so a
    reader never sees half a jar and a crashed fetch leaves only a temporary file."""
    url = artifact.url(repository)
    try:
        data = _download(url)
        expected = _download(url + ".sha1").decode().split()[0].strip().lower()
    except OSError as e:
        raise ConfigError(
            "Delta's jars",
            f"{artifact.group}:{artifact.name}:{artifact.version}",
            f"cannot be fetched from {url} ({e}); set {REPOSITORY_ENV} to a Maven "
            f"mirror, or {JARS_ENV} to a directory holding the jars",
        ) from None
    actual = hashlib.sha1(data).hexdigest()
    if actual != expected:
        raise ConfigError("Delta's jars", url, f"SHA-1 {actual} is not the published {expected}")
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as out:
        out.write(data)
    os.replace(out.name, path)


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        return bytes(response.read())


if __name__ == "__main__":
    for jar in jars():
        print(jar)
