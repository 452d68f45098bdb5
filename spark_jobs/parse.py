"""Parse and validate Kafka records against a dataset's schema, in Spark.

Shared by the speed and batch layers, so they cannot drift. Each record gets a
``reason_code``/``reason`` (null when valid). The value is parsed once into a VARIANT
(``try_parse_json``), which keeps the JSON token types: that is what makes typing strict
(``"42"`` where a long belongs is a wrong type, not something to coerce), which
``from_json`` cannot tell.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from loglake.config import Dataset, FieldSpec

PROVENANCE = ["_topic", "_partition", "_offset", "_kafka_timestamp"]
QUARANTINE_COLUMNS = PROVENANCE + ["_layer", "key", "value", "reason_code", "reason"]



def _type_ok(t: Column, field_type: str) -> Column:
    """Whether the VARIANT type name ``t`` of a JSON token fits the declared type."""
    if field_type in ("string", "timestamp"):
        return t == "STRING"
    if field_type == "long":
        return t == "BIGINT"
    if field_type == "double":
        return (t == "BIGINT") | (t == "DOUBLE") | t.startswith("DECIMAL")
    return t == "BOOLEAN"


_SQL_TYPE = {"string": "string", "timestamp": "string", "long": "bigint", "double": "double", "boolean": "boolean"}


def _lit_sql(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _reason(code: str, message: Column | str) -> Column:
    msg = F.lit(message) if isinstance(message, str) else message
    return F.struct(F.lit(code).alias("code"), msg.alias("message"))


def _field_checks(name: str, spec: FieldSpec) -> list[Column]:
    """Reasons (first failing wins) for one field; typed value is in ``_x_<name>``."""
    t = F.col(f"_t_{name}")
    x = F.col(f"_x_{name}")
    checks: list[Column] = []
    if spec.required:
        checks.append(F.when(t.isNull(), _reason("missing_field", f"required field {name!r} is missing")))
        checks.append(F.when(t == "VOID", _reason("null_field", f"required field {name!r} is null")))
    present = t.isNotNull() & (t != "VOID")
    ok_type = _type_ok(t, spec.type)
    checks.append(F.when(present & ~ok_type, _reason(
        "wrong_type", F.concat(F.lit(f"field {name!r} expected {spec.type}, found "), t))))
    if spec.type == "timestamp":
        checks.append(F.when(present & x.isNull(), _reason(
            "wrong_type", F.concat(F.lit(f"field {name!r} expected an ISO-8601 timestamp, found "),
                                   F.col(f"_s_{name}")))))
    shown = x.cast("string")
    if spec.enum is not None:
        allowed = ", ".join(str(v) for v in spec.enum)
        cond = F.expr(f"_x_{name} IN ({', '.join(_lit_sql(v) for v in spec.enum)})")
        checks.append(F.when(x.isNotNull() & ~cond, _reason(
            "out_of_domain", F.concat(F.lit(f"field {name!r} = "), shown, F.lit(f" is not one of [{allowed}]")))))
    if spec.min is not None:
        checks.append(F.when(x < F.lit(spec.min), _reason(
            "out_of_domain", F.concat(F.lit(f"field {name!r} = "), shown, F.lit(f" is below min {spec.min:g}")))))
    if spec.max is not None:
        checks.append(F.when(x > F.lit(spec.max), _reason(
            "out_of_domain", F.concat(F.lit(f"field {name!r} = "), shown, F.lit(f" is above max {spec.max:g}")))))
    if spec.pattern is not None:
        checks.append(F.when(x.isNotNull() & ~x.rlike(spec.pattern), _reason(
            "out_of_domain", F.concat(F.lit(f"field {name!r} = "), shown,
                                      F.lit(f" does not match {json.dumps(spec.pattern)}")))))
    return checks


def validate(raw: DataFrame, ds: Dataset) -> DataFrame:
    """Kafka source rows → provenance, raw key/value, typed fields, ``_reason`` struct.

    ``raw`` has the Kafka source columns (key, value, topic, partition, offset,
    timestamp). For changelog datasets a null value is a tombstone (``_deleted``) and
    the record key must equal the value's key field.
    """
    base = raw.select(
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        "key", "value",
        F.col("key").cast("string").alias("_key"),
        F.try_parse_json(F.col("value").cast("string")).alias("_v"),
        F.col("value").cast("string").rlike(r"^\s*\{").alias("_is_object"),
    )
    cols: list[Column] = []
    for name, spec in ds.fields.items():
        path = f"$.{name}"
        cols.append(F.schema_of_variant(F.variant_get("_v", path, "variant")).alias(f"_t_{name}"))
        if spec.type == "timestamp":
            s = F.try_variant_get("_v", path, "string")
            cols.append(s.alias(f"_s_{name}"))
            cols.append(F.expr(f"try_cast(try_variant_get(_v, '{path}', 'string') AS TIMESTAMP)").alias(f"_x_{name}"))
        else:
            cols.append(F.try_variant_get("_v", path, _SQL_TYPE[spec.type]).alias(f"_x_{name}"))
    typed = base.select("*", *cols)

    value_null = F.col("value").isNull()
    checks: list[Column] = []
    if ds.kind == "events":
        checks.append(F.when(value_null, _reason("null_value", "event topics take no null values (tombstones)")))
    else:
        checks.append(F.when(value_null & F.col("_key").isNull(), _reason("null_key", "tombstone without a key")))
    checks.append(F.when(~value_null & F.col("_v").isNull(), _reason("bad_json", "value is not valid JSON")))
    checks.append(F.when(~value_null & ~F.col("_is_object"), _reason("not_an_object", "value is not a JSON object")))
    for name, spec in ds.fields.items():
        checks.extend(F.when(~value_null, c) for c in _field_checks(name, spec))
    if ds.kind == "changelog":
        x = F.col(f"_x_{ds.key}").cast("string")
        checks.append(F.when(~value_null & (F.col("_key").isNull() | (F.col("_key") != x)), _reason(
            "key_mismatch", F.concat(F.lit("record key "), F.coalesce(F.col("_key"), F.lit("null")),
                                     F.lit(f" differs from field {ds.key!r} = "), F.coalesce(x, F.lit("null"))))))
    reason = F.coalesce(*checks)
    fields = [F.col(f"_x_{n}").alias(n) for n in ds.fields]
    if ds.kind == "changelog":
        # A tombstone's value is null: its key field comes from the record key.
        fields = [F.coalesce(F.col(f"_x_{n}").cast("string"), F.col("_key")).alias(n) if n == ds.key
                  else F.col(f"_x_{n}").alias(n) for n in ds.fields]
        fields.append(value_null.alias("_deleted"))
    return typed.select(*PROVENANCE, "key", "value", reason.alias("_reason"), *fields)


def valid_rows(validated: DataFrame, ds: Dataset) -> DataFrame:
    """The rows that passed, as the transform sees them: fields, then provenance."""
    extra = ["_deleted"] if ds.kind == "changelog" else []
    return validated.where(F.col("_reason").isNull()).select(*ds.fields, *extra, *PROVENANCE)


def quarantine_rows(validated: DataFrame, layer: str) -> DataFrame:
    """The rows that failed, with raw bytes, reason and provenance."""
    return validated.where(F.col("_reason").isNotNull()).select(
        *PROVENANCE, F.lit(layer).alias("_layer"), "key", "value",
        F.col("_reason.code").alias("reason_code"), F.col("_reason.message").alias("reason"))


def apply_transform(valid: DataFrame, ds: Dataset) -> DataFrame:
    """Apply the dataset's transform; it must keep the provenance columns."""
    out = ds.load_transform()(valid)
    missing = [c for c in PROVENANCE if c not in out.columns]
    if missing:
        raise ValueError(f"transform {ds.transform} dropped provenance columns {missing}; it must keep them")
    return out
