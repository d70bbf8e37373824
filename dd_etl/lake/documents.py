"""Small documents kept whole (a tick's record, a cache of schemas): read, and
replaced so that a reader sees the old one or the new one, never a mix.

On a local disk that is a temporary file renamed over the old one; an object
store's PUT of a whole object is atomic already.
"""

from __future__ import annotations

import os
import uuid

from dd_etl.lake.location import Location


def read_document(where: Location) -> str | None:
    """The document's text; None when there is none."""
    try:
        with where.filesystem.open_input_stream(where.fs_path) as stream:
            data: bytes = stream.read()
    except FileNotFoundError:
        return None
    return data.decode()


def replace_document(where: Location, text: str) -> None:
    data = text.encode()
    if not where.is_local:
        with where.filesystem.open_output_stream(where.fs_path) as stream:
            stream.write(data)
        return
    path = where.path
    path.parent.mkdir(parents=True, exist_ok=True)
    # unique per writer: two writers in one process (a server) may replace at once
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
