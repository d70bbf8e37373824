"""Names and types as Spark SQL text.

Pure string building, beneath everything that speaks SQL to Spark: the drivers
(``spark_driver``) quote names too, and ``sql_text``, which runs SQL text
through them, builds on this.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, MapType, StructType


def quote(name: str) -> str:
    """A column name as SQL text."""
    return "`" + name.replace("`", "``") + "`"


def cast(expr: str, kind: DataType) -> str:
    return f"CAST({expr} AS {type_text(kind)})"


def type_text(kind: DataType) -> str:
    """A type as SQL text; nested field names are quoted (``simpleString`` does not)."""
    if isinstance(kind, StructType):
        fields = ", ".join(f"{quote(f.name)}: {type_text(f.dataType)}" for f in kind.fields)
        return f"STRUCT<{fields}>"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{type_text(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"MAP<{type_text(kind.keyType)}, {type_text(kind.valueType)}>"
    return kind.simpleString()
