"""Single objects, where their store's guarantees matter: a put that only creates
(the one write two racing writers cannot both win) and listings that tell a
rewritten object from the one seen before (its ETag).

Object stores are reached through object_store, the library delta-rs commits
with, so both honour the same settings and make the same conditional requests
(``If-None-Match: *``). A local directory gives the same guarantees through
exclusive creation.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError
from obstore.store import from_url

from dd_etl.lake.location import Location
from dd_etl.lake.options import StoreOptions


@dataclass(frozen=True)
class StoredObject:
    """An object as a listing shows it: enough to tell whether it changed."""

    name: str  # relative to the listed place
    size: int
    version: str  # the ETag on a store; the modification time (ns) on a local disk


def create(where: Location, data: bytes) -> bool:
    """Store ``data`` at ``where`` unless something is there already; whether it was
    stored. Of writers racing for one place exactly one gets True, and a reader
    sees the object whole or not at all (on a local disk it is written aside and
    linked into place, which fails if the name is taken)."""
    if where.is_local:
        where.path.parent.mkdir(parents=True, exist_ok=True)
        aside = where.path.with_name(f".{where.path.name}.{uuid.uuid4().hex}.tmp")
        aside.write_bytes(data)
        try:
            os.link(aside, where.path)
        except FileExistsError:
            return False
        finally:
            aside.unlink()
        return True
    store, key = _store_of(where)
    try:
        obstore.put(store, key, data, mode="create")
    except AlreadyExistsError:
        return False
    return True


def read(where: Location) -> bytes | None:
    """The object's bytes; None when there is none."""
    if where.is_local:
        try:
            return where.path.read_bytes()
        except FileNotFoundError:
            return None
    store, key = _store_of(where)
    try:
        return bytes(obstore.get(store, key).bytes())
    except (NotFoundError, FileNotFoundError):
        return None


def delete(where: Location) -> None:
    """Remove the object, if it is there."""
    if where.is_local:
        where.path.unlink(missing_ok=True)
        return
    store, key = _store_of(where)
    with contextlib.suppress(NotFoundError, FileNotFoundError):
        obstore.delete(store, key)


def stat(where: Location) -> StoredObject | None:
    """The object at ``where`` as a listing would show it (one HEAD on a store);
    None when there is none."""
    if where.is_local:
        try:
            found = os.stat(where.path)
        except FileNotFoundError:
            return None
        return StoredObject(where.path.name, found.st_size, str(found.st_mtime_ns))
    store, key = _store_of(where)
    try:
        meta = obstore.head(store, key)
    except (NotFoundError, FileNotFoundError):
        return None
    return _stored(meta, key.rpartition("/")[0] + "/")


def listing(where: Location) -> Iterator[StoredObject]:
    """The objects under ``where`` (all levels), with their versions."""
    if where.is_local:
        root = where.path
        for directory, _, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                stat = os.stat(path)
                yield StoredObject(os.path.relpath(path, root), stat.st_size, str(stat.st_mtime_ns))
        return
    store, key = _store_of(where)
    prefix = key.rstrip("/") + "/" if key else None
    for chunk in obstore.list(store, prefix):
        for meta in chunk:
            yield _stored(meta, prefix or "")


def _stored(meta: Any, prefix: str) -> StoredObject:
    name = str(meta["path"]).removeprefix(prefix)
    version = meta.get("e_tag") or f"{meta['last_modified'].isoformat()}-{meta['size']}"
    return StoredObject(name, int(meta["size"]), str(version))


def _store_of(where: Location) -> tuple[Any, str]:
    """The bucket's store and the object's key in it."""
    key = where.fs_path.removeprefix(where.bucket).lstrip("/")
    return _bucket(f"{where.scheme}://{where.bucket}", where.options), key


@functools.lru_cache(maxsize=16)
def _bucket(url: str, options: StoreOptions) -> Any:
    config, client = options.object_store()
    made: Any = from_url  # its overloads are per store; the settings are the user's
    return made(url, config=config, client_options=client)
