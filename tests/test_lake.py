"""Locations and their settings, without a store: how a URI is told to each client,
what is shown of the settings, and a lease's rules over a local directory (the
same create-only objects an object store gives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dd_etl.lake import Location, StoreOptions
from dd_etl.lake.documents import read_document, replace_document
from dd_etl.lake.lease import Lease, LeaseHeld
from dd_etl.lake.location import LocationError
from dd_etl.lake.objects import create, listing

SETTINGS = StoreOptions.of(
    {
        "aws_endpoint_url": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_ALLOW_HTTP": "true",
    }
)


def test_a_uri_names_one_place_however_it_is_written(tmp_path: Path) -> None:
    assert Location.of("s3a://lake/wh/").uri == "s3://lake/wh"
    assert Location.of("s3://lake//wh") / "views/v" == Location.of("s3://lake/wh/views/v")
    assert Location.of("s3://lake/wh").spark == "s3a://lake/wh"
    assert Location.of("s3://lake/wh").fs_path == "lake/wh"
    assert Location.of(f"file://{tmp_path}/wh").path == tmp_path / "wh"
    assert Location.of(tmp_path / "wh").spark == str(tmp_path / "wh")
    assert Location.of("gs://b/x").spark == "gs://b/x"
    with pytest.raises(LocationError, match="unknown scheme hdfs://"):
        Location.of("hdfs://nn/x")
    with pytest.raises(LocationError, match="no bucket"):
        Location.of("s3:///x")


def test_settings_reach_every_client_in_its_own_words() -> None:
    assert SETTINGS.delta()["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    config, client = SETTINGS.object_store()
    assert config["aws_secret_access_key"] == "secret" and client == {"allow_http": True}
    assert SETTINGS.pyarrow_s3() == {
        "access_key": "key",
        "secret_key": "secret",
        "region": "eu-west-1",
        "endpoint_override": "127.0.0.1:9000",
        "scheme": "http",
    }
    s3a = SETTINGS.s3a("lake")
    assert s3a["fs.s3a.bucket.lake.endpoint"] == "http://127.0.0.1:9000"
    assert s3a["fs.s3a.bucket.lake.path.style.access"] == "true"
    assert s3a["fs.s3a.bucket.lake.connection.ssl.enabled"] == "false"
    assert s3a["fs.s3a.bucket.lake.secret.key"] == "secret"
    assert s3a["fs.s3a.bucket.lake.aws.credentials.provider"].endswith(
        "SimpleAWSCredentialsProvider"
    )


def test_secrets_are_never_shown() -> None:
    shown = SETTINGS.shown()
    assert shown["AWS_SECRET_ACCESS_KEY"] == "***" and shown["AWS_ACCESS_KEY_ID"] == "***"
    assert shown["AWS_REGION"] == "eu-west-1"
    assert "secret" not in repr(SETTINGS) and "secret" not in repr(Location.of("s3://b", SETTINGS))


def test_the_file_wins_over_the_environment_and_a_source_over_the_file() -> None:
    environment = StoreOptions.from_environment(
        {"AWS_DEFAULT_REGION": "us-east-2", "AWS_ACCESS_KEY_ID": "env", "HOME": "/root"}
    )
    assert environment.delta() == {"AWS_REGION": "us-east-2", "AWS_ACCESS_KEY_ID": "env"}
    pipeline = StoreOptions.of({"AWS_REGION": "eu-west-1"}).over(environment)
    source = StoreOptions.of({"AWS_ACCESS_KEY_ID": "own"}).over(pipeline)
    assert source.delta() == {"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "own"}


def test_a_document_is_replaced_whole(tmp_path: Path) -> None:
    where = Location.of(tmp_path / "deep" / "record.json")
    assert read_document(where) is None
    replace_document(where, "one")
    replace_document(where, "two")
    assert read_document(where) == "two"
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["record.json"]


def test_only_one_create_of_a_place_succeeds(tmp_path: Path) -> None:
    where = Location.of(tmp_path / "o" / "key")
    assert create(where, b"first")
    assert not create(where, b"second")
    assert where.path.read_bytes() == b"first"
    (stored,) = listing(Location.of(tmp_path / "o"))
    assert (stored.name, stored.size) == ("key", 5)


def test_a_lease_has_one_holder_until_its_term_is_over(tmp_path: Path) -> None:
    where = Location.of(tmp_path / "lease")
    now = [0.0]
    a = Lease(where, seconds=10, clock=lambda: now[0], holder="a")
    b = Lease(where, seconds=10, clock=lambda: now[0], holder="b")
    a.acquire()
    with pytest.raises(LeaseHeld, match="a, for 10 s more"):
        b.acquire()
    now[0] = 9
    assert a.renew()
    now[0] = 18
    with pytest.raises(LeaseHeld):
        b.acquire()
    now[0] = 19.5  # a stopped renewing a whole term ago
    b.acquire()
    assert not a.renew()
    b.release()
    a.acquire()
    # old generations are deleted as new ones are written: the lease stays small
    assert len(list(listing(where))) <= 3
