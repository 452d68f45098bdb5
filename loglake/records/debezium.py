"""Debezium's change events (``envelope: debezium``) read in Spark: the row, the delete, the key.

A Debezium connector writes one event per row change: the value an envelope ``{"before",
"after", "op", "ts_ms", "source", "transaction"}`` (``op``: ``c`` insert, ``u`` update, ``d``
delete, ``r`` a snapshot read), the key a struct of the table's primary-key fields, a delete
followed by a tombstone (a null value) so a compacted topic forgets the key. With the JSON
converter's ``schemas.enable`` both are wrapped as ``{"schema": ..., "payload": ...}``; both
forms are read, record by record.

This module turns such a record into what a plain changelog's validation reads
(``loglake.records.validation``): the row's JSON (``after``, for ``c``, ``u`` and ``r``), whether
it deletes its key (``op = d`` or a tombstone), the key's fields as text (from the record key),
and the event's provenance (``loglake.core.contracts.CDC``); and names what is wrong with an
envelope (``checks``), before the row's own fields are checked by the dataset's schema.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from loglake.core.config import Dataset
from loglake.records.decode import OPS, UPSERTS, json_key_texts, reason, unwrapped


def key_column(name: str) -> str:
    """The column holding key field ``name``'s text as the record key gives it."""
    return f"_k_{name}"


def stages(ds: Dataset) -> list[list]:
    """The projections from Kafka's columns to the ones ``validation`` reads: ``_vs`` (the row's
    JSON, null unless an upsert with an object ``after``), ``_deleted_in``, ``_op``, the key
    fields' texts (``key_column``), ``_source_time``, ``_source_position``."""
    base = [
        F.col("topic").alias("_topic"), F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"), "key", "value",
        F.try_parse_json(F.col("value").cast("string")).alias("_env0"),
        F.try_parse_json(F.col("key").cast("string")).alias("_kenv0"),
    ]
    unwrap = ["*", unwrapped(F.col("_env0"), "op").alias("_env")]
    env = F.col("_env")
    millis = F.coalesce(F.try_variant_get(env, "$.source.ts_ms", "bigint"), F.try_variant_get(env, "$.ts_ms", "bigint"))
    source = F.try_variant_get(env, "$.source", "variant")
    fields = ["*", F.try_variant_get(env, "$.op", "string").alias("_op"),
              F.to_json(F.try_variant_get(env, "$.after", "variant")).alias("_after_json"),
              F.when(millis.isNotNull(), F.timestamp_millis(millis)).alias("_source_time"),
              F.when(source.isNotNull(), F.to_json(source)).alias("_source_position"),
              *[text.alias(key_column(k)) for k, text in json_key_texts(ds, F.col("_kenv0")).items()]]
    op, after = F.col("_op"), F.col("_after_json")
    row = ["*", (F.col("value").isNull() | (op == "d")).alias("_deleted_in"),
           F.when(op.isin(*UPSERTS) & (F.substring(after, 1, 1) == "{"), after).alias("_vs")]
    return [base, unwrap, fields, row]


def checks(ds: Dataset) -> list[Column]:
    """What is wrong with a record's envelope (first failing wins, before its row's fields)."""
    value, env, op = F.col("value"), F.col("_env"), F.col("_op")
    present = value.isNotNull()
    after = F.col("_after_json")
    return [
        F.when(present & env.isNull(), reason("malformed_envelope", "value is not JSON: not a Debezium change event")),
        F.when(present & ~F.col("value").cast("string").rlike(r"^\s*\{"), reason(
            "malformed_envelope", "value is not a JSON object: not a Debezium change event")),
        F.when(present & op.isNull(), reason(
            "malformed_envelope", "value has no op (a string): not a Debezium change event (before, after, op, "
                                  "source)")),
        F.when(present & ~op.isin(*OPS), reason(
            "unknown_op", F.concat(F.lit("op "), F.to_json(F.try_variant_get(env, "$.op", "variant")),
                                   F.lit(f" is not one of {', '.join(OPS)}")))),
        F.when(present & op.isin(*UPSERTS) & (after.isNull() | (F.substring(after, 1, 1) != "{")), reason(
            "missing_after", F.concat(F.lit("op "), op, F.lit(" without an after row (found "),
                                      F.coalesce(after, F.lit("none")), F.lit(")")))),
    ]
