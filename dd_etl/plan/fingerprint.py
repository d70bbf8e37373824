"""Structural names for dataflow nodes.

A node's id is a digest of its operator, parameters, output schema and the ids
of its inputs. So the same sub-plan built twice (by two views, or by the same
pipeline on its next run) gets the same id and therefore the same trace, while
a changed definition gets new traces instead of silently continuing old ones.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from types import BuiltinFunctionType, CodeType, FunctionType, ModuleType
from typing import Any

from pyspark.sql import Column
from pyspark.sql.types import DataType

from dd_etl.errors import PlanError
from dd_etl.plan.column_names import ColumnText

DIGEST_CHARS = 16
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""How a default ``repr`` shows an object: by its address, different in every process."""


def canonical(value: Any) -> str:
    """A stable text for a parameter: the same definition always gives the same text."""
    if isinstance(value, ColumnText):
        return f"col({value.fingerprint})"
    if isinstance(value, Column):
        return f"col({value})"
    if isinstance(value, DataType):
        return value.json()
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{canonical(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, tuple | list):
        return "(" + ",".join(canonical(v) for v in value) + ")"
    if isinstance(value, set | frozenset):
        return "{" + ",".join(sorted(canonical(v) for v in value)) + "}"
    if callable(value):
        return function_id(value)
    text = repr(value)
    if _ADDRESS.search(text):
        raise PlanError(f"no stable value: {text}")
    return text


def function_id(function: Callable[..., Any], version: str | None = None) -> str:
    """What a Python function computes, as stable text: its code (nested functions
    and comprehensions included), the values it captures, its defaults, and the
    globals it reads. The same function gives the same text in every process;
    a function that captures or reads another value gives another.

    With ``version`` the function is named by it instead, unread. Without one, a
    function reading something whose value has no stable text (an open file, a
    Spark session, an object without a value-based ``repr``) is refused."""
    name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
    if version is not None:
        return f"fn({name}@{version})"
    try:
        body = _function_text(function, set())
    except PlanError as e:
        raise PlanError(
            f"cannot tell what {name} computes ({e}); pass version='...' to name the "
            f"definition yourself, and change it whenever the function changes"
        ) from None
    return f"fn({name}:{hashlib.sha256(body.encode()).hexdigest()[:16]})"


def _function_text(function: Any, visiting: set[int]) -> str:
    if id(function) in visiting:
        return "recursion"  # a function reaching itself: its text is already there
    code = getattr(function, "__code__", None)
    if code is None:
        if isinstance(function, BuiltinFunctionType | type):
            return f"{function.__module__}.{function.__qualname__}"
        raise PlanError(f"{type(function).__name__} object is not a plain function")
    visiting = visiting | {id(function)}
    cells = function.__closure__ or ()
    captured = {
        var: _value_text(cell.cell_contents, visiting)
        for var, cell in zip(code.co_freevars, cells, strict=True)
    }
    scope = getattr(function, "__globals__", {})
    read = {g: _value_text(scope[g], visiting) for g in sorted(_names(code)) if g in scope}
    return canonical(
        (
            _code_text(code),
            captured,
            _value_text(function.__defaults__, visiting),
            _value_text(function.__kwdefaults__, visiting),
            read,
        )
    )


def _value_text(value: Any, visiting: set[int]) -> str:
    if isinstance(value, ModuleType):
        return f"module({value.__name__})"
    if isinstance(value, FunctionType):
        return _function_text(value, visiting)
    if isinstance(value, BuiltinFunctionType | type):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, tuple | list):
        return "(" + ",".join(_value_text(v, visiting) for v in value) + ")"
    if isinstance(value, Mapping):
        items = sorted((repr(k), _value_text(v, visiting)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    return canonical(value)


def _code_text(code: CodeType) -> str:
    """Bytecode, names and constants; nested code (inner functions, lambdas,
    comprehensions) by its own text, never by a ``repr`` that holds an address."""
    consts = [_code_text(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return canonical((code.co_code.hex(), code.co_names, code.co_varnames, tuple(consts)))


def _names(code: CodeType) -> set[str]:
    """Global names the code (and code nested in it) may read."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, CodeType):
            names |= _names(c)
    return names


def node_id(operator: str, inputs: tuple[str, ...], schema: DataType, /, **params: Any) -> str:
    text = canonical((operator, inputs, schema, params))
    return f"{operator}_{hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]}"
