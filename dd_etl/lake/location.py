"""A place a table or a file is kept, and how each client opens it."""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dd_etl.errors import PipelineError
from dd_etl.lake.options import StoreOptions

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession

OBJECT_STORES = {"s3": "s3a", "gs": "gs", "abfss": "abfss"}
"""URI schemes of object stores, with the one Spark's Hadoop filesystems use."""
ALIASES = {"s3a": "s3", "file": ""}
NO_OPTIONS = StoreOptions()


class LocationError(PipelineError, ValueError):
    """A URI no store is known for."""

    exit_code = 2


@dataclass(frozen=True)
class Location:
    """A local directory (an absolute path) or an object-store URI (``s3://bucket/
    prefix``; ``s3a://`` is the same place), with the settings that reach it."""

    uri: str
    options: StoreOptions = NO_OPTIONS

    @classmethod
    def of(cls, where: str | os.PathLike[str], options: StoreOptions | None = None) -> Location:
        text = os.fspath(where)
        scheme, sep, rest = text.partition("://")
        if not sep:
            scheme, rest = "", text
        scheme = ALIASES.get(scheme.lower(), scheme.lower())
        if not scheme:
            return cls(os.path.abspath(rest), options or NO_OPTIONS)
        if scheme not in OBJECT_STORES:
            known = ", ".join(f"{s}://" for s in OBJECT_STORES)
            raise LocationError(f"{text}: unknown scheme {scheme}:// (a local path, or {known})")
        bucket, _, key = rest.rstrip("/").partition("/")
        if not bucket:
            raise LocationError(f"{text}: no bucket")
        uri = f"{scheme}://{bucket}" + (f"/{key.strip('/')}" if key else "")
        return cls(uri, options or NO_OPTIONS)

    def __truediv__(self, part: str) -> Location:
        return Location(posixpath.join(self.uri, part.strip("/")), self.options)

    def __str__(self) -> str:
        return self.uri

    @property
    def scheme(self) -> str:
        """``s3``, ``gs``, ``abfss``; empty for a local path."""
        scheme, sep, _ = self.uri.partition("://")
        return scheme if sep else ""

    @property
    def is_local(self) -> bool:
        return not self.scheme

    @property
    def path(self) -> Path:
        """The local directory; only for a local location."""
        if not self.is_local:
            raise LocationError(f"{self.uri} is not a local path")
        return Path(self.uri)

    @property
    def name(self) -> str:
        return posixpath.basename(self.uri)

    @property
    def bucket(self) -> str:
        return self.uri.partition("://")[2].partition("/")[0]

    @property
    def spark(self) -> str:
        """The path Spark reads and writes: ``s3a://`` for S3."""
        if self.is_local:
            return self.uri
        return f"{OBJECT_STORES[self.scheme]}://{self.uri.partition('://')[2]}"

    @property
    def delta_options(self) -> dict[str, str] | None:
        """delta-rs's storage options for this place (None: a local path needs none)."""
        return None if self.is_local else self.options.delta()

    @property
    def filesystem(self) -> pafs.FileSystem:
        """pyarrow's filesystem for this place; paths in it are ``fs_path``."""
        if self.is_local:
            return _local()
        if self.scheme == "s3":
            return _s3(self.options)
        import pyarrow.fs as pafs

        return pafs.FileSystem.from_uri(self.uri)[0]

    @property
    def fs_path(self) -> str:
        """This place as a path of ``filesystem``: ``bucket/key`` on a store."""
        return self.uri if self.is_local else self.uri.partition("://")[2]

    def make_directory(self) -> None:
        """Create this directory where directories exist: an object store has
        none, and a marker object would only be one more request and object."""
        if self.is_local:
            self.path.mkdir(parents=True, exist_ok=True)

    def configure(self, spark: SparkSession) -> None:
        """Give ``spark`` what reaching this place takes (a bucket's endpoint and
        credentials); its jars are the session's (``s3_jars``)."""
        if self.scheme == "s3":
            for key, value in self.options.s3a(self.bucket).items():
                spark.conf.set(key, value)


Where = Location | str | os.PathLike[str]
"""A place as an API takes it: a ``Location``, or a path or URI without settings."""


def as_location(where: Where) -> Location:
    return where if isinstance(where, Location) else Location.of(where)


@functools.cache
def _local() -> pafs.FileSystem:
    import pyarrow.fs as pafs  # not for a process that only reads configurations

    return pafs.LocalFileSystem()


@functools.lru_cache(maxsize=16)
def _s3(options: StoreOptions) -> pafs.FileSystem:
    """One client per set of settings: making one costs a credentials lookup."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(**options.pyarrow_s3())
