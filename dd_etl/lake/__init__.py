"""Where a pipeline's tables live: a local directory or an object store.

A ``Location`` is a URI with the settings that reach it (``StoreOptions``). It
alone decides how the URI is opened: by delta-rs (storage options), by pyarrow
(a filesystem), by Spark (an ``s3a://`` path and its Hadoop settings), and for
single objects (a create-only put, a listing with ETags) by object_store. No
other module builds a path by hand or knows which store it is talking to.
"""

from dd_etl.lake.location import Location, Where, as_location
from dd_etl.lake.options import StoreOptions

__all__ = ["Location", "StoreOptions", "Where", "as_location"]
