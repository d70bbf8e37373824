"""The settings that reach an object store, given once and told to each client.

Users write them with the names delta-rs and object_store use
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ...): the
pipeline file's ``storage_options``, over the standard AWS environment
variables, under a source's own. Each client that opens a store gets the same
settings in its own words: delta-rs as they are, object_store in lower case,
pyarrow as ``S3FileSystem`` arguments, Spark's ``s3a`` as per-bucket Hadoop
settings. Secrets never appear in what is shown (``shown``, ``repr``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

SECRET = re.compile(r"secret|password|token|credential|access_key|private|sas|signature", re.I)

ENVIRONMENT = {
    # what every AWS tool reads, by the name delta-rs gives it
    "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN": "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION": "AWS_REGION",
    "AWS_REGION": "AWS_REGION",
    "AWS_ENDPOINT_URL": "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3": "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP": "AWS_ALLOW_HTTP",
}
"""Environment variables honoured when no file names them, later ones winning."""

S3A = "org.apache.hadoop.fs.s3a"


@dataclass(frozen=True)
class StoreOptions:
    """Settings by their delta-rs names (upper case), hashable so that a client
    made for them can be kept."""

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, str]) -> StoreOptions:
        return cls(tuple(sorted((k.upper(), str(v)) for k, v in values.items())))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StoreOptions:
        env = os.environ if environ is None else environ
        found = {ours: env[name] for name, ours in ENVIRONMENT.items() if env.get(name)}
        return cls.of(found)

    def over(self, base: StoreOptions) -> StoreOptions:
        """These settings, the ones of ``base`` where these say nothing."""
        return StoreOptions.of(dict(base.items) | dict(self.items))

    def get(self, name: str) -> str | None:
        return dict(self.items).get(name)

    def shown(self) -> dict[str, str]:
        """The settings as ``explain`` and ``status`` may show them."""
        return {k: "***" if SECRET.search(k) else v for k, v in self.items}

    def __repr__(self) -> str:
        return f"StoreOptions({self.shown()})"

    # ------------------------------------------------------------ each client

    def delta(self) -> dict[str, str]:
        """delta-rs's storage options."""
        return dict(self.items)

    def object_store(self) -> tuple[dict[str, str], dict[str, bool]]:
        """object_store's configuration and client options."""
        config = {k.lower(): v for k, v in self.items if k != "AWS_ALLOW_HTTP"}
        client = {"allow_http": True} if self._allows_http() else {}
        return config, client

    def pyarrow_s3(self) -> dict[str, str]:
        """Arguments of pyarrow's ``S3FileSystem``."""
        named = {
            "access_key": self.get("AWS_ACCESS_KEY_ID"),
            "secret_key": self.get("AWS_SECRET_ACCESS_KEY"),
            "session_token": self.get("AWS_SESSION_TOKEN"),
            "region": self.get("AWS_REGION"),
        }
        endpoint = self.get("AWS_ENDPOINT_URL")
        if endpoint:
            scheme, _, host = endpoint.rpartition("://")
            named |= {"endpoint_override": host.rstrip("/"), "scheme": scheme or "https"}
        return {k: v for k, v in named.items() if v}

    def s3a(self, bucket: str) -> dict[str, str]:
        """Hadoop's ``s3a`` settings for ``bucket`` alone, as Spark SQL settings:
        set at run time they reach the filesystem Spark opens for that bucket (the
        ``spark.hadoop.`` prefix only counts when a session starts)."""
        prefix = f"fs.s3a.bucket.{bucket}."
        conf: dict[str, str] = {}
        endpoint = self.get("AWS_ENDPOINT_URL")
        if endpoint:
            conf["endpoint"] = endpoint
            conf["path.style.access"] = str(self._path_style()).lower()
            conf["connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
        region = self.get("AWS_REGION")
        if region:
            conf["endpoint.region"] = region
        key, secret = self.get("AWS_ACCESS_KEY_ID"), self.get("AWS_SECRET_ACCESS_KEY")
        token = self.get("AWS_SESSION_TOKEN")
        if key and secret:
            conf |= {"access.key": key, "secret.key": secret}
            provider = "Temporary" if token else "Simple"
            conf["aws.credentials.provider"] = f"{S3A}.{provider}AWSCredentialsProvider"
            if token:
                conf["session.token"] = token
        return {prefix + k: v for k, v in conf.items()}

    def _allows_http(self) -> bool:
        return (self.get("AWS_ALLOW_HTTP") or "").lower() == "true"

    def _path_style(self) -> bool:
        """Buckets as a path of the endpoint, as S3-compatible servers want, unless
        the settings ask for virtual-hosted ones."""
        style = (self.get("AWS_S3_ADDRESSING_STYLE") or "").lower()
        hosted = (self.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") or "").lower() == "true"
        return not (hosted or style == "virtual")
