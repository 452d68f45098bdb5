"""JSON Schema as loglake sees it: the Spark type of each property of an object schema, and
whether a writer's schema can be read as the table's.

- ``string`` → string (``format: date-time`` → timestamp, ``format: date`` → date),
  ``integer`` → bigint, ``number`` → double, ``boolean`` → boolean; an ``enum`` of strings →
  string;
- ``object`` with ``properties`` → struct; an ``object`` with only ``additionalProperties``
  (a schema) → map<string, …>; ``array`` → array of its ``items``;
- a type list or an ``anyOf``/``oneOf`` with ``null`` and one other type → that type, nullable.

A property is required when the object lists it in ``required`` and it may not be null.
``$ref`` and unions of several non-null types are refused with the schema's path. No Spark
here: the CLI, the producer and the jobs share it.
"""

from __future__ import annotations

import json
from typing import Any

from loglake.core.config import RegistryField
from loglake.schemaregistry import refusal as fields_refusal

_SCALAR = {"integer": "bigint", "number": "double", "boolean": "boolean"}


def promotes(writer: str, reader: str) -> bool:
    """A value of type ``writer`` reads as ``reader``: an integer as a number."""
    return (writer, reader) == ("bigint", "double")


def _spark(p: Any, path: str) -> tuple[str, bool]:
    """(Spark SQL type, nullable) of the JSON Schema ``p`` at ``path``."""
    if not isinstance(p, dict):
        raise ValueError(f"{path}: not a schema object")
    if "$ref" in p:
        raise ValueError(f"{path}: $ref is not followed (inline the definition)")
    for union in ("anyOf", "oneOf"):
        if union in p:
            branches = p[union]
            rest = [b for b in branches if b.get("type") != "null"]
            if len(rest) != 1:
                raise ValueError(f"{path}: a union of several types has no single column type")
            t, _ = _spark(rest[0], path)
            return t, len(rest) < len(branches)
    kind = p.get("type")
    nullable = False
    if isinstance(kind, list):
        nullable = "null" in kind
        rest = [k for k in kind if k != "null"]
        if len(rest) != 1:
            raise ValueError(f"{path}: a type list of several types has no single column type")
        kind = rest[0]
    if kind is None and "enum" in p:
        kind = "string"
    if kind == "string":
        return {"date-time": "timestamp", "date": "date"}.get(p.get("format"), "string"), nullable
    if kind in _SCALAR:
        return _SCALAR[kind], nullable
    if kind == "array":
        return f"array<{_spark(p.get('items', {'type': 'string'}), path + '.items')[0]}>", nullable
    if kind == "object":
        props = p.get("properties")
        if props:
            inner = ",".join(f"{n}:{_spark(s, f'{path}.{n}')[0]}" for n, s in props.items())
            return f"struct<{inner}>", nullable
        extra = p.get("additionalProperties")
        if isinstance(extra, dict):
            return f"map<string,{_spark(extra, path + '.additionalProperties')[0]}>", nullable
        raise ValueError(f"{path}: an object without properties or an additionalProperties schema")
    raise ValueError(f"{path}: type {kind!r} has no column type")


def parse(schema_str: str) -> dict:
    schema = json.loads(schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "object" or not schema.get("properties"):
        raise ValueError("the schema of a topic's values must be a JSON Schema object with properties (they are the "
                         "table's columns)")
    return schema


def fields(schema_str: str) -> dict[str, RegistryField]:
    """The table's fields for the object schema ``schema_str``, in its order."""
    schema = parse(schema_str)
    required = set(schema.get("required", []))
    out = {}
    for name, p in schema["properties"].items():
        t, nullable = _spark(p, name)
        out[name] = RegistryField(type=t, required=name in required and not nullable,
                                  description=p.get("description", ""))
    return out


def refusal(reader: dict[str, RegistryField], writer_str: str) -> str | None:
    """Why records written with ``writer_str`` cannot be read as a table with fields ``reader``
    (None: they can): a field the table requires that the writer may leave out, or a field of
    another type (an integer is read as a number)."""
    return fields_refusal(reader, fields(writer_str), promotes)
