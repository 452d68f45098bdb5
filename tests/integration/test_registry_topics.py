"""Topics in the Schema Registry's Avro format, through a real registry (Apicurio, Confluent
API), a real broker and Spark: decoded the same in speed and batch, evolved through the
registry, bad records quarantined each with its own reason.

The records are written by confluent-kafka's own ``AvroSerializer`` (not by loglake's
producer), and what the tables hold is checked against what was written, so a bug shared by
loglake's writer and reader cannot hide.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import functions as F

from loglake.batch.planning import plan_batch
from loglake.schemaregistry.resolve import resolve
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration

V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"},
                                                         {"name": "qty", "type": "int"}]}}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
# An optional field added: taken while data flows, the rows before it read null.
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": ["null", "string"], "default": None}]}
# A field the tables hold dropped: refused as the tables' schema, its records quarantined.
V3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "amount"]}
# The fix: amount made optional (a rule loosened). The tables take it, and version 3's records
# read amount as null.
V4 = {**V2, "fields": [{**f, "type": ["null", f["type"]], "default": None} if f["name"] == "amount" else f
                       for f in V2["fields"]]}

ORDERS = {"kind": "events", "partitions": 3, "key": "order_id", "format": "avro"}


@pytest.fixture
def config(make_config, registry_url):
    return make_config(registry=registry_url, extra_datasets={"orders": ORDERS})


def order(i: int, channel: bool = False) -> dict:
    v = {"order_id": i, "placed_at": datetime(2026, 11, 26, 12, 0, i % 60, (i % 1000) * 1000, tzinfo=timezone.utc),
         "day": datetime(2026, 11, 1 + i % 28).date(), "amount": Decimal(f"{i}.{i % 100:02d}"),
         "lines": [{"sku": f"sku-{i}", "qty": i % 7}], "tags": {"n": str(i)}, "note": None if i % 2 else f"n{i}"}
    if channel:
        v["channel"] = "web" if i % 3 else None
    return v


class Writer:
    """A plain confluent-kafka producer with its Avro serializer, as any shop's producer is."""

    def __init__(self, config, ds):
        self.registry = SchemaRegistryClient({"url": config.registry.url})
        self.topic, self.subject = ds.topic, ds.subject_name
        self.serializers: dict[str, AvroSerializer] = {}
        self.producer = Producer({"bootstrap.servers": config.kafka.bootstrap_servers, "enable.idempotence": True,
                                  "logger": logging.getLogger("tests.kafka")})

    def register(self, schema: dict) -> int:
        return self.registry.register_schema(self.subject, Schema(json.dumps(schema), "AVRO"))

    def write(self, schema: dict, values: list[dict]) -> None:
        text = json.dumps(schema)
        if text not in self.serializers:  # one per schema: it keeps the id it looked up
            self.serializers[text] = AvroSerializer(self.registry, text, conf={"auto.register.schemas": False})
        ser = self.serializers[text]
        ctx = SerializationContext(self.topic, MessageField.VALUE)
        for v in values:
            self.producer.produce(self.topic, key=str(v["order_id"]).encode(), value=ser(v, ctx))
        self.raw([])

    def raw(self, values: list[bytes]) -> None:
        for v in values:
            self.producer.produce(self.topic, key=b"raw", value=v)
        assert self.producer.flush(30) == 0


def framed(schema_id: int, schema: dict, value: dict) -> bytes:
    """The registry's wire format written by hand (fastavro): magic byte, id, payload."""
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return bytes([0]) + schema_id.to_bytes(4, "big") + buf.getvalue()


def rows(spark, path: str):
    return spark.read.format("delta").load(path)


def publish_all(spark, config, ds):
    """The batch and quality jobs as ``loglake.jobs.entry.execute`` runs them: the dataset resolved first."""
    plan = plan_batch(config, ds)
    return recompute_and_publish(spark, config, resolve(config, ds), plan, run_id=f"test-{plan.ranges[0].end}")


def test_an_avro_topic_evolving_mid_stream_lands_once_in_speed_and_batch_and_they_agree(spark, config):
    ds = config.dataset("orders")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    w.register(V1)
    w.write(V1, [order(i) for i in range(1, 151)])
    run_speed(spark, config, ds, available_now=True)
    w.register(V2)
    w.write(V2, [order(i, channel=True) for i in range(151, 301)])
    run_speed(spark, config, ds, available_now=True)

    speed = rows(spark, config.table_path(ds, "speed"))
    types = dict(speed.dtypes)
    assert {n: types[n] for n in ("order_id", "placed_at", "day", "amount", "lines", "tags", "note", "channel")} == {
        "order_id": "bigint", "placed_at": "timestamp", "day": "date", "amount": "decimal(10,2)",
        "lines": "array<struct<sku:string,qty:int>>", "tags": "map<string,string>", "note": "string",
        "channel": "string"}
    assert speed.count() == 300 and speed.select("_partition", "_offset").distinct().count() == 300
    got = {r["order_id"]: r for r in speed.collect()}
    for i in (1, 2, 150, 151, 152, 300):
        want, r = order(i, channel=i > 150), got[i]
        assert r["placed_at"].astimezone(timezone.utc) == want["placed_at"]
        assert [r[k] for k in ("day", "amount", "note", "tags")] == [want[k] for k in ("day", "amount", "note", "tags")]
        assert [(x["sku"], x["qty"]) for x in r["lines"]] == [(x["sku"], x["qty"]) for x in want["lines"]]
        assert r["channel"] == want.get("channel")  # the rows written before version 2 read null
    assert rows(spark, config.table_path(ds, "quarantine")).count() == 0

    publish_all(spark, config, ds)
    batch = rows(spark, config.table_path(ds, "batch"))
    # Row for row, every field (a map as its JSON: set operations do not compare maps).
    cols = [F.to_json(c).alias(c) if c == "tags" else c for c in speed.columns
            if not c.startswith("_") or c in ("_partition", "_offset")]
    assert batch.count() == 300
    assert speed.select(*cols).exceptAll(batch.select(*cols)).count() == 0
    assert batch.select(*cols).exceptAll(speed.select(*cols)).count() == 0


def test_each_kind_of_bad_record_is_quarantined_with_its_reason(spark, config):
    ds = config.dataset("orders")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    v1 = w.register(V1)
    w.write(V1, [order(i) for i in range(1, 21)])
    good = AvroSerializer(w.registry, json.dumps(V1), conf={"auto.register.schemas": False})(
        order(99), SerializationContext(ds.topic, MessageField.VALUE))
    w.raw([json.dumps({"order_id": 1}).encode(),                        # no magic byte
           bytes([0]) + (2_000_000_000).to_bytes(4, "big") + good[5:],  # an id no registry gave
           good[:5] + b"\xff\xff\xff"])                                 # does not decode with v1
    run_speed(spark, config, ds, available_now=True)  # the tables hold version 1 now
    w.registry.set_compatibility(ds.subject_name, "NONE")
    w.register(V2)
    w.register(V3)  # drops amount, which the tables hold
    w.write(V3, [{k: v for k, v in order(i, channel=True).items() if k != "amount"} for i in range(21, 26)])

    resolved = resolve(config, ds)
    assert resolved.registry.version == 2 and resolved.registry.refused_version == 3
    assert "amount" in resolved.registry.refused
    run_speed(spark, config, ds, available_now=True)

    q = {r["reason_code"]: r for r in rows(spark, config.table_path(ds, "quarantine")).collect()}
    reasons = rows(spark, config.table_path(ds, "quarantine")).groupBy("reason_code").count().collect()
    assert {r["reason_code"]: r["count"] for r in reasons} == {
        "no_magic_byte": 1, "unknown_schema_id": 1, "undecodable": 1, "incompatible_schema": 5}
    assert "2000000000 is not a version of subject" in q["unknown_schema_id"]["reason"]
    assert f"schema id {v1}" in q["undecodable"]["reason"]
    assert "version 3" in q["incompatible_schema"]["reason"]
    assert "amount: removed" in q["incompatible_schema"]["reason"]
    assert q["no_magic_byte"]["value"] == json.dumps({"order_id": 1}).encode()
    speed = rows(spark, config.table_path(ds, "speed"))
    assert speed.count() == 20
    assert speed.where(F.col("channel").isNotNull()).count() == 0
    # What loglake status (and the UI page) says: the format, the subject's version the tables
    # hold, and what was refused.
    from loglake.ops.status import dataset_status, format_status

    lines = format_status(ds, dataset_status(config, ds))
    shown = next(line for line in lines if line.strip().startswith("format:"))
    assert f"format: avro, subject {ds.subject_name} version 2 (schema id " in shown
    assert "REFUSED" in shown and "version 3" in shown and "amount" in shown

    # Each fixed where it can be: amount made optional (version 4) lets the tables hold
    # version 3's records; a replay moves them, and the records no registry change can mend
    # stay quarantined, once.
    from loglake.lifecycle.replay_job import replay

    w.register(V4)
    summary = replay(spark, config, resolve(config, ds), "replay-fixed")
    assert summary.speed == {"valid": {"incompatible_schema": 5},
                             "invalid": {"no_magic_byte": 1, "unknown_schema_id": 1, "undecodable": 1}}
    speed = rows(spark, config.table_path(ds, "speed"))
    assert speed.count() == 25 and speed.select("_partition", "_offset").distinct().count() == 25
    moved = speed.where("order_id BETWEEN 21 AND 25").collect()
    assert len(moved) == 5 and {r["amount"] for r in moved} == {None} and {r["channel"] for r in moved} == {"web", None}
    left = rows(spark, config.table_path(ds, "quarantine")).groupBy("reason_code").count().collect()
    assert {r["reason_code"]: r["count"] for r in left} == {"no_magic_byte": 1, "unknown_schema_id": 1,
                                                           "undecodable": 1}


# A field added as a union with null but without a default: Avro cannot read the records written
# before it with this version as the reader (its rules ask for the default), so it must not
# become the tables' schema.
NO_DEFAULT = {**V1, "fields": [*V1["fields"], {"name": "campaign", "type": ["null", "string"]}]}
# The fix: the same field with its default.
WITH_DEFAULT = {**V1, "fields": [*V1["fields"], {"name": "campaign", "type": ["null", "string"], "default": None}]}


def test_a_version_avro_cannot_read_the_tables_records_with_is_refused_while_the_stream_runs(spark, config):
    from loglake.ops.audit import audit_dataset
    from loglake.serving.spark import query as serve
    from loglake.speed.stream import start_stream

    ds = config.dataset("orders")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    w.register(V1)
    w.write(V1, [order(i) for i in range(1, 61)])
    stream, _recorder = start_stream(spark, config, ds)
    try:
        stream.processAllAvailable()
        # Registered while the query runs (the stream's registry follower, not a restart, meets it).
        w.register(NO_DEFAULT)
        w.write(NO_DEFAULT, [{**order(i), "campaign": f"c{i}" if i % 2 else None} for i in range(61, 81)])
        w.write(V1, [order(i) for i in range(81, 101)])  # older producers keep writing version 1
        stream.processAllAvailable()
        assert stream.exception() is None
    finally:
        stream.stop()
    publish_all(spark, config, ds)

    v1_ids = set(range(1, 61)) | set(range(81, 101))
    for layer in ("speed", "batch"):
        table = rows(spark, config.table_path(ds, layer))
        assert {r["order_id"] for r in table.collect()} == v1_ids, layer  # every valid record, none quarantined
        assert "campaign" not in table.columns, layer  # the refused version was never applied
        q = rows(spark, config.table_path(ds, "quarantine")).where(F.col("_layer") == layer).collect()
        assert {r["reason_code"] for r in q} == {"incompatible_schema"} and len(q) == 20, layer
    reason = q[0]["reason"]
    assert f"subject {ds.subject_name} version 2" in reason and "campaign" in reason, reason
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in reason, reason  # Avro's own word for it
    assert serve(spark, config, "SELECT count(*) AS n FROM orders").first()["n"] == len(v1_ids)
    assert audit_dataset(config, ds, record=False).ok

    # The way forward: the field again, with its default. The tables take it (Avro reads both
    # earlier versions' records with it), so a replay of incompatible_schema (which
    # test_each_kind_of_bad_record_is_quarantined_with_its_reason runs) moves version 2's records.
    w.register(WITH_DEFAULT)
    mended = resolve(config, ds).registry
    assert mended.version == 3 and mended.refused is None and [v.refused for v in mended.writers] == [None] * 3


def record(*fields: dict, name: str = "Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": [ID, *fields]})


ID = {"name": "order_id", "type": "long"}
WHO = {"name": "who", "type": "string"}


def status(*symbols: str) -> dict:
    return {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": list(symbols)}}


def lines(*more: dict) -> dict:
    return {"name": "lines", "type": {"type": "array", "items": {
        "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}, *more]}}}


# Records written with one schema read with another: what Avro says (None: it reads them; else its
# incompatibility and the reader's field it names), and which of the two versions the tables take
# when the second is registered after the first (loglake's rules of schema change and Avro's).
READS = [
    # (case, writer: version 1, reader: version 2, Avro's verdict, the version the tables take)
    ("a field added with a default", record(WHO), record(WHO, {"name": "x", "type": ["null", "int"], "default": None}),
     None, 2),
    ("a field added as a union with null, no default", record(WHO),
     record(WHO, {"name": "campaign", "type": ["null", "string"]}),
     ("READER_FIELD_MISSING_DEFAULT_VALUE", "campaign"), 1),
    ("a field added without a default", record(WHO), record(WHO, {"name": "n", "type": "int"}),
     ("READER_FIELD_MISSING_DEFAULT_VALUE", "n"), 1),
    ("a field removed", record(WHO), record(), None, 1),  # Avro reads it; the tables keep their column
    ("a field the writer lacks", record(), record(WHO), ("READER_FIELD_MISSING_DEFAULT_VALUE", "who"), 1),
    ("int promoted to long", record({"name": "n", "type": "int"}), record({"name": "n", "type": "long"}), None, 1),
    ("long read as int", record({"name": "n", "type": "long"}), record({"name": "n", "type": "int"}),
     ("TYPE_MISMATCH", "n"), 1),
    ("string read as bytes", record(WHO), record({"name": "who", "type": "bytes"}), None, 1),
    ("an enum symbol added", record(status("NEW", "PAID")), record(status("NEW", "PAID", "SENT")), None, 2),
    ("an enum symbol dropped", record(status("NEW", "PAID")), record(status("NEW")),
     ("MISSING_ENUM_SYMBOLS", "status"), 1),
    ("null no longer allowed", record({"name": "who", "type": ["null", "string"], "default": None}), record(WHO),
     ("TYPE_MISMATCH", "who"), 1),
    ("a nested record's field added without a default", record(lines()), record(lines({"name": "qty", "type": "int"})),
     ("READER_FIELD_MISSING_DEFAULT_VALUE", "lines.qty"), 1),
    ("the record renamed", record(WHO), record(WHO, name="Purchase"), ("NAME_MISMATCH", None), 1),
    ("the record renamed with an alias", record(WHO),
     json.dumps({**json.loads(record(WHO, name="Purchase")), "aliases": ["shop.Order"]}), None, 2),
]

ASK_WITHOUT_SPARK = """
import json, sys
from loglake.schemaregistry import avro
with avro.compatibility() as cannot_read:
    said = [cannot_read(r, w) for r, w in json.load(sys.stdin)]
print(json.dumps({"said": said, "spark": "pyspark" in sys.modules}))
"""


def test_whether_a_schema_reads_a_writers_records_is_avros_own_rule_with_spark_or_without(spark):
    import subprocess
    import sys

    from loglake.schemaregistry import avro

    with avro.compatibility() as cannot_read:  # this process runs a Spark driver: its JVM answers
        said = [cannot_read(reader, writer) for _case, writer, reader, _avro, _taken in READS]
    for (case, _w, _r, expected, _taken), got in zip(READS, said):
        if expected is None:
            assert got is None, f"{case}: {got}"
        else:
            kind, field = expected
            assert got is not None and kind in got, f"{case}: {got}"
            assert (f"field {field!r}" if field else "the record") in got, f"{case}: {got}"
    # Without Spark (the CLI, Airflow): a JVM of its own, the same words.
    out = subprocess.run([sys.executable, "-c", ASK_WITHOUT_SPARK], capture_output=True, text=True, timeout=120,
                         input=json.dumps([(reader, writer) for _c, writer, reader, _a, _t in READS]))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"said": said, "spark": False}


def test_the_tables_take_a_version_only_when_it_reads_the_records_before_it(config):
    from loglake.schemaregistry import Version

    ds = config.dataset("orders")
    for case, writer, reader, avro_says, taken in READS:
        v1, v2 = Version(1, 101, "AVRO", writer), Version(2, 102, "AVRO", reader)
        schemas = resolve(config, ds, [v1, v2]).registry
        assert schemas.version == taken, f"{case}: {schemas.refused}"
        if taken == 2:
            assert schemas.refused is None and [w.refused for w in schemas.writers] == [None, None], case
            continue
        # Refused by name, and never applied: its records are not read as the tables'.
        assert f"subject {ds.subject_name} version 2 is refused" in schemas.refused, case
        if avro_says is not None:
            assert "cannot read the records of version 1" in schemas.refused and avro_says[0] in schemas.refused, case
        assert schemas.writers[0].refused is None, case
        assert "version 2 (id 102), which the tables (version 1) cannot hold" in schemas.writers[1].refused, case

    # A version refused leaves the tables where they were: the version that mends it is judged by
    # the records that landed (version 1's), not by the refused one's.
    v1 = Version(1, 101, "AVRO", record(WHO))
    dropped = Version(2, 102, "AVRO", record())  # who dropped: a column the tables hold
    mended = Version(3, 103, "AVRO", record(WHO, {"name": "x", "type": ["null", "int"], "default": None}))
    schemas = resolve(config, ds, [v1, dropped, mended]).registry
    assert schemas.version == 3 and schemas.refused is None
    assert [w.refused is None for w in schemas.writers] == [True, False, True]
    assert "field 'who': READER_FIELD_MISSING_DEFAULT_VALUE" in schemas.writers[1].refused


# A flat schema loglake's own generator can fill (``loglake produce``'s path).
CLICKS = {"type": "record", "name": "Click", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "referrer", "type": ["null", "string"], "default": None}]}


# make test-long only; make test covers its parts: a transactional topic's committed records once and its
# aborted ones nowhere, in micro-batches and after a replay, in test_transactions; Avro topics through the
# registry, evolving mid-stream, in the tests above.
@pytest.mark.long
def test_an_avro_topic_written_in_transactions_lands_its_committed_records_once_and_no_aborted_one(
        spark, make_config, registry_url):
    from loglake.local.produce import produce
    from loglake.schemaregistry import register
    from loglake.schemaregistry.serializers import encoder
    from tests.integration.test_transactions import landed, log_offsets

    config = make_config(registry=registry_url, extra_datasets={
        "clicks": {"kind": "events", "partitions": 3, "key": "user_id", "format": "avro"}})
    ds = config.dataset("clicks")
    register(config, ds.subject_name, json.dumps(CLICKS))
    enc = encoder(config, ds)
    plain = produce(config, ds, 300, bad_fraction=0.05, seed=301, encoder=enc)
    txn = produce(config, ds, 600, bad_fraction=0.05, seed=302, transactional=True, transaction_size=40,
                  abort_every=3, encoder=enc)
    assert (txn.transactions, txn.aborted_transactions, txn.aborted) == (15, 5, 200)
    committed = log_offsets(config, ds.topic, "read_committed")
    aborted = log_offsets(config, ds.topic, "read_uncommitted") - committed
    assert len(committed) == plain.records + txn.records == 700 and len(aborted) == 200

    run_speed(spark, config, ds, available_now=True)
    publish_all(spark, config, ds)
    for layer in ("speed", "batch"):
        got = landed(spark, config, ds, layer)
        assert len(got) == len(set(got)), f"an offset landed twice in the {layer} layer"
        assert set(got) == committed, f"{layer}: not every committed record once, or an aborted one landed"
    q = rows(spark, config.table_path(ds, "quarantine")).where("_layer = 'speed'")
    assert q.count() == plain.bad + txn.bad
    assert {r[0] for r in q.select("reason_code").distinct().collect()} <= {
        "no_magic_byte", "unknown_schema_id", "undecodable"}


def test_a_registry_outage_mid_stream_is_waited_out_without_a_lost_or_quarantined_record(spark, services, config,
                                                                                           caplog):
    import threading

    caplog.set_level(logging.INFO, logger="loglake.retry")
    from loglake.speed.stream import start_stream

    ds = config.dataset("orders")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    w.register(V1)
    w.write(V1, [order(i) for i in range(1, 41)])
    query, _recorder = start_stream(spark, config, ds)
    try:
        query.processAllAvailable()
        registry = services.registry
        registry.stop()
        try:
            assert not registry.answers()
            w.write(V1, [order(i) for i in range(41, 81)])  # the serializer knows its id already
            back = threading.Timer(3.0, registry.start)
            back.start()
            query.processAllAvailable()  # the micro-batch waits for the registry, then lands
            back.join()
        finally:
            registry.start()
        assert query.exception() is None
    finally:
        query.stop()
    waited = [r.getMessage() for r in caplog.records if "RegistryUnavailableError" in r.getMessage()]
    assert waited, "the micro-batch never met the outage (the test would prove nothing)"
    speed = rows(spark, config.table_path(ds, "speed"))
    assert speed.count() == 80 and speed.select("_partition", "_offset").distinct().count() == 80
    assert rows(spark, config.table_path(ds, "quarantine")).count() == 0


def test_records_of_a_schema_not_yet_in_the_subject_are_replayed_once_it_is(spark, config):
    from loglake.lifecycle.replay_job import replay

    ds = config.dataset("orders")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    w.register(V1)
    # Version 2 is registered under another subject only: its records carry an id the
    # dataset's subject does not have yet.
    v2_id = w.registry.register_schema(f"{ds.subject_name}-staging", Schema(json.dumps(V2), "AVRO"))
    w.write(V1, [order(i) for i in range(1, 11)])
    w.raw([framed(v2_id, V2, order(i, channel=True)) for i in range(11, 16)])
    run_speed(spark, config, ds, available_now=True)
    q = rows(spark, config.table_path(ds, "quarantine"))
    assert {r["reason_code"] for r in q.collect()} == {"unknown_schema_id"} and q.count() == 5

    assert w.register(V2) == v2_id  # the same schema under the dataset's subject: the same id
    summary = replay(spark, config, resolve(config, ds), "replay-test")
    assert summary.speed == {"valid": {"unknown_schema_id": 5}, "invalid": {}}
    speed = rows(spark, config.table_path(ds, "speed"))
    assert speed.count() == 15 and speed.where("channel = 'web'").count() == 3
    assert rows(spark, config.table_path(ds, "quarantine")).where("_layer = 'speed'").count() == 0


SHIPMENT_V1 = {"type": "object", "properties": {
    "shipment_id": {"type": "integer"}, "sent_at": {"type": "string", "format": "date-time"},
    "weight": {"type": "number"}, "parcels": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
    "carrier": {"type": ["null", "string"]}}, "required": ["shipment_id", "sent_at", "weight"]}
SHIPMENT_V2 = {**SHIPMENT_V1, "properties": {**SHIPMENT_V1["properties"], "insured": {"type": "boolean"}}}
# The fix of a record without a weight: weight no longer required (a rule loosened).
SHIPMENT_V3 = {**SHIPMENT_V2, "required": ["shipment_id", "sent_at"]}


def test_a_json_schema_topic_evolving_lands_once_in_speed_and_batch_and_bad_records_get_their_reasons(
        spark, make_config, registry_url):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    config = make_config(registry=registry_url, extra_datasets={
        "shipments": {"kind": "events", "partitions": 2, "key": "shipment_id", "format": "json-schema"}})
    ds = config.dataset("shipments")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    ctx = SerializationContext(ds.topic, MessageField.VALUE)

    def shipment(i: int, insured: bool = False) -> dict:
        v = {"shipment_id": i, "sent_at": f"2026-11-26T10:{i % 60:02d}:00.000Z", "weight": i + 0.5,
             "parcels": [{"sku": f"s{i}", "qty": 1 + i % 3}], "carrier": None if i % 2 else "dhl"}
        if insured:
            v["insured"] = i % 2 == 0
        return v

    def write(schema: dict, values: list[dict]) -> bytes:
        ser = JSONSerializer(json.dumps(schema), w.registry, conf={"auto.register.schemas": False})
        out = [ser(v, ctx) for v in values]
        for v, b in zip(values, out):
            w.producer.produce(ds.topic, key=str(v["shipment_id"]).encode(), value=b)
        w.raw([])
        return out[0]

    w.registry.register_schema(ds.subject_name, Schema(json.dumps(SHIPMENT_V1), "JSON"))
    first = write(SHIPMENT_V1, [shipment(i) for i in range(1, 31)])
    w.raw([b'{"shipment_id": 1}',                                             # no magic byte
           first[:5] + b'{"shipment_id": 7, "sent_at": "2026-11-26T10:00:00Z"',  # not JSON
           first[:5] + b'{"shipment_id": "x7", "sent_at": "2026-11-26T10:00:00Z", "weight": 1}',  # a wrong type
           first[:5] + b'{"shipment_id": 8, "sent_at": "2026-11-26T10:00:00Z"}'])  # a required field missing
    run_speed(spark, config, ds, available_now=True)
    w.registry.register_schema(ds.subject_name, Schema(json.dumps(SHIPMENT_V2), "JSON"))
    write(SHIPMENT_V2, [shipment(i, insured=True) for i in range(31, 61)])
    run_speed(spark, config, ds, available_now=True)
    publish_all(spark, config, ds)

    speed, batch = (rows(spark, config.table_path(ds, layer)) for layer in ("speed", "batch"))
    assert dict(speed.dtypes)["parcels"] == "array<struct<sku:string,qty:bigint>>"
    assert dict(speed.dtypes)["sent_at"] == "timestamp" and dict(speed.dtypes)["insured"] == "boolean"
    assert speed.count() == batch.count() == 60
    cols = [c for c in speed.columns if not c.startswith("_") or c in ("_partition", "_offset")]
    assert speed.select(*cols).exceptAll(batch.select(*cols)).count() == 0
    assert batch.select(*cols).exceptAll(speed.select(*cols)).count() == 0
    got = {r["shipment_id"]: r for r in speed.collect()}
    assert got[2]["carrier"] == "dhl" and got[2]["insured"] is None and got[32]["insured"] is True
    assert got[5]["parcels"][0]["qty"] == 3 and got[5]["weight"] == 5.5
    q = rows(spark, config.table_path(ds, "quarantine"))
    for layer in ("speed", "batch"):
        reasons = {r["reason_code"]: r["count"] for r in q.where(F.col("_layer") == layer)
                   .groupBy("reason_code").count().collect()}
        assert reasons == {"no_magic_byte": 1, "undecodable": 2, "missing_field": 1}, layer

    # weight made optional: the record without one is replayed into both layers, the others stay.
    from loglake.lifecycle.replay_job import replay

    w.registry.register_schema(ds.subject_name, Schema(json.dumps(SHIPMENT_V3), "JSON"))
    summary = replay(spark, config, resolve(config, ds), "replay-fixed")
    for layer in ("speed", "batch"):
        assert getattr(summary, layer) == {"valid": {"missing_field": 1},
                                           "invalid": {"no_magic_byte": 1, "undecodable": 2}}, layer
        table = rows(spark, config.table_path(ds, layer))
        assert table.count() == 61 and table.where("shipment_id = 8 AND weight IS NULL").count() == 1, layer
        assert q.where(F.col("_layer") == layer).count() == 3, layer


PARCEL_V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Parcel {
  int64 parcel_id = 1;
  google.protobuf.Timestamp sent_at = 2;
  double weight = 3;
  enum Size { SMALL = 0; LARGE = 1; }
  Size size = 4;
  message Item { string sku = 1; int32 qty = 2; }
  repeated Item items = 5;
  map<string, string> labels = 6;
  google.protobuf.StringValue note = 7;
}
"""
# An optional field added: taken while data flows.
PARCEL_V2 = PARCEL_V1.replace("  google.protobuf.StringValue note = 7;\n",
                              "  google.protobuf.StringValue note = 7;\n  string channel = 8;\n")


def message_class(proto: str):
    """The message class of a .proto text, compiled by protoc (grpcio-tools) into a pool of its own."""
    import os
    import tempfile

    import grpc_tools
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "p.proto"), "w") as f:
            f.write(proto)
        inc = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        assert protoc.main(["protoc", f"-I{d}", f"-I{inc}", "--include_imports",
                            f"--descriptor_set_out={d}/p.pb", "p.proto"]) == 0
        fds = descriptor_pb2.FileDescriptorSet.FromString(open(f"{d}/p.pb", "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Parcel"))


def test_a_protobuf_topic_evolving_lands_once_in_speed_and_batch_and_bad_records_get_their_reasons(
        spark, make_config, registry_url):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import json_format

    config = make_config(registry=registry_url, extra_datasets={
        "parcels": {"kind": "events", "partitions": 2, "key": "parcel_id", "format": "protobuf"}})
    ds = config.dataset("parcels")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    ctx = SerializationContext(ds.topic, MessageField.VALUE)

    def parcel(cls, i: int, channel: bool = False):
        v = {"parcel_id": i, "sent_at": f"2026-11-26T10:{i % 60:02d}:00Z", "weight": i + 0.25,
             "size": "LARGE" if i % 2 else "SMALL", "items": [{"sku": f"s{i}", "qty": 1 + i % 3}],
             "labels": {"n": str(i)}}
        if i % 3:
            v["note"] = f"n{i}"
        if channel:
            v["channel"] = "web"
        return json_format.ParseDict(v, cls())

    def write(proto: str, ids: range, channel: bool = False) -> bytes:
        cls = message_class(proto)
        ser = ProtobufSerializer(cls, w.registry, conf={"use.deprecated.format": False})
        out = [ser(parcel(cls, i, channel), ctx) for i in ids]
        for i, b in zip(ids, out):
            w.producer.produce(ds.topic, key=str(i).encode(), value=b)
        w.raw([])
        return out[0]

    # As a Java producer's build would: the .proto text registered first.
    w.registry.register_schema(ds.subject_name, Schema(PARCEL_V1, "PROTOBUF"))
    first = write(PARCEL_V1, range(1, 31))
    w.raw([b'{"parcel_id": 1}',                                            # no magic byte
           bytes([0]) + (2_000_000_000).to_bytes(4, "big") + first[5:],  # an id no registry gave
           first[:5] + b"\xff\xff\xff"])                                 # does not decode
    run_speed(spark, config, ds, available_now=True)
    w.registry.register_schema(ds.subject_name, Schema(PARCEL_V2, "PROTOBUF"))
    write(PARCEL_V2, range(31, 61), channel=True)
    run_speed(spark, config, ds, available_now=True)
    publish_all(spark, config, ds)

    speed, batch = (rows(spark, config.table_path(ds, layer)) for layer in ("speed", "batch"))
    types = dict(speed.dtypes)
    assert {n: types[n] for n in ("parcel_id", "sent_at", "weight", "size", "items", "labels", "note", "channel")} == {
        "parcel_id": "bigint", "sent_at": "timestamp", "weight": "double", "size": "string",
        "items": "array<struct<sku:string,qty:int>>", "labels": "map<string,string>", "note": "string",
        "channel": "string"}
    assert speed.count() == batch.count() == 60
    cols = [F.to_json(c).alias(c) if c == "labels" else c for c in speed.columns
            if not c.startswith("_") or c in ("_partition", "_offset")]
    assert speed.select(*cols).exceptAll(batch.select(*cols)).count() == 0
    assert batch.select(*cols).exceptAll(speed.select(*cols)).count() == 0
    got = {r["parcel_id"]: r for r in speed.collect()}
    assert (got[3]["size"], got[3]["note"], got[3]["labels"], got[3]["weight"]) == ("LARGE", None, {"n": "3"}, 3.25)
    assert got[4]["note"] == "n4" and got[4]["items"][0]["qty"] == 2 and got[4]["channel"] is None
    assert got[32]["channel"] == "web"
    assert got[5]["sent_at"].astimezone(timezone.utc) == datetime(2026, 11, 26, 10, 5, tzinfo=timezone.utc)
    q = rows(spark, config.table_path(ds, "quarantine"))
    for layer in ("speed", "batch"):
        reasons = {r["reason_code"]: r["count"] for r in q.where(F.col("_layer") == layer)
                   .groupBy("reason_code").count().collect()}
        assert reasons == {"no_magic_byte": 1, "unknown_schema_id": 1, "undecodable": 1}, layer


ACCOUNT = {"type": "record", "name": "Account", "fields": [
    {"name": "account_id", "type": "long"}, {"name": "owner", "type": "string"}]}


def test_a_changelog_with_avro_keys_keeps_the_latest_state_and_deletes_on_tombstones(spark, make_config,
                                                                                    registry_url):
    config = make_config(registry=registry_url, extra_datasets={"accounts": {
        "kind": "changelog", "partitions": 2, "key": "account_id", "format": "avro", "key_format": "avro",
        "tables": {"speed": "speed.accounts", "batch": "batch.accounts", "quarantine": "quarantine.accounts",
                   "latest": "speed.accounts_latest"}}})
    ds = config.dataset("accounts")
    w = Writer(config, ds)
    from loglake.kafka.admin import ensure_topic

    ensure_topic(config, ds)
    # The key schema as confluent-kafka's serializer writes a primitive (and looks it up: Apicurio
    # compares the text, so '"long"' registered by hand would not be found).
    w.registry.register_schema(ds.key_subject_name, Schema('{"type":"long"}', "AVRO"))
    w.registry.register_schema(ds.subject_name, Schema(json.dumps(ACCOUNT), "AVRO"))
    keys = AvroSerializer(w.registry, '"long"', conf={"auto.register.schemas": False})
    values = AvroSerializer(w.registry, json.dumps(ACCOUNT), conf={"auto.register.schemas": False})
    kctx = SerializationContext(ds.topic, MessageField.KEY)
    vctx = SerializationContext(ds.topic, MessageField.VALUE)

    def send(key: int, value: dict | None) -> None:
        w.producer.produce(ds.topic, key=keys(key, kctx), value=None if value is None else values(value, vctx))

    for i in range(1, 11):
        send(i, {"account_id": i, "owner": f"first-{i}"})
    for i in range(1, 11, 2):
        send(i, {"account_id": i, "owner": f"second-{i}"})
    for i in (2, 4):
        send(i, None)  # tombstones: accounts 2 and 4 deleted
    send(6, {"account_id": 7, "owner": "wrong"})  # its key says 6, its value 7
    w.raw([])
    run_speed(spark, config, ds, available_now=True)

    latest = {r["account_id"]: r["owner"] for r in rows(spark, config.table_path(ds, "latest")).collect()}
    assert latest == {1: "second-1", 3: "second-3", 5: "second-5", 6: "first-6", 7: "second-7", 8: "first-8",
                      9: "second-9", 10: "first-10"}
    q = rows(spark, config.table_path(ds, "quarantine")).where("_layer = 'speed'").collect()
    assert [r["reason_code"] for r in q] == ["key_mismatch"] and "record key 6 differs" in q[0]["reason"]
    # The batch rebuild decodes the keys the same way: the same state.
    publish_all(spark, config, ds)
    assert {r["account_id"]: r["owner"] for r in rows(spark, config.table_path(ds, "batch")).collect()} == latest

    # loglake's own producer (``loglake produce``) writes its keys through the key subject too.
    from loglake.local.produce import produce
    from loglake.schemaregistry.serializers import encoder

    made = produce(config, ds, 60, seed=71, encoder=encoder(config, ds))
    run_speed(spark, config, ds, available_now=True)
    now = {r["account_id"]: r["owner"] for r in rows(spark, config.table_path(ds, "latest")).collect()}
    assert made.good == 60 and {int(k): v["owner"] for k, v in made.last_value.items()}.items() <= now.items()
    assert rows(spark, config.table_path(ds, "quarantine")).where("_layer = 'speed'").count() == 1
