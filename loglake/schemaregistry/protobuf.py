"""Protobuf schemas as loglake sees them: the message a topic's values are, the Spark type of
each of its fields, and decoding a record's payload into a row.

A registry holds a Protobuf schema as ``.proto`` text, or (as confluent-kafka's Python
serializer registers it) as a base64 ``FileDescriptorProto``. Text is compiled with protoc
(``grpcio-tools``, the well-known types included); imports of other schemas (references) are
refused. The topic's values are the file's first message, the one a record's message
indexes ``[0]`` name (the wire format: magic byte, schema id, the indexes, the payload).

- double, float; int32/sint32/sfixed32 → int; int64/sint64/sfixed64 and uint32/fixed32 →
  bigint; uint64/fixed64 → decimal(20,0); bool; string; bytes → binary; an enum → its
  value's name (string);
- a message → struct (``google.protobuf.Timestamp`` → timestamp; the wrappers → their value,
  nullable); ``repeated`` → array; a map field → map.

Every field is optional (proto3: an absent scalar reads as its default, an absent message as
null). No Spark here: the jobs' decoder (``loglake.records.decode``) calls ``decoder``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import os
import tempfile
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable

from loglake.core.config import RegistryField
from loglake.schemaregistry import refusal as fields_refusal

_SCALAR = {1: "double", 2: "float", 3: "bigint", 4: "decimal(20,0)", 5: "int", 6: "decimal(20,0)", 7: "bigint",
           8: "boolean", 9: "string", 12: "binary", 13: "bigint", 14: "string", 15: "int", 16: "bigint",
           17: "int", 18: "bigint"}
_WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
             "google.protobuf.Int64Value": "bigint", "google.protobuf.UInt64Value": "decimal(20,0)",
             "google.protobuf.Int32Value": "int", "google.protobuf.UInt32Value": "bigint",
             "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
             "google.protobuf.BytesValue": "binary"}
TIMESTAMP = "google.protobuf.Timestamp"


@functools.lru_cache(maxsize=64)
def _file_set(schema_str: str) -> bytes:
    """The schema as a serialized ``FileDescriptorSet`` (its file last, the well-known types it
    imports before it)."""
    from google.protobuf import descriptor_pb2

    text = schema_str.strip()
    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
        if fdp.message_type:
            return _with_imports(fdp)
    except (binascii.Error, ValueError, Exception):  # not base64, or not a descriptor: .proto text
        pass
    return _compile(text)


def _with_imports(fdp) -> bytes:
    from google.protobuf import descriptor_pb2, descriptor_pool

    out = descriptor_pb2.FileDescriptorSet()
    for dep in fdp.dependency:
        if not dep.startswith("google/protobuf/"):
            raise ValueError(f"it imports {dep}: schema references are not followed")
        # A well-known type is in the default pool once its module is imported.
        importlib.import_module("google.protobuf." + dep.rsplit("/", 1)[1].removesuffix(".proto") + "_pb2")
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(out.file.add())
    out.file.add().CopyFrom(fdp)
    return out.SerializeToString()


def _compile(text: str) -> bytes:
    import grpc_tools
    from grpc_tools import protoc

    for line in text.splitlines():
        line = line.strip()
        if line.startswith("import ") and "google/protobuf/" not in line:
            raise ValueError(f"{line!r}: schema references are not followed")
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="loglake-proto-") as d:
        with open(os.path.join(d, "schema.proto"), "w") as f:
            f.write(text)
        out = os.path.join(d, "schema.pb")
        rc = protoc.main(["protoc", f"-I{d}", f"-I{include}", "--include_imports", f"--descriptor_set_out={out}",
                          "schema.proto"])
        if rc != 0 or not os.path.exists(out):
            raise ValueError("protoc cannot compile it (see its message above)")
        with open(out, "rb") as f:
            return f.read()


def _message(schema_str: str):
    """The descriptor of the schema's first message (the records' type), in a pool of its own."""
    return _pool_message(_file_set(schema_str))


@functools.lru_cache(maxsize=64)
def _pool_message(file_set: bytes):
    from google.protobuf import descriptor_pb2, descriptor_pool

    fds = descriptor_pb2.FileDescriptorSet.FromString(file_set)
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    main = fds.file[-1]
    if not main.message_type:
        raise ValueError("the schema declares no message")
    prefix = f"{main.package}." if main.package else ""
    return pool.FindMessageTypeByName(prefix + main.message_type[0].name)


def parse(schema_str: str):
    return _message(schema_str)


def _type(field) -> str:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        k, v = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return f"map<{_type(k)},{_type(v)}>"
    t = _element(field)
    return f"array<{t}>" if _repeated(field) else t


def _repeated(field) -> bool:
    return field.is_repeated


def _element(field) -> str:
    if field.message_type is not None:
        name = field.message_type.full_name
        if name == TIMESTAMP:
            return "timestamp"
        if name in _WRAPPERS:
            return _WRAPPERS[name]
        return "struct<" + ",".join(f"{f.name}:{_type(f)}" for f in field.message_type.fields) + ">"
    return _SCALAR[field.type]


def fields(schema_str: str) -> dict[str, RegistryField]:
    """The table's fields: the first message's, in declaration order, every one optional."""
    return {f.name: RegistryField(type=_type(f), required=False) for f in _message(schema_str).fields}


def refusal(reader: dict[str, RegistryField], writer_str: str) -> str | None:
    """Why records written with ``writer_str`` cannot be read as a table with fields ``reader``:
    a field the table holds that the writer declares with another type (by name)."""
    return fields_refusal(reader, fields(writer_str))  # no promotions; every field optional


# --- decoding (in Spark's Python workers) -------------------------------------------------


def _indexes(payload: bytes) -> tuple[list[int], int]:
    """The message indexes at the start of ``payload`` (zigzag varints; a lone 0 is [0]) and
    where the message begins."""
    def varint(pos: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            b = payload[pos]
            result |= (b & 0x7F) << shift
            pos += 1
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), pos
            shift += 7

    count, pos = varint(0)
    if count == 0:
        return [0], pos
    out = []
    for _ in range(count):
        i, pos = varint(pos)
        out.append(i)
    return out, pos


def _value(field, v: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        vf = field.message_type.fields_by_name["value"]
        return {k: _one(vf, x) for k, x in v.items()}
    if _repeated(field):
        return [_one(field, x) for x in v]
    return _one(field, v)


def _one(field, v: Any) -> Any:
    if field.message_type is not None:
        name = field.message_type.full_name
        if name == TIMESTAMP:
            return datetime.fromtimestamp(v.seconds + v.nanos / 1e9, tz=timezone.utc)
        if name in _WRAPPERS:
            return v.value
        return {f.name: _field(v, f) for f in field.message_type.fields}
    if field.type == 14:  # enum: its value's name
        value = field.enum_type.values_by_number.get(v)
        return value.name if value is not None else str(v)
    if field.type in (4, 6):
        return Decimal(v)
    return v


def _field(msg, f) -> Any:
    if f.message_type is not None and not _repeated(f) and not msg.HasField(f.name):
        return None
    return _value(f, getattr(msg, f.name))


def decoder(writers: dict[int, str], reader: list[str]) -> Callable[[bytes | None, int | None], tuple | None]:
    """A function of (payload after the schema id, schema id) → the row (a tuple of the
    ``reader`` fields' values, then True), or None when it does not decode. ``writers``: schema
    id → schema text of every writer the tables can hold."""
    from google.protobuf import message_factory
    from google.protobuf.message import DecodeError

    classes: dict[int, Any] = {}

    def decode(payload: bytes | None, sid: int | None) -> tuple | None:
        if payload is None or sid not in writers:
            return None
        cls = classes.get(sid)
        if cls is None:  # a schema that does not load is loglake's error, not the record's: raised
            cls = classes[sid] = message_factory.GetMessageClass(_message(writers[sid]))
        try:
            indexes, start = _indexes(payload)
            if indexes != [0]:
                return None  # another message of the file than the topic's
            msg = cls.FromString(payload[start:])
            by_name = msg.DESCRIPTOR.fields_by_name
            return (*(_field(msg, by_name[n]) if n in by_name else None for n in reader), True)
        except (DecodeError, IndexError, ValueError, UnicodeDecodeError):  # the payload does not decode
            return None

    return decode
