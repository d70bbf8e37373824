"""Jars from Maven Central: fetched once into a cache, then read from there.

Spark can resolve jars itself (``spark.jars.packages``), but Ivy then resolves
at every start and pulls whole dependency trees, nearly all of them older copies
of jars PySpark already ships. dd_etl names the few jars it needs instead
(``delta_jars``, ``s3_jars``) and fetches each into a cache beside the
installation (its ``share/dd_etl/jars``, or the user's cache directory when the
installation is read-only), checked against the repository's SHA-1 and moved
into place whole; after that, nothing is fetched again and Spark starts offline.

``DD_ETL_MAVEN_REPOSITORY`` names a mirror of Maven Central. ``DD_ETL_SPARK_JARS``
names a directory holding every jar dd_etl gives Spark (Delta's, and S3's for
object storage), provisioned by the deployment: ``spark_jars`` then returns all
of that directory's jars, whichever set is asked for, and fetches nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dd_etl.errors import ConfigError

JARS_ENV = "DD_ETL_SPARK_JARS"
REPOSITORY_ENV = "DD_ETL_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Artifact:
    """A jar in a Maven repository; ``classifier`` picks one of a release's other
    jars (``jar-with-dependencies``: ``name-version-classifier.jar``)."""

    group: str
    name: str
    version: str
    classifier: str | None = None

    @property
    def coordinates(self) -> str:
        suffix = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.name}:{self.version}{suffix}"

    @property
    def jar(self) -> str:
        """The jar's name in the repository."""
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.name}-{self.version}{suffix}.jar"

    @property
    def file(self) -> str:
        """The jar's name in the cache: with its group, as two groups may share a name."""
        return f"{self.group}_{self.jar}"

    def url(self, repository: str) -> str:
        path = "/".join([*self.group.split("."), self.name, self.version])
        return f"{repository.rstrip('/')}/{path}/{self.jar}"


def spark_jars(artifacts: Sequence[Artifact]) -> list[Path]:
    """Jars for Spark: every jar of ``DD_ETL_SPARK_JARS`` if it is set, else
    ``artifacts`` (``fetched``)."""
    given = os.environ.get(JARS_ENV)
    if not given:
        return fetched(artifacts)
    found = sorted(Path(given).glob("*.jar"))
    if not found:
        raise ConfigError("the environment", JARS_ENV, f"{given} holds no .jar files")
    return found


def fetched(artifacts: Sequence[Artifact]) -> list[Path]:
    """The cached files of ``artifacts``, in their order; those the cache lacks are
    fetched first."""
    directory = cache()
    repository = os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL
    paths = []
    for artifact in artifacts:
        path = directory / artifact.file
        if not path.exists():
            _fetch(artifact, repository, path)
        paths.append(path)
    return paths


def cache() -> Path:
    """The directory fetched jars are kept in."""
    for root in (Path(sys.prefix) / "share", _user_cache()):
        directory = root / "dd_etl" / "jars"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise ConfigError("the environment", JARS_ENV, "no writable directory for fetched jars")


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
            "a jar from Maven",
            artifact.coordinates,
            f"cannot be fetched from {url} ({e}); set {REPOSITORY_ENV} to a Maven "
            f"mirror, or {JARS_ENV} to a directory holding Spark's jars",
        ) from None
    actual = hashlib.sha1(data).hexdigest()
    if actual != expected:
        raise ConfigError(
            "a jar from Maven", url, f"SHA-1 {actual} is not the published {expected}"
        )
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as out:
        out.write(data)
    os.replace(out.name, path)


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        return bytes(response.read())
