"""A pipeline file moved onto the tests' S3 server: its warehouse, its sources'
data and its sinks in one bucket, its credentials taken from the environment
(as a user's file would), and nothing else on the local disk."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from dd_etl.lake import StoreOptions
from tests.support.s3_server import S3Server

KEY_ENV, SECRET_ENV = "DD_ETL_TEST_S3_KEY", "DD_ETL_TEST_S3_SECRET"


def credentials(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's keys where ``on_store``'s files read them (child processes too)."""
    monkeypatch.setenv(KEY_ENV, server.access_key)
    monkeypatch.setenv(SECRET_ENV, server.secret_key)


def on_store(pipeline: Path, server: S3Server, bucket: str, endpoint: str = "") -> Path:
    """``pipeline`` (a file naming ``warehouse: warehouse``, sources under ``data/``
    and sinks under ``out/``) rewritten in place to name ``bucket`` instead,
    reached at ``endpoint`` (the server's unless given)."""
    text = pipeline.read_text()
    text = text.replace("warehouse: warehouse", f"warehouse: s3://{bucket}/warehouse")
    text = text.replace("path: data/", f"path: s3a://{bucket}/data/")
    text = text.replace("path: out/", f"path: s3://{bucket}/out/")
    options = {
        "AWS_ENDPOINT_URL": endpoint or server.endpoint,
        "AWS_REGION": server.region,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": f"${{{KEY_ENV}}}",
        "AWS_SECRET_ACCESS_KEY": f"${{{SECRET_ENV}}}",
    }
    text += "storage_options:\n" + "".join(f"  {k}: '{v}'\n" for k, v in options.items())
    pipeline.write_text(text)
    return pipeline


def filesystem(server: S3Server) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**StoreOptions.of(server.storage_options()).pyarrow_s3())


def upload(data: Path, server: S3Server, bucket: str) -> None:
    """The source data written locally under ``data``, copied to ``bucket/data`` as
    it is now."""
    pafs.copy_files(str(data), f"{bucket}/data", destination_filesystem=filesystem(server))


def keys(server: S3Server, bucket: str) -> list[str]:
    """Every object in ``bucket``."""
    found = filesystem(server).get_file_info(pafs.FileSelector(bucket, recursive=True))
    return [f.path.removeprefix(f"{bucket}/") for f in found if f.type == pafs.FileType.File]
