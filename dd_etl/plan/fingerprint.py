"""Structural names for dataflow nodes.

A node's id is a digest of its operator, parameters, output schema and the ids
of its inputs. So the same sub-plan built twice (by two views, or by the same
pipeline on its next run) gets the same id and therefore the same trace, while
a changed definition gets new traces instead of silently continuing old ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column
from pyspark.sql.types import DataType

DIGEST_CHARS = 16


def canonical(value: Any) -> str:
    """A stable text for a parameter: the same definition always gives the same text."""
    if isinstance(value, Column):
        return f"col({value})"
    if isinstance(value, DataType):
        return value.json()
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{canonical(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, tuple | list):
        return "(" + ",".join(canonical(v) for v in value) + ")"
    if callable(value):
        code = getattr(value, "__code__", None)
        text = code.co_code + repr(code.co_consts).encode() if code is not None else b""
        body = hashlib.sha256(text).hexdigest()[:8]
        return f"fn({value.__module__}.{value.__qualname__}:{body})"
    return repr(value)


def node_id(operator: str, inputs: tuple[str, ...], schema: DataType, /, **params: Any) -> str:
    text = canonical((operator, inputs, schema, params))
    return f"{operator}_{hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]}"
