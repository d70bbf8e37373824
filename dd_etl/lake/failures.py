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
PYARROW_KEY = re.compile(r"key '([^']+)' in bucket '([^']+)'")
URI = re.compile(r"\b(?:s3a?|gs|abfss?)://[^\s'\"]+")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
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
    text = next((t for t in error_texts(error) if any(s.search(t) for s in SIGNS)), None)
    return None if text is None else _failed(_place(text), text)


def _place(text: str) -> str:
    """The request's URL (object_store), the bucket and key (pyarrow) or the URI
    (Hadoop) that an error names."""
    if request := REQUEST.search(text):
        return request[1]
    if key := PYARROW_KEY.search(text):
        return f"s3://{key[2]}/{key[1]}"
    if uri := URI.search(text):
        return uri[0].rstrip(":,.;)")
    return "the pipeline's settings name"


def _failed(store: str, text: str) -> StoreError:
    said = ": ".join(_said(text)) or "no answer"
    return StoreError(
        store,
        f"failed a request ({said})",
        "whatever was being committed either landed or did not, and the next run reads "
        "the store again and continues from what it holds: run again",
    )


def _said(text: str) -> list[str]:
    """An error's first line and, where object_store nests it several lines under
    (``↳ Connection reset by peer``), its root cause."""
    lines = [ANSI.sub("", line).strip() for line in text.splitlines()]
    causes = [line.lstrip("↳ ") for line in lines if line.startswith("↳")]
    return [line for line in lines if line][:1] + causes[-1:]
