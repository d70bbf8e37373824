"""What a run asks of an object store before it writes anything: that it answers,
takes the credentials, has the bucket, and refuses a second create-only write of
one object. Every commit dd_etl makes is such a write (delta-rs's, the tick's
lease): a store that let both of two writers win would let two runs both
commit one version of a trace, and one of them would be lost.

Each refusal is one error naming the store and the fix (``StoreError``).
"""

from __future__ import annotations

import uuid

from dd_etl.errors import StoreError
from dd_etl.lake import objects
from dd_etl.lake.failures import refused
from dd_etl.lake.location import Location

PROBES = "_pipeline/probes"


def reachable(where: Location) -> None:
    """Check that ``where``'s store answers, takes the credentials and has the
    bucket, by a listing: what every command asks before it reads anything."""
    if where.is_local:
        return
    try:
        next(iter(objects.listing(where / PROBES)), None)
    except Exception as e:
        raise refused(where, e) from None


def probe(warehouse: Location, unsafe: bool = False) -> None:
    """Check ``warehouse``'s store as above (a local disk needs nothing); ``unsafe``
    accepts a store without create-only writes."""
    if warehouse.is_local:
        return
    key = warehouse / PROBES / uuid.uuid4().hex
    try:
        created = objects.create(key, b"first")
        again = objects.create(key, b"second")
        objects.delete(key)
    except Exception as e:
        raise refused(warehouse, e) from None
    if created and again and not unsafe:
        raise StoreError(
            warehouse.uri,
            "let a second create-only write of one object succeed: it does not support "
            "conditional writes (If-None-Match), so two writers could both commit",
            "use a store that does (AWS S3, and most S3-compatible servers, do), or set "
            "`allow_unsafe_store: true` in the pipeline file and never run two writers at once",
        )
