"""Parse and validate Kafka records against a dataset's schema, in Spark.

Shared by the speed and batch layers, so they cannot drift. Each record gets a
``reason_code``/``reason`` (null when valid). The value is parsed once into a VARIANT
(``try_parse_json``), which keeps the JSON token types: that is what makes typing strict
(``"42"`` where a long belongs is a wrong type, not something to coerce), which
``from_json`` cannot tell.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import reduce
from typing import Callable, Sequence

from py4j.java_gateway import JavaClass
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.classic.column import Column as JvmColumn

from loglake.core import contracts
from loglake.core.config import Dataset, FieldSpec
from loglake.core.errors import KafkaUnavailableError, SetupError
from loglake.core.offsets import OffsetRange
from loglake.kafka.admin import read_records
from loglake.records import decode
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


def _exact(ds: Dataset, vs: Column, value_null: Column, key: Column) -> tuple[Column, dict[str, Column]]:
    """The exact rules: (reason or null, typed value per field), from the value's VARIANT.

    Used for the records the fast path does not accept (malformed ones, tombstones, odd but
    valid JSON): it names the first rule a record breaks.
    """
    v = F.try_parse_json(vs)
    checks: list[Column] = [F.when(F.octet_length("value") > ds.max_value_bytes, _reason(
        "oversized", F.concat(F.lit("value of "), F.octet_length("value").cast("string"),
                              F.lit(f" bytes is over max_value_bytes ({ds.max_value_bytes})"))))]
    if ds.kind == "events":
        checks.append(F.when(value_null, _reason("null_value", "event topics take no null values (tombstones)")))
    else:
        checks.append(F.when(value_null & key.isNull(), _reason("null_key", "tombstone without a key")))
    checks.append(F.when(~value_null & v.isNull(), _reason("bad_json", "value is not valid JSON")))
    checks.append(F.when(~value_null & ~vs.rlike(r"^\s*\{"), _reason("not_an_object", "value is not a JSON object")))
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
        checks.extend(F.when(~value_null, c) for c in _field_checks(name, spec, t, x, s))
    if ds.kind == "changelog":
        k = values[ds.key].cast("string")
        checks.append(F.when(~value_null & (key.isNull() | (key != k)), _reason(
            "key_mismatch", F.concat(F.lit("record key "), F.coalesce(key, F.lit("null")),
                                     F.lit(f" differs from field {ds.key!r} = "), F.coalesce(k, F.lit("null"))))))
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
    base, checked, final = _projections(ds, fast_path)
    return raw.select(*base).select(*checked).select(*final)


_PROJECTIONS: dict = {}


def _projections(ds: Dataset, fast_path: bool) -> tuple[list, list, list]:
    """The three projections of ``validate``, built once per dataset definition and Spark
    context: building the Column trees costs hundreds of Py4J calls, too many to repeat every
    micro-batch."""
    sc = SparkContext._active_spark_context
    key = (ds.model_dump_json(), fast_path, sc.applicationId, sc.startTime)
    if key in _PROJECTIONS:
        return _PROJECTIONS[key]
    if ds.in_registry:  # the Schema Registry's wire format: its own decoder, the same output
        return _keep(key, decode.projections(ds, PROVENANCE))
    base = [
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        "key", "value",
        F.col("key").cast("string").alias("_key"),
        F.col("value").cast("string").alias("_vs"),
    ]
    vs, key_col, value_null = F.col("_vs"), F.col("_key"), F.col("value").isNull()
    fast_ok, fast = _fast(ds, vs)
    fast_ok = fast_ok & (F.octet_length("value") <= ds.max_value_bytes)
    if not fast_path:
        fast_ok = F.lit(False)
    elif ds.kind == "changelog":
        fast_ok = fast_ok & F.coalesce(key_col == fast[ds.key].cast("string"), F.lit(False))
    reason, exact = _exact(ds, vs, value_null, key_col)
    checked = ["*", fast_ok.alias("_fast_ok"), *[x.alias(f"_f_{n}") for n, x in fast.items()]]
    ok = F.col("_fast_ok")
    fields = [F.when(ok, F.col(f"_f_{n}")).otherwise(exact[n]).alias(n) for n in ds.fields]
    if ds.kind == "changelog":
        # A tombstone's value is null: its key field comes from the record key.
        fields = [F.when(ok, F.col(f"_f_{n}")).otherwise(F.coalesce(exact[n].cast("string"), key_col)).alias(n)
                  if n == ds.key else f for n, f in zip(ds.fields, fields)]
        fields.append(value_null.alias("_deleted"))
    final = [*PROVENANCE, "key", "value", F.when(~ok, reason).alias("_reason"), *fields]
    return _keep(key, (base, checked, final))


def _keep(key: tuple, projections: tuple[list, list, list]) -> tuple[list, list, list]:
    if len(_PROJECTIONS) > 32:  # bounded: a long test session sees many datasets
        _PROJECTIONS.clear()
    _PROJECTIONS[key] = projections
    return projections


# A pass notes quarantined offsets one by one (for a second pass that parses only them)
# while its range holds at most this many offsets; beyond, it notes one window per
# partition (lowest..highest bad offset), so the driver's memory stays bounded whatever
# the bad fraction: 10 M malformed records in a row are two numbers, not a 10 M list.
EXACT_BAD_LIMIT = 1_000_000

# The quarantined records of a pass ride to the driver in its observation while they are at
# most this many rows and bytes (io.loglake.spark.BoundedCollect, jvm/spark-ext): the
# quarantine is then written from them, with no second pass over the range and no read by the
# driver. Beyond, the aggregate keeps only a count (the driver's memory stays bounded).
CARRY_ROWS = 10_000
CARRY_BYTES = 16 << 20
# What rides: a quarantine row but its layer (the writer adds it).
CARRIED = contracts.Contract(tuple(c for c in contracts.QUARANTINE.columns if c.name != "_layer"))


def _carry(bad: Column) -> Column:
    """The bounded aggregate of the quarantine rows of the records ``bad`` marks."""
    jvm = SparkContext._jvm
    agg = getattr(jvm, "io.loglake.spark.BoundedCollect") if jvm is not None else None
    if not isinstance(agg, JavaClass):
        raise SetupError("loglake's Spark extension (io.loglake.spark.BoundedCollect) is not on this Spark "
                         "session's class path: the spark jar set lacks loglake-spark-ext.jar; run `make setup`")
    made = {"reason_code": F.col("_reason.code"), "reason": F.col("_reason.message")}
    row = F.when(bad, F.struct(*(made.get(c, F.col(c)).alias(c) for c in CARRIED.names)))
    return JvmColumn(agg.column(row._jc, CARRIED.ddl, CARRY_ROWS, CARRY_BYTES))


def counted(validated: DataFrame, ranges: Sequence[OffsetRange] = (), *, partitions: Sequence[int] = (),
            exact: bool = True, fresh_from: Sequence[int | None] = ()) -> tuple[DataFrame, Observation]:
    """``validated`` with its rows counted as a write reads them (no extra pass).

    After the first action on the returned frame (or one derived from it), the
    observation's ``get`` holds ``records`` (valid), ``quarantined`` and, per range ``i``
    of ``ranges``, ``records_<i>`` and ``quarantined_<i>``; ``carried``: the quarantined
    rows themselves while they are few (``CARRY_ROWS``, ``CARRY_BYTES``; ``quarantined``
    writes them); and where the quarantined records are, for ``bad_records`` when they are
    more: ``bad`` ("p:o,p:o,...", ``exact``) or, per partition in ``partitions``,
    ``bad_min_<p>`` and ``bad_max_<p>`` (not ``exact``: bounded). With ``fresh_from`` (an
    offset or None per range), ``fresh_<i>``: range ``i``'s valid records from that offset on.
    """
    bad = F.col("_reason").isNotNull()
    metrics = [F.count_if(~bad).alias("records"), F.count_if(bad).alias("quarantined"),
               _carry(bad).alias("carried"), F.collect_set(F.col("_reason.code")).alias("codes")]
    if exact:
        # "p:o,p:o,...": a string crosses Py4J in one piece, a list of rows would not.
        metrics.append(F.concat_ws(",", F.collect_list(F.when(bad, F.concat_ws(":", "_partition", "_offset"))))
                       .alias("bad"))
    else:
        for p in partitions:
            here_bad = bad & (F.col("_partition") == p)
            metrics += [F.min(F.when(here_bad, F.col("_offset"))).alias(f"bad_min_{p}"),
                        F.max(F.when(here_bad, F.col("_offset"))).alias(f"bad_max_{p}")]
    for i, r in enumerate(ranges):
        here = (F.col("_partition") == r.partition) & (F.col("_offset") >= r.start) & (F.col("_offset") < r.end)
        metrics += [F.count_if(here & ~bad).alias(f"records_{i}"), F.count_if(here & bad).alias(f"quarantined_{i}")]
        if i < len(fresh_from) and fresh_from[i] is not None:
            metrics.append(F.count_if(here & ~bad & (F.col("_offset") >= fresh_from[i])).alias(f"fresh_{i}"))
    obs = Observation("loglake_counts")
    return validated.observe(obs, *metrics), obs


# The quarantined records of a pass are read again by the driver (a Kafka client, no Spark
# job) when they are at most this many; more go through a second Spark pass over the range.
DRIVER_READ_LIMIT = 1_000
# The driver reads on from one quarantined offset to the next when the offsets it would read
# in all are at most this many (a few per cent malformed in a micro-batch), else it seeks.
DRIVER_READ_SPAN = 200_000


def quarantined(raw: DataFrame, counts: dict, ds: Dataset, layer: str, config, topic: str) -> DataFrame:
    """The quarantine rows of a pass that ``counted`` saw quarantine some: those its observation
    carried when they are all there, else the records ``bad_records`` reads again, validated again."""
    carried = carried_rows(counts, layer)
    if carried is not None:
        return raw.sparkSession.createDataFrame(carried, contracts.QUARANTINE.ddl)
    return quarantine_rows(validate(bad_records(raw, counts, config, topic), ds), layer)


def reason_counts(counts: dict) -> dict[str, int] | None:
    """Quarantined records per reason code, from the rows a pass carried (``counted``); None
    when it did not carry them all (``observe_reasons`` counts them as they are written)."""
    rows = counts["carried"]["rows"] if counts.get("carried") is not None else None
    if rows is None or len(rows) != counts["quarantined"]:
        return None
    at = CARRIED.names.index("reason_code")
    out: dict[str, int] = {}
    for r in rows:
        out[r[at]] = out.get(r[at], 0) + 1
    return out


def observe_reasons(rows: DataFrame, codes: Sequence[str]) -> tuple[DataFrame, Callable[[], dict[str, int]]]:
    """Quarantine ``rows`` counted per reason code as a write reads them; ``codes``: the codes
    ``counted`` saw (its ``codes``, a handful). The second value reads the counts after the write."""
    codes = sorted(codes)
    obs = Observation("loglake_reasons")
    observed = rows.observe(obs, F.count(F.lit(1)).alias("all"),
                            *(F.count_if(F.col("reason_code") == c).alias(f"r{i}") for i, c in enumerate(codes)))

    def read() -> dict[str, int]:
        got = obs.get
        out = {c: got[f"r{i}"] for i, c in enumerate(codes) if got[f"r{i}"]}
        rest = got["all"] - sum(out.values())
        if rest:
            out["other"] = rest
        return out
    return observed, read


def carried_arrow(counts: dict, layer: str):
    """``carried_rows`` as a pyarrow Table of the quarantine's columns (None as there)."""
    import pyarrow as pa  # deferred: only a pass with quarantined records needs it

    rows = carried_rows(counts, layer)
    return None if rows is None else pa.Table.from_pylist(rows, schema=contracts.QUARANTINE.arrow_schema())


def carried_rows(counts: dict, layer: str) -> list[dict] | None:
    """The quarantine rows (``{column: value}``, timestamps as UTC instants) of the records a pass
    carried (``counted``), when it carried every quarantined one (a task run twice would have
    given more); else None."""
    rows = counts["carried"]["rows"] if counts.get("carried") is not None else None
    if rows is None or len(rows) != counts["quarantined"]:
        return None
    names = CARRIED.names
    out = []
    for r in rows:
        row = dict(zip(names, r), _layer=layer)
        ts = row["_kafka_timestamp"]  # pyspark hands timestamps over as naive local times
        row["_kafka_timestamp"] = ts.astimezone(timezone.utc) if ts is not None else None
        out.append(row)
    return out


def bad_records(raw: DataFrame, counts: dict, config, topic: str) -> DataFrame:
    """The Kafka rows of ``raw`` that ``counted`` saw quarantined (exactly those, or every
    row of each partition's bad window): what a second pass parses again. A few exact offsets
    are read by the driver from ``topic`` (``config``'s cluster) instead of by a Spark pass."""
    if "bad" in counts:
        if counts.get("quarantined", 0) <= DRIVER_READ_LIMIT:
            read = _read_in_driver(raw, config, topic, counts["bad"])
            if read is not None:
                return read
        return only_offsets(raw, counts["bad"])
    windows = [(int(k[len("bad_min_"):]), v, counts[f"bad_max_{k[len('bad_min_'):]}"])
               for k, v in counts.items() if k.startswith("bad_min_") and v is not None]
    if not windows:
        return raw.limit(0)
    inside = [(F.col("partition") == p) & F.col("offset").between(lo, hi) for p, lo, hi in windows]
    return raw.where(reduce(lambda a, b: a | b, inside))


def _offset_pairs(offsets: str) -> dict[int, list[int]]:
    """``counted``'s "p:o,p:o,..." as {partition: [offsets]}."""
    wanted: dict[int, list[int]] = {}
    for pair in offsets.split(","):
        p, o = pair.split(":")
        wanted.setdefault(int(p), []).append(int(o))
    return wanted


def _read_in_driver(raw: DataFrame, config, topic: str, offsets: str) -> DataFrame | None:
    """The records at ``counted``'s "p:o,p:o,..." offsets read by a Kafka client in the
    driver, as rows of ``raw``'s schema (the same bytes Spark read: the log is immutable);
    None when one is not there any more (compacted or deleted since) or the reading did not
    finish in time: the Spark pass then decides, as before."""
    wanted = _offset_pairs(offsets)
    span = sum(max(offs) - min(offs) + 1 for offs in wanted.values())
    try:
        records = read_records(config, topic, wanted, read_on=512 if span <= DRIVER_READ_SPAN else 0)
    except KafkaUnavailableError:  # slow or away: the Spark pass has the job's whole time
        return None
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    rows = []
    for p, offs in wanted.items():
        for o in offs:
            m = records.get((p, o))
            if m is None or m.offset() != o:
                return None
            ts_type, ts = m.timestamp()
            row = {"key": m.key(), "value": m.value(), "topic": topic, "partition": p, "offset": o,
                   "timestamp": epoch + timedelta(milliseconds=ts), "timestampType": ts_type - 1}
            rows.append(tuple(row[f.name] for f in raw.schema.fields))
    return raw.sparkSession.createDataFrame(rows, raw.schema)


def only_offsets(raw: DataFrame, offsets: str) -> DataFrame:
    """The Kafka rows of ``raw`` at ``counted``'s "p:o,p:o,..." offsets: a second pass over a
    range then parses only those (typically the few quarantined ones), not every record."""
    pairs = [(p, o) for p, offs in _offset_pairs(offsets).items() for o in offs]
    wanted = raw.sparkSession.createDataFrame(pairs, "partition int, offset long")
    # Materialised (only those rows): otherwise Spark pushes the caller's filter on
    # ``_reason`` below the join, and that filter would parse every record of the range.
    return raw.join(F.broadcast(wanted), ["partition", "offset"], "left_semi").localCheckpoint(eager=True)


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
