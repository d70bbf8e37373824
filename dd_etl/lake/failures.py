"""An object store's failure, told as what to fix, wherever it surfaces: in
delta-rs's, object_store's, pyarrow's or Hadoop's words.

Every write dd_etl makes to a store is a create-only put or a new object, and
a run reads the logs again before it commits: after a failure nothing needs
undoing, and the next run continues from what the store holds. So a store's
failure is the user's to act on (``StoreError``, exit status 5), never a bug.
"""

from __future__ import annotations

import re

from dd_etl.errors import StoreError, error_texts
from dd_etl.lake.location import Location

REQUEST = re.compile(r"Error performing (?:GET|PUT|HEAD|DELETE|POST) (https?://[^\s?]+)")
"""object_store's (so delta-rs's) account of a failed request, with its URL."""
SIGNS = (
    REQUEST,
    re.compile(r"Generic S3 error"),
    re.compile(r"AWS Error [A-Z_]+"),  # pyarrow's
    re.compile(r"org\.apache\.hadoop\.fs\.s3a\.\w+Exception"),  # Spark's s3a
    re.compile(r"software\.amazon\.awssdk\.[\w.]+Exception"),
)


def refused(where: Location, error: BaseException) -> StoreError:
    """``error`` from a request to ``where``'s store, said as what to fix."""
    text = "\n".join(error_texts(error))
    name = type(error).__name__
    if "NoSuchBucket" in text:
        return StoreError(
            where.uri, f"has no bucket {where.bucket!r}", "create it, or name another bucket"
        )
    if name in ("PermissionDeniedError", "UnauthenticatedError") or re.search(
        r"\b403\b|Forbidden|SignatureDoesNotMatch|InvalidAccessKeyId", text
    ):
        return StoreError(
            where.uri,
            "refused the credentials given",
            "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (the pipeline file's "
            "`storage_options`, or the environment)",
        )
    if "error sending request" in text or "Connection refused" in text:
        endpoint = where.options.get("AWS_ENDPOINT_URL") or "its default endpoint"
        return StoreError(
            where.uri, f"does not answer at {endpoint}", "check AWS_ENDPOINT_URL and that it is up"
        )
    return _failed(where.uri, text)


def store_failure(error: BaseException) -> StoreError | None:
    """``error`` as a store's failure, if it is one: named by the request's URL
    where the error gives it."""
    if isinstance(error, StoreError):
        return error
    text = "\n".join(error_texts(error))
    if not any(sign.search(text) for sign in SIGNS):
        return None
    request = REQUEST.search(text)
    return _failed(request[1] if request else "dd_etl talked to", text)


def _failed(store: str, text: str) -> StoreError:
    said = next((line.strip() for line in text.splitlines() if line.strip()), "no answer")
    return StoreError(
        store,
        f"failed a request ({said})",
        "whatever was being committed either landed or did not, and the next run reads "
        "the store again and continues from what it holds: run again",
    )
