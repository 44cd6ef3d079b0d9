"""Artifact types declared from Python classes.

A dataclass or a pydantic model becomes an ``[[artifact_type]]`` entry of
the lake's ``sluice.toml``: each field a column, its annotation the column
type, ``Optional[...]`` a nullable column. The lake then treats the type as
if a person had written the entry (its own Delta table, ids hashed from the
identity columns, schema checks on every put and commit).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import sys
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._native import InvalidInput

# Annotation → column type; bool before int (a bool is an int in Python).
# No `bytes`: a binary column is given as text in JSON, which bytes are not.
_COLUMN_TYPES: Tuple[Tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "int64"),
    (float, "float64"),
    (str, "string"),
    (datetime.datetime, "timestamp"),
    (dict, "json"),
    (list, "json"),
)


def _fields(cls: type) -> List[Tuple[str, Any]]:
    """(name, annotation) of each field of a dataclass or pydantic model."""
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        return [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict):
        return [(name, field.annotation) for name, field in model_fields.items()]
    raise InvalidInput(
        f"{getattr(cls, '__name__', cls)!r}: an artifact type is declared from a dataclass or a "
        "pydantic model"
    )


def _column(owner: str, name: str, annotation: Any) -> Dict[str, Any]:
    nullable = False
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    union_types: Tuple[Any, ...] = (typing.Union,)
    if sys.version_info >= (3, 10):
        import types

        union_types += (types.UnionType,)
    if origin in union_types:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise InvalidInput(
                f"{owner}.{name}: a union of several types has no column type; "
                "Optional[X] is the one union a column takes"
            )
        nullable = len(rest) < len(args)
        annotation = rest[0]
        origin = typing.get_origin(annotation)
    base = origin or annotation
    for python_type, column_type in _COLUMN_TYPES:
        if isinstance(base, type) and issubclass(base, python_type):
            column = {"name": name, "type": column_type}
            if nullable:
                column["nullable"] = True
            return column
    known = ", ".join(t.__name__ for t, _ in _COLUMN_TYPES)
    raise InvalidInput(
        f"{owner}.{name}: type {annotation!r} has no column type (a column is one of {known}, "
        "or Optional of one)"
    )


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def declaration(
    cls: type,
    key: Optional[str],
    table: Optional[str],
    identity: Optional[Sequence[str]],
    partition_by_step: bool,
) -> Dict[str, Any]:
    """The ``[[artifact_type]]`` entry of ``cls``, as the lake takes it."""
    owner = getattr(cls, "__name__", repr(cls))
    columns = [_column(owner, name, annotation) for name, annotation in _fields(cls)]
    if not columns:
        raise InvalidInput(f"{owner}: an artifact type has at least one field")
    key = key or _snake(owner)
    entry: Dict[str, Any] = {
        "key": key,
        "table": table or f"artifacts/{key}s",
        "partition_by_step": partition_by_step,
        "columns": columns,
    }
    if identity is not None:
        entry["identity"] = list(identity)
    return entry


def as_record(value: Any) -> Any:
    """A dataclass instance or a pydantic model as the dict of its fields
    (times as RFC 3339 text); anything else unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        record = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(value, "model_dump") and not isinstance(value, type):
        record = value.model_dump()
    else:
        return value
    return {name: _plain(field) for name, field in record.items()}


def aware_text(value: datetime.datetime, what: str) -> str:
    """An aware time as RFC 3339 text; a naive one is refused (the lake
    keeps UTC and will not guess a zone)."""
    if value.tzinfo is None:
        raise InvalidInput(
            f"{what} {value.isoformat()}: a time without a timezone is ambiguous. "
            "Help: give one, e.g. datetime.now(timezone.utc)"
        )
    return value.isoformat()


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return aware_text(value, "time")
    return value


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def from_columns(record: Dict[str, Any], column_types: Dict[str, str]) -> Dict[str, Any]:
    """A declared type's row as the lake gives it (times in µs, json
    columns as text) with Python's values: aware datetimes and the values
    the json text holds."""
    out = dict(record)
    for name, column_type in column_types.items():
        value = out.get(name)
        if column_type == "timestamp" and isinstance(value, int):
            out[name] = _EPOCH + datetime.timedelta(microseconds=value)
        elif column_type == "json" and isinstance(value, str):
            out[name] = json.loads(value)
    return out
