"""What dd_etl relies on of an object store, checked against a real S3 server: a
conditional PUT (``If-None-Match: *``) lets exactly one of many racing writers
create a key, and a listing gives each object's size and ETag."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import AlreadyExistsError
from obstore.store import S3Store

from tests.support.s3_server import S3Server

if TYPE_CHECKING:
    from obstore.store import S3Config

WRITERS = 16


def _store(server: S3Server, bucket: str) -> S3Store:
    config: S3Config = {
        "endpoint": server.endpoint,
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
        "region": server.region,
    }
    return S3Store(bucket, config=config, client_options={"allow_http": True})


def test_racing_conditional_puts_of_one_key_let_exactly_one_win(s3_server: S3Server) -> None:
    store = _store(s3_server, s3_server.bucket())
    key = "_delta_log/00000000000000000001.json"
    start = threading.Barrier(WRITERS)

    def put(writer: int) -> bytes | AlreadyExistsError:
        data = f"written by {writer}".encode()
        start.wait()
        try:
            obstore.put(store, key, data, mode="create")
        except AlreadyExistsError as e:
            return e
        return data

    with ThreadPoolExecutor(WRITERS) as pool:
        outcomes = list(pool.map(put, range(WRITERS)))

    won = [o for o in outcomes if isinstance(o, bytes)]
    assert len(won) == 1, outcomes
    assert all(isinstance(o, AlreadyExistsError) for o in outcomes if o is not won[0])
    assert obstore.get(store, key).bytes().to_bytes() == won[0]


def test_a_listing_gives_each_objects_size_and_etag(s3_server: S3Server) -> None:
    store = _store(s3_server, s3_server.bucket())
    obstore.put(store, "table/part-0.parquet", b"x" * 1234)
    listed = [meta for batch in obstore.list(store, "table") for meta in batch]
    assert [(m["path"], m["size"]) for m in listed] == [("table/part-0.parquet", 1234)]
    assert listed[0]["e_tag"]
