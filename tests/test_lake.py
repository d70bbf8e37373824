"""Locations and their settings, without a store: how a URI is told to each client,
what is shown of the settings, and a lease's rules over a local directory (the
same create-only objects an object store gives)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dd_etl.errors import StoreError
from dd_etl.lake import Location, StoreOptions
from dd_etl.lake.documents import read_document, replace_document
from dd_etl.lake.failures import store_failure
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


OBJECT_STORE_RESET = (
    "Generic S3 error\n"
    "  \x1b[31m↳\x1b[0m Error performing PUT http://127.0.0.1:9000/b/wh/_delta_log/"
    "00000000000000000004.json in 4ms - HTTP error\n"
    "   \x1b[31m↳\x1b[0m error sending request\n"
    "    \x1b[31m↳\x1b[0m Connection reset by peer (os error 104)\n"
)


@pytest.mark.parametrize(
    ("error", "place", "said"),
    [
        (
            OSError(OBJECT_STORE_RESET),
            "http://127.0.0.1:9000/b/wh/_delta_log/00000000000000000004.json",
            "(Generic S3 error: Connection reset by peer (os error 104))",
        ),
        (
            OSError(
                "When uploading part for key 'wh/x.parquet' in bucket 'b': AWS Error "
                "NETWORK_CONNECTION during UploadPart operation: curlCode: 28"
            ),
            "s3://b/wh/x.parquet",
            "AWS Error NETWORK_CONNECTION during UploadPart",
        ),
        (
            RuntimeError(
                "org.apache.hadoop.fs.s3a.AWSBadRequestException: getFileStatus on "
                "s3a://b/wh/views/v/part-0.parquet: 400"
            ),
            "s3a://b/wh/views/v/part-0.parquet",
            "AWSBadRequestException",
        ),
    ],
)
def test_a_stores_failure_names_the_place_and_the_root_cause(
    error: Exception, place: str, said: str
) -> None:
    wrapped = RuntimeError("the run failed")
    wrapped.__cause__ = error
    found = store_failure(wrapped)
    assert isinstance(found, StoreError) and found.exit_code == 5
    assert found.store == place
    assert said in str(found) and "run again" in str(found)
    assert "\x1b" not in str(found) and "↳" not in str(found)


def test_other_errors_are_not_a_stores() -> None:
    assert store_failure(ValueError("column 'x' not found")) is None


def test_a_lease_of_a_process_that_ended_on_this_machine_is_free_at_once(
    tmp_path: Path,
) -> None:
    where = Location.of(tmp_path / "lease")
    take = (
        "import sys, time\n"
        "from dd_etl.lake import Location\n"
        "from dd_etl.lake.lease import Lease\n"
        f"Lease(Location.of({str(where.path)!r})).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[1]))\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", take, "60"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    with pytest.raises(LeaseHeld, match=f"process {holder.pid} on "):
        Lease(where).acquire()  # alive, its term not over
    holder.kill()
    holder.wait()
    Lease(where).acquire()  # killed, and this machine can tell: no term to wait out
    other_machine = Lease(where).current()
    assert other_machine is not None and other_machine.process is not None
    # another machine's process (another boot), another container's (another
    # process-id namespace) and one written by a version that named none are
    # trusted until their term is over
    here = other_machine.process
    elsewhere = [
        {"boot": "another", "namespace": here.namespace, "pid": 999999, "started": 1},
        {"boot": here.boot, "namespace": "pid:[1]", "pid": 999999, "started": 1},
        None,
    ]
    for generation, process in enumerate(elsewhere, other_machine.generation + 1):
        Path(where.path / f"{generation:020d}.json").write_text(
            json.dumps(
                {
                    "holder": f"process {generation} elsewhere",
                    "token": "t",
                    "expires": time.time() + 60,
                    "process": process,
                }
            )
        )
        with pytest.raises(LeaseHeld, match=f"process {generation} elsewhere"):
            Lease(where).acquire()
