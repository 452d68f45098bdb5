"""Decode a registry-format topic's records in Spark: one decoder for speed and batch.

A record's value is the registry's wire format: a magic byte 0, a 4-byte big-endian schema
id, the payload. Each record is decoded with the schema its id names (its writer's) and read
as the tables' schema (``Dataset.registry``, resolved by ``loglake.schemaregistry.resolve``):
Avro by one ``from_avro`` per writer schema, chosen by the id in one CASE, JSON Schema by
``from_json``, both in the JVM; Protobuf by a Python UDF (Spark's own reader is not served
here). What does not decode gets its own reason, with the record's provenance:

- ``no_magic_byte``: the value does not start with the magic byte and an id;
- ``unknown_schema_id``: the id is not a version of the dataset's subject;
- ``incompatible_schema``: its writer's schema is one the tables cannot hold: a version refused
  as their schema, or one their schema cannot read (``loglake.schemaregistry.resolve``). Every
  other writer is one the reader's schema reads (Avro: by Avro's own rules), so no valid record
  is ``undecodable`` because of the schema loglake chose;
- ``undecodable``: the payload does not decode with its writer's schema;
- as for JSON topics: ``oversized``, ``null_value`` (events), ``null_key`` and ``key_mismatch``
  (changelogs).

The output has ``loglake.records.validation.validate``'s shape, so everything after it is shared.
"""

from __future__ import annotations

import json
from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from loglake.core.config import Dataset

# A field the reader's schema gains, with a default: every record that decodes reads it as
# true. A record that does not decode comes out of ``from_avro`` (PERMISSIVE) as a struct of
# nulls, which a record whose fields are all null would be too: this field tells them apart.
SENTINEL = "_loglake_decoded"


def _with_sentinel(reader: str) -> str:
    schema = json.loads(reader)
    schema["fields"] = [*schema["fields"], {"name": SENTINEL, "type": "boolean", "default": True}]
    return json.dumps(schema)


OPS = ("c", "u", "d", "r")  # Debezium's ops: insert, update, delete, a snapshot read
UPSERTS = ("c", "u", "r")


def reason(code: str, message: Column | str) -> Column:
    """A quarantine reason: its code and message (the JSON path's too)."""
    msg = F.lit(message) if isinstance(message, str) else message
    return F.struct(F.lit(code).alias("code"), msg.alias("message"))


def _avro(ds: Dataset, payload: Column, sid: Column) -> tuple[Column, Callable[[Column], Column]]:
    """One ``from_avro`` per writer schema the tables can hold, chosen by the record's id, read
    as the tables' schema; (the decoded struct, what says it did not decode)."""
    from pyspark.sql.avro.functions import from_avro

    schemas = ds.registry
    options = {"mode": "PERMISSIVE", "avroSchema": _with_sentinel(schemas.reader)}
    decoded = None
    for w in schemas.writers:
        if w.refused is None:
            one = from_avro(payload, w.schema_str, options)
            decoded = F.when(sid == w.id, one) if decoded is None else decoded.when(sid == w.id, one)
    if decoded is None:  # no version the tables can hold: every record is refused
        decoded = F.lit(None)
    return decoded, lambda d: d.getField(SENTINEL).isNull()


def _json(ds: Dataset, payload: Column, sid: Column) -> tuple[Column, Callable[[Column], Column]]:
    """JSON Schema: the payload is JSON, read as the tables' columns (``from_json``, a value of
    another type than its column's makes the record undecodable)."""
    ddl = ", ".join(f"`{n}` {f.type}" for n, f in ds.fields.items()) + f", `{CORRUPT}` string"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "allowSingleQuotes": "false",
               "allowNonNumericNumbers": "false"}
    decoded = F.from_json(payload.cast("string"), ddl, options)
    return decoded, lambda d: d.isNull() | d.getField(CORRUPT).isNotNull()


CORRUPT = "_loglake_corrupt"


def _protobuf(ds: Dataset, payload: Column, sid: Column) -> tuple[Column, Callable[[Column], Column]]:
    """Protobuf: no Spark reader of it is served here (``spark-protobuf``), so a Python UDF
    decodes each payload with its writer's message (``loglake.schemaregistry.protobuf``)."""
    from loglake.schemaregistry.protobuf import decoder

    writers = {w.id: w.schema_str for w in ds.registry.writers if w.refused is None}
    ddl = "struct<" + ",".join(f"{n}:{f.type}" for n, f in ds.fields.items()) + f",{SENTINEL}:boolean>"
    udf = F.udf(decoder(writers, list(ds.fields)), ddl)
    return udf(payload, sid), lambda d: d.isNull() | d.getField(SENTINEL).isNull()


DECODERS = {"avro": _avro, "json-schema": _json, "protobuf": _protobuf}


def key_checks(ds: Dataset, keys: dict[str, Column], fields: dict[str, Column], deleted: Column) -> list[Column]:
    """A changelog's key rules (JSON and registry formats alike): a delete must carry its key
    fields in its record key (``null_key``), any other record's key fields must equal its row's
    (``key_mismatch``). ``keys``: each key field's text as the record key gives it; ``fields``: the
    row's values."""
    checks = []
    for name, text in keys.items():
        what = "a delete (op d or a tombstone) whose record key has no field " + repr(name) if ds.debezium \
            else "tombstone without a key"
        checks.append(F.when(deleted & text.isNull(), reason("null_key", what)))
    for name, text in keys.items():
        field = fields[name].cast("string")
        if ds.debezium:
            message = F.concat(F.lit(f"record key field {name!r} = "), F.coalesce(text, F.lit("(none)")),
                               F.lit(f" differs from after's {name!r} = "), F.coalesce(field, F.lit("null")))
        else:
            message = F.concat(F.lit("record key "), F.coalesce(text, F.lit("null")),
                               F.lit(f" differs from field {name!r} = "), F.coalesce(field, F.lit("null")))
        checks.append(F.when(~deleted & (text.isNull() | (text != field)), reason("key_mismatch", message)))
    return checks


def _envelope_fields(reader: str) -> dict[str, tuple[str, ...]]:
    """A Debezium Avro envelope's fields, each with its own fields when it is a record (the
    source block's: which of them the events carry)."""
    def record_fields(t) -> tuple[str, ...]:
        for branch in t if isinstance(t, list) else [t]:
            if isinstance(branch, dict) and branch.get("type") == "record":
                return tuple(f["name"] for f in branch["fields"])
        return ()

    return {f["name"]: record_fields(f["type"]) for f in json.loads(reader)["fields"]}


def _wire(column: str) -> tuple[Column, Column, Column]:
    """The registry wire format of a binary column: (whether it is framed: the magic byte and
    a 4-byte id at least; the schema id; the payload after them)."""
    framed = (F.octet_length(column) >= 5) & (F.substring(column, 1, 1) == F.lit(bytes([0])))
    return (framed, F.expr(f"cast(conv(hex(substr({column}, 2, 4)), 16, 10) as bigint)"),
            F.expr(f"substr({column}, 6)"))


def unwrapped(v: Column, marker: str) -> Column:
    """Kafka Connect's JSON converter's ``{"schema": ..., "payload": ...}`` (``schemas.enable``)
    taken off a VARIANT when there is one: a document without ``marker`` at its top that has a
    ``payload``."""
    payload = F.try_variant_get(v, "$.payload", "variant")
    wrapped = F.try_variant_get(v, f"$.{marker}", "variant").isNull() & payload.isNotNull()
    return F.when(wrapped, payload).otherwise(v)


def json_key_texts(ds: Dataset, key: Column) -> dict[str, Column]:
    """A Debezium JSON record key's fields as text (``key``: the key parsed as a VARIANT), with
    or without the converter's wrapper."""
    fields = unwrapped(key, ds.keys[0])
    return {k: F.try_variant_get(fields, f"$.{k}", "string") for k in ds.keys}


def _keys(ds: Dataset) -> dict[str, Column]:
    """Each key field's text as the record key gives it (what the key checks compare): the key
    as it is, or one in a registry format decoded with its own writer's schema (a primitive, or
    a record's one field; a Debezium key: a record of the key's fields). A key that does not
    decode (another id, a payload of another schema) reads null."""
    schemas = ds.registry
    if ds.key_format == "string":
        if ds.debezium:  # a JSON key (the JSON converter's, wrapped or not), its fields read from it
            return json_key_texts(ds, F.try_parse_json(F.col("key").cast("string")))
        return {ds.key: F.col("key").cast("string")}
    from pyspark.sql.avro.functions import from_avro

    framed, kid, payload = _wire("key")
    fields = ds.keys if ds.debezium else [schemas.key_field]
    out: dict[str, Column | None] = {k: None for k in (ds.keys if ds.debezium else [ds.key])}
    for w in schemas.key_writers:
        if w.refused is not None:
            continue
        when = framed & (kid == w.id)
        if ds.key_format == "avro":
            record = from_avro(payload, w.schema_str, {"mode": "PERMISSIVE"})
            values = [record.getField(f) if f else record for f in fields]
        else:
            text = payload.cast("string")
            values = [F.get_json_object(text, f"$.{f}") if f else F.regexp_replace(text, r'^"|"$', "") for f in fields]
        for k, v in zip(out, values):
            out[k] = F.when(when, v.cast("string")) if out[k] is None else out[k].when(when, v.cast("string"))
    return {k: v if v is not None else F.lit(None).cast("string") for k, v in out.items()}


def projections(ds: Dataset, provenance: list) -> tuple[list, list, list]:
    """The three projections of ``parse.validate`` for a registry-format dataset: the Kafka
    columns renamed, the value decoded, the fields and the reason."""
    schemas = ds.registry
    framed, value_id, payload = _wire("value")
    keys = _keys(ds)
    base = [
        F.col("topic").alias("_topic"), F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"), "key", "value",
        *[text.alias(f"_key_{k}") for k, text in keys.items()], value_id.alias("_schema_id"),
    ]
    keys = {k: F.col(f"_key_{k}") for k in keys}
    value, sid = F.col("value"), F.col("_schema_id")
    decoded, failed = DECODERS[ds.format](ds, payload, sid)
    checked = ["*", F.when(framed, decoded).alias("_decoded")]
    envelope = F.col("_decoded")
    row = envelope.getField("after") if ds.debezium else envelope
    op = envelope.getField("op") if ds.debezium else None

    value_null = value.isNull()
    deleted = (value_null | (op == "d")) if ds.debezium else value_null
    known = {w.id: w for w in schemas.writers}
    checks = [F.when(F.octet_length(value) > ds.max_value_bytes, reason(
        "oversized", F.concat(F.lit("value of "), F.octet_length(value).cast("string"),
                              F.lit(f" bytes is over max_value_bytes ({ds.max_value_bytes})"))))]
    if ds.kind == "events":
        checks.append(F.when(value_null, reason("null_value", "event topics take no null values (tombstones)")))
    checks.append(F.when(~value_null & ~framed, reason(
        "no_magic_byte", "value does not start with the Schema Registry magic byte 0 and a 4-byte schema id "
                         f"(not written by a serializer of subject {schemas.subject}'s registry)")))
    checks.append(F.when(~value_null & ~sid.isin(*known) if known else ~value_null, reason(
        "unknown_schema_id", F.concat(F.lit("schema id "), sid.cast("string"),
                                      F.lit(f" is not a version of subject {schemas.subject}")))))
    for w in schemas.writers:
        if w.refused is not None:
            checks.append(F.when(~value_null & (sid == w.id), reason("incompatible_schema", w.refused)))
    checks.append(F.when(~value_null & failed(F.col("_decoded")), reason(
        "undecodable", F.concat(F.lit("payload does not decode with schema id "), sid.cast("string"),
                                F.lit(f" (subject {schemas.subject})")))))
    if ds.debezium:
        present = ~value_null
        checks += [
            F.when(present & op.isNull(), reason(
                "malformed_envelope", "the decoded value has no op: not a Debezium change event")),
            F.when(present & ~op.isin(*OPS), reason(
                "unknown_op", F.concat(F.lit("op "), op, F.lit(f" is not one of {', '.join(OPS)}")))),
            F.when(present & op.isin(*UPSERTS) & row.isNull(), reason(
                "missing_after", F.concat(F.lit("op "), op, F.lit(" without an after row")))),
        ]
    fields = {n: row.getField(n) for n in ds.fields}
    for n, f in ds.fields.items():  # JSON may leave out what its schema requires; Avro cannot
        if f.required:
            checks.append(F.when(~deleted & fields[n].isNull(), reason(
                "missing_field", f"required field {n!r} is missing or null")))
    if ds.kind == "changelog":
        checks += key_checks(ds, keys, fields, deleted)
        for name, text in keys.items():  # a delete's key fields: the record key's
            fields[name] = F.when(deleted, text.cast(ds.fields[name].type)).otherwise(fields[name])
    why = F.coalesce(*checks)
    out = [fields[n].alias(n) for n in ds.fields]
    if ds.kind == "changelog":
        out.append(deleted.alias("_deleted"))
    if ds.debezium:
        names = _envelope_fields(schemas.reader)
        source = envelope.getField("source") if "source" in names else F.lit(None)
        millis = F.coalesce(*[c for c, there in ((source.getField("ts_ms"), "ts_ms" in names.get("source", ())),
                                                 (envelope.getField("ts_ms"), "ts_ms" in names)) if there],
                            F.lit(None).cast("bigint"))
        out += [F.when(value_null, F.lit("d")).otherwise(op).alias("_op"),
                F.when(millis.isNotNull(), F.timestamp_millis(millis)).alias("_source_time"),
                F.when(source.isNotNull(), F.to_json(source)).alias("_source_position")]
    final = [*provenance, "key", "value", why.alias("_reason"), *out]
    return base, checked, final
