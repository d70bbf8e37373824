"""Schemas Spark inferred for a dataflow's operators, remembered between runs.

Building a collection asks Spark for each operator's schema (``Dataflow.infer``:
the operator applied to empty inputs, analysed). That is a few dozen calls into
Spark's driver per operator, a tenth of a second and more per SQL view: opening
a pipeline of 200 views took longer than an epoch of a small change. The
answer is a function of what the operator is (its kind and parameters), of its
inputs (their node ids and schemas), of the code building it and
of the Spark analysing it. So schemas are kept by a digest of the first two,
in a file whose ``context`` is the last two: another dd_etl or Spark, or a
setting that changes analysis, starts from nothing.

Only answers Spark gave are kept (an operator it refused is asked again), and
the file holds what the last build used, so definitions no longer in the
pipeline drop out. A lost or unreadable file only costs the asking again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from dd_etl.lake import Location, Where, as_location
from dd_etl.lake.documents import read_document, replace_document
from dd_etl.plan.fingerprint import canonical

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dd_etl.plan.nodes import Node

ANALYSIS_SETTINGS = (
    "spark.sql.ansi.enabled",
    "spark.sql.caseSensitive",
    "spark.sql.timestampType",
    "spark.sql.decimalOperations.allowPrecisionLoss",
    "spark.sql.legacy.allowNegativeScaleOfDecimal",
)
"""Session settings that change the types Spark's analysis gives."""


class InferredSchemas:
    """Operator schemas by what decides them; ``where`` None keeps them in memory."""

    def __init__(self, where: Where | None = None, context: str = "") -> None:
        self.where = None if where is None else as_location(where)
        self.context = context
        self._read = _read(self.where, context) if self.where is not None else {}
        self._known = dict(self._read)
        self._used: dict[str, str] = {}

    @staticmethod
    def key(decided_by: object, inputs: Sequence[Node]) -> str:
        """The digest of an operator's definition (``decided_by``: its kind and
        parameters) and its inputs: their ids and schemas (a source's id is its
        name alone, and its columns may change)."""
        text = canonical((decided_by, [(i.id, i.schema) for i in inputs]))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> StructType | None:
        known = self._known.get(key)
        if known is None:
            return None
        self._used[key] = known
        return StructType.fromJson(json.loads(known))

    def put(self, key: str, schema: StructType) -> None:
        self._used[key] = self._known[key] = schema.json()

    def save(self) -> None:
        """Keep the schemas this build used, if they are not what the file holds."""
        if self.where is None or self._used == self._read:
            return
        text = json.dumps({"context": self.context, "schemas": self._used})
        with contextlib.suppress(OSError):  # a cache: a warehouse not writable costs asking
            replace_document(self.where, text)


def analysis_context(spark: SparkSession) -> str:
    """What besides an operator's definition decides its schema: this code, the
    Spark version and the analysis settings of ``spark``."""
    settings = {name: spark.conf.get(name, None) for name in ANALYSIS_SETTINGS}
    return canonical((_code_digest(), spark.version, settings))


@functools.cache
def _code_digest() -> str:
    """A digest of dd_etl's source: a build from other code may infer otherwise."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for file in sorted(package.rglob("*.py")):
        digest.update(file.relative_to(package).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _read(where: Location, context: str) -> dict[str, str]:
    try:
        content = json.loads(read_document(where) or "{}")
    except (OSError, ValueError):
        return {}
    if not isinstance(content, dict) or content.get("context") != context:
        return {}
    schemas = content.get("schemas")
    return dict(schemas) if isinstance(schemas, dict) else {}
