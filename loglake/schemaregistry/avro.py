"""Avro schemas as loglake sees them: the Spark type of each field, whether a writer's
schema can be read as the table's, and the Avro schema of a JSON dataset's conf.

The Spark types are those Spark's own Avro reader (``from_avro``, spark-avro) gives, so the
columns the tables are created with are the columns decoding fills:

- primitives: boolean, int, long → bigint, float, double, bytes/fixed → binary, string/enum → string;
- logical types: date, timestamp-millis/-micros → timestamp, local-timestamp-* → timestamp_ntz,
  decimal → decimal(p,s);
- record → struct, array → array, map → map<string, …>;
- a union with null → the other branch, nullable; [int, long] → bigint; [float, double] → double;
  other unions → struct<member0, member1, …>.

No Spark here: the CLI, the producer and the jobs share it.
"""

from __future__ import annotations

import json
from typing import Any

from loglake.core.config import Dataset, RegistryField

_PRIMITIVE = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
              "bytes": "binary", "string": "string", "null": "void"}
# Reading a writer's type as the reader's: Avro's promotions (the specification's "schema resolution").
_PROMOTES = {("int", "bigint"), ("int", "float"), ("int", "double"), ("bigint", "float"), ("bigint", "double"),
             ("float", "double"), ("string", "binary"), ("binary", "string")}


class _Types:
    """Named types seen so far (a record may name a type defined earlier in the schema)."""

    def __init__(self) -> None:
        self.named: dict[str, str] = {}

    def spark(self, t: Any, namespace: str = "") -> tuple[str, bool]:
        """(Spark SQL type, nullable) of Avro type ``t``."""
        if isinstance(t, list):
            return self._union(t, namespace)
        if isinstance(t, str):
            if t in _PRIMITIVE:
                return _PRIMITIVE[t], t == "null"
            full = t if "." in t or not namespace else f"{namespace}.{t}"
            for name in (full, t):
                if name in self.named:
                    return self.named[name], False
            raise ValueError(f"type {t!r} is not defined before its use")
        kind = t.get("type")
        logical = t.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            out = f"decimal({int(t['precision'])},{int(t.get('scale', 0))})"
        elif logical == "date" and kind == "int":
            out = "date"
        elif logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            out = "timestamp"
        elif logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
            out = "timestamp_ntz"
        elif kind == "record":
            ns = t.get("namespace", namespace)
            name = t["name"] if "." in t["name"] or not ns else f"{ns}.{t['name']}"
            self.named[name] = "struct<>"  # a recursive record: spark-avro refuses it too
            inner = []
            for f in t["fields"]:
                ft, _ = self.spark(f["type"], ns)
                inner.append(f"{f['name']}:{ft}")
            out = f"struct<{','.join(inner)}>"
            self.named[name] = out
            return out, False
        elif kind == "enum":
            out = "string"
            self._name(t, namespace, out)
        elif kind == "fixed":
            out = "binary"
            self._name(t, namespace, out)
        elif kind == "array":
            out = f"array<{self.spark(t['items'], namespace)[0]}>"
        elif kind == "map":
            out = f"map<string,{self.spark(t['values'], namespace)[0]}>"
        elif isinstance(kind, (str, list, dict)):
            return self.spark(kind, namespace)  # {"type": "string"}, {"type": {...}}
        else:
            raise ValueError(f"not an Avro type: {json.dumps(t)[:120]}")
        return out, False

    def _name(self, t: dict, namespace: str, out: str) -> None:
        ns = t.get("namespace", namespace)
        self.named[t["name"] if "." in t["name"] or not ns else f"{ns}.{t['name']}"] = out

    def _union(self, branches: list, namespace: str) -> tuple[str, bool]:
        nullable = any(b == "null" for b in branches)
        rest = [self.spark(b, namespace)[0] for b in branches if b != "null"]
        if not rest:
            return "void", True
        if len(rest) == 1:
            return rest[0], nullable
        if set(rest) <= {"int", "bigint"}:
            return "bigint", nullable
        if set(rest) <= {"float", "double"}:
            return "double", nullable
        return "struct<" + ",".join(f"member{i}:{t}" for i, t in enumerate(rest)) + ">", nullable


def promotes(writer: str, reader: str) -> bool:
    """A value of type ``writer`` reads as ``reader`` (Avro's promotions; JSON's integer as number)."""
    return (writer, reader) in _PROMOTES


def parse(schema_str: str) -> dict:
    schema = json.loads(schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema of a topic's values must be an Avro record (its fields are the table's columns)")
    return schema


def fields(schema_str: str) -> dict[str, RegistryField]:
    """The table's fields for the Avro record ``schema_str``, in its order: the Spark type of
    each, ``required`` unless it may be null or has a default."""
    schema = parse(schema_str)
    types = _Types()
    ns = schema.get("namespace", "")
    out = {}
    for f in schema["fields"]:
        t, nullable = types.spark(f["type"], ns)
        out[f["name"]] = RegistryField(type=t, required=not nullable and "default" not in f,
                                       description=f.get("doc", ""))
    return out


def refusal(reader: dict[str, RegistryField], writer_str: str) -> str | None:
    """Why records written with ``writer_str`` cannot be read as a table with fields ``reader``
    (None: they can). Avro's resolution: each reader field is the writer's (the same type or
    one Avro promotes to it), or absent from the writer and then null or its default."""
    from loglake.schemaregistry import refusal as fields_refusal

    return fields_refusal(reader, fields(writer_str), promotes)


# --- a JSON dataset's conf as an Avro schema (``loglake produce --format avro``) ------------

_CONF_TYPES: dict[str, Any] = {"string": "string", "long": "long", "double": "double", "boolean": "boolean",
                               "timestamp": {"type": "long", "logicalType": "timestamp-millis"}}


def schema_of(ds: Dataset) -> str:
    """The Avro record schema of ``ds``'s conf fields (optional ones a union with null, default
    null), named after the dataset."""
    out = []
    for name, spec in ds.fields.items():
        t = _CONF_TYPES[spec.type]
        f: dict[str, Any] = {"name": name, "type": t if spec.required else ["null", t]}
        if not spec.required:
            f["default"] = None
        if spec.description:
            f["doc"] = spec.description
        out.append(f)
    record = {"type": "record", "name": ds.name, "namespace": "loglake.datasets", "fields": out}
    if ds.description:
        record["doc"] = ds.description
    return json.dumps(record)
