"""Parse and validate Kafka records against a dataset's schema, in Spark; the valid rows and the
quarantine rows a validated frame splits into.

Shared by the speed and batch layers, so they cannot drift. Each record gets a
``reason_code``/``reason`` (null when valid). The value is parsed once into a VARIANT
(``try_parse_json``), which keeps the JSON token types: that is what makes typing strict
(``"42"`` where a long belongs is a wrong type, not something to coerce), which
``from_json`` cannot tell.
"""

from __future__ import annotations

import json

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from loglake.core import contracts
from loglake.core.config import Dataset, FieldSpec
from loglake.core.contracts import FIELD_TYPES
from loglake.records import debezium, decode
from loglake.records.decode import reason as _reason

PROVENANCE = contracts.PROVENANCE.names


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


def _field_checks(name: str, spec: FieldSpec, t: Column, x: Column, s: Column | None) -> list[Column]:
    """Reasons (first failing wins) for one field: ``t`` its JSON token's VARIANT type name,
    ``x`` its typed value, ``s`` (timestamps) its string form."""
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
            "wrong_type", F.concat(F.lit(f"field {name!r} expected an ISO-8601 timestamp, found "), s))))
    shown = x.cast("string")
    for code, bad, text in _domain_checks(name, spec, x):
        checks.append(F.when(bad, _reason(code, F.concat(F.lit(f"field {name!r} = "), shown, F.lit(text)))))
    return checks


def _domain_checks(name: str, spec: FieldSpec, x: Column) -> list[tuple[str, Column, str]]:
    """(reason code, condition that is true when ``x`` breaks the rule, message tail)."""
    out = []
    if spec.enum is not None:
        allowed = ", ".join(str(v) for v in spec.enum)
        out.append(("out_of_domain", x.isNotNull() & ~x.isin(*spec.enum), f" is not one of [{allowed}]"))
    if spec.min is not None:
        out.append(("out_of_domain", x < F.lit(spec.min), f" is below min {spec.min:g}"))
    if spec.max is not None:
        out.append(("out_of_domain", x > F.lit(spec.max), f" is above max {spec.max:g}"))
    if spec.pattern is not None:
        out.append(("out_of_domain", x.isNotNull() & ~x.rlike(spec.pattern), f" does not match {json.dumps(spec.pattern)}"))
    return out


# from_json options that make it as strict as try_parse_json: no single quotes, no NaN.
_FAST_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt", "allowSingleQuotes": "false",
                 "allowNonNumericNumbers": "false"}
_FAST_TYPE = {"long": "bigint", "double": "double", "boolean": "boolean", "string": "variant", "timestamp": "variant"}


def _fast(ds: Dataset, vs: Column) -> tuple[Column, dict[str, Column]]:
    """The fast path: (``ok``, typed value per field) from one ``from_json`` pass.

    ``ok`` is true only for records the exact rules below accept too: parsed without a
    corrupt part, an object, every required field present with the right JSON type (string
    and timestamp fields are parsed as VARIANT so a number there is told apart from a
    string), every domain rule met. Everything else takes the exact path.
    """
    schema = ", ".join(f"`{n}` {_FAST_TYPE[spec.type]}" for n, spec in ds.fields.items()) + ", _corrupt string"
    j = F.from_json(vs, schema, _FAST_OPTIONS)
    ok = vs.isNotNull() & (F.substring(vs, 1, 1) == "{") & j.getField("_corrupt").isNull()
    values: dict[str, Column] = {}
    for name, spec in ds.fields.items():
        raw = j.getField(name)
        if spec.type in ("string", "timestamp"):
            t = F.schema_of_variant(raw)
            text = raw.cast("string")
            x = text if spec.type == "string" else text.try_cast("timestamp")
            ok = ok & ((t == "STRING") if spec.required else (raw.isNull() | (t == "STRING") | (t == "VOID")))
            if spec.type == "timestamp":
                ok = ok & (raw.isNull() | (t != "STRING") | x.isNotNull())
        else:
            x = raw
            if spec.required:
                ok = ok & x.isNotNull()
        for _code, bad, _text in _domain_checks(name, spec, x):
            ok = ok & ~F.coalesce(bad, F.lit(False))
        values[name] = x
    return F.coalesce(ok, F.lit(False)), values  # a null anywhere (a missing field) is "not accepted"


def _exact(ds: Dataset, vs: Column, deleted: Column, keys: dict[str, Column]) -> tuple[Column, dict[str, Column]]:
    """The exact rules: (reason or null, typed value per field), from the value's VARIANT.

    Used for the records the fast path does not accept (malformed ones, deletes, odd but
    valid JSON): it names the first rule a record breaks. ``deleted``: the record deletes its
    key (a changelog's tombstone, a Debezium delete); ``keys``: each key field's text as the
    record key gives it.
    """
    v = F.try_parse_json(vs)
    checks: list[Column] = [F.when(F.octet_length("value") > ds.max_value_bytes, _reason(
        "oversized", F.concat(F.lit("value of "), F.octet_length("value").cast("string"),
                              F.lit(f" bytes is over max_value_bytes ({ds.max_value_bytes})"))))]
    if ds.kind == "events":
        checks.append(F.when(deleted, _reason("null_value", "event topics take no null values (tombstones)")))
    elif ds.debezium:
        checks.extend(debezium.checks(ds))
    checks.append(F.when(~deleted & v.isNull(), _reason("bad_json", "value is not valid JSON")))
    checks.append(F.when(~deleted & ~vs.rlike(r"^\s*\{"), _reason("not_an_object", "value is not a JSON object")))
    values: dict[str, Column] = {}
    for name, spec in ds.fields.items():
        path = f"$.{name}"
        t = F.schema_of_variant(F.variant_get(v, path, "variant"))
        s = None
        if spec.type == "timestamp":
            s = F.try_variant_get(v, path, "string")
            x = s.try_cast("timestamp")
        else:
            x = F.try_variant_get(v, path, _SQL_TYPE[spec.type])
        values[name] = x
        checks.extend(F.when(~deleted, c) for c in _field_checks(name, spec, t, x, s))
    if ds.kind == "changelog":
        checks.extend(decode.key_checks(ds, keys, values, deleted))
    return F.coalesce(*checks), values


def validate(raw: DataFrame, ds: Dataset, *, fast_path: bool = True) -> DataFrame:
    """Kafka source rows → provenance, raw key/value, ``_reason`` struct, typed fields.

    ``raw`` has the Kafka source columns (key, value, topic, partition, offset,
    timestamp). For changelog datasets a null value is a tombstone (``_deleted``) and
    the record key must equal the value's key field.

    Two paths, one answer: a fast ``from_json`` pass accepts the well-formed records; only
    the records it does not accept are checked by the exact VARIANT-based rules (inside a
    CASE, so well-formed records never pay for them). The fast path accepts nothing the
    exact rules reject, so the outcome is the exact rules' for every record
    (``fast_path=False`` skips it: the tests compare both). Duplicate keys in an object:
    the last one wins on both paths (``spark.sql.variant.allowDuplicateKeys``, set by
    ``loglake.jobs.session``).
    """
    out = raw
    for projection in _projections(ds, fast_path):
        out = out.select(*projection)
    return out


_PROJECTIONS: dict = {}


def _projections(ds: Dataset, fast_path: bool) -> tuple[list, ...]:
    """The projections of ``validate``, one after the other, built once per dataset definition and Spark
    context: building the Column trees costs hundreds of Py4J calls, too many to repeat every
    micro-batch."""
    sc = SparkContext._active_spark_context
    key = (ds.model_dump_json(), fast_path, sc.applicationId, sc.startTime)
    if key in _PROJECTIONS:
        return _PROJECTIONS[key]
    if ds.in_registry:  # the Schema Registry's wire format: its own decoder, the same output
        return _keep(key, decode.projections(ds, PROVENANCE))
    if ds.debezium:  # the envelope read first: the row's JSON, the delete, the key's fields
        stages = debezium.stages(ds)
        keys = {k: F.col(debezium.key_column(k)) for k in ds.keys}
        deleted = F.col("_deleted_in")
    else:
        stages = [[
            F.col("topic").alias("_topic"),
            F.col("partition").alias("_partition"),
            F.col("offset").alias("_offset"),
            F.col("timestamp").alias("_kafka_timestamp"),
            "key", "value",
            F.col("key").cast("string").alias("_key"),
            F.col("value").cast("string").alias("_vs"),
        ]]
        keys = {ds.key: F.col("_key")} if ds.kind == "changelog" else {}
        deleted = F.col("value").isNull()
    vs = F.col("_vs")
    fast_ok, fast = _fast(ds, vs)
    fast_ok = fast_ok & (F.octet_length("value") <= ds.max_value_bytes)
    if not fast_path:
        fast_ok = F.lit(False)
    for k, text in keys.items():
        fast_ok = fast_ok & F.coalesce(text == fast[k].cast("string"), F.lit(False))
    reason, exact = _exact(ds, vs, deleted, keys)
    checked = ["*", fast_ok.alias("_fast_ok"), *[x.alias(f"_f_{n}") for n, x in fast.items()]]
    ok = F.col("_fast_ok")
    fields = [F.when(ok, F.col(f"_f_{n}")).otherwise(exact[n]).alias(n) for n in ds.fields]
    if ds.kind == "changelog":
        # A delete's key fields come from the record key (a tombstone's value is null).
        if ds.debezium:
            by_key = {k: F.when(ok, F.col(f"_f_{k}")).when(deleted, text.try_cast(FIELD_TYPES[ds.fields[k].type]))
                      .otherwise(exact[k]).alias(k) for k, text in keys.items()}
        else:
            by_key = {ds.key: F.when(ok, F.col(f"_f_{ds.key}")).otherwise(
                F.coalesce(exact[ds.key].cast("string"), keys[ds.key])).alias(ds.key)}
        fields = [by_key.get(n, f) for n, f in zip(ds.fields, fields)]
        fields.append(deleted.alias("_deleted"))
    cdc = [F.when(F.col("value").isNull(), F.lit("d")).otherwise(F.col("_op")).alias("_op"), "_source_time",
           "_source_position"] if ds.debezium else []
    final = [*PROVENANCE, "key", "value", F.when(~ok, reason).alias("_reason"), *fields, *cdc]
    return _keep(key, (*stages, checked, final))


def _keep(key: tuple, projections: tuple[list, ...]) -> tuple[list, ...]:
    if len(_PROJECTIONS) > 32:  # bounded: a long test session sees many datasets
        _PROJECTIONS.clear()
    _PROJECTIONS[key] = projections
    return projections


def valid_rows(validated: DataFrame, ds: Dataset) -> DataFrame:
    """The rows that passed, as the transform sees them (``loglake.core.contracts.valid_rows``):
    fields, ``_deleted`` for a changelog, then provenance."""
    return validated.where(F.col("_reason").isNull()).select(*contracts.valid_rows(ds).names)


def quarantine_rows(validated: DataFrame, layer: str) -> DataFrame:
    """The rows that failed, with raw bytes, reason and provenance (``loglake.core.contracts.QUARANTINE``)."""
    made = {"_layer": F.lit(layer).alias("_layer"), "reason_code": F.col("_reason.code").alias("reason_code"),
            "reason": F.col("_reason.message").alias("reason")}
    return validated.where(F.col("_reason").isNotNull()).select(
        *(made.get(c, c) for c in contracts.QUARANTINE.names))


def valid_frame(raw: DataFrame, ds: Dataset) -> DataFrame:
    """What the dataset's tables hold of ``raw`` (Kafka source rows): its valid rows, transformed."""
    return apply_transform(valid_rows(validate(raw, ds), ds), ds)


def empty_quarantine(spark) -> DataFrame:
    """No rows, the quarantine table's schema (to create the table before its first row)."""
    return spark.createDataFrame([], contracts.QUARANTINE.ddl)


def apply_transform(valid: DataFrame, ds: Dataset) -> DataFrame:
    """Apply the dataset's transform; it must keep the provenance columns."""
    out = ds.load_transform()(valid)
    missing = [c for c in PROVENANCE if c not in out.columns]
    if missing:
        raise ValueError(f"transform {ds.transform} dropped provenance columns {missing}; it must keep them")
    return out
