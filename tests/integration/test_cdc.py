"""Debezium CDC topics (``envelope: debezium``) and SCD type 2 history against a real broker,
Spark and Delta (issue 48).

The records are written here as a Debezium connector writes them (its PostgreSQL connector's
envelope, the JSON converter with ``schemas.enable`` on and off, a delete followed by a
tombstone), by confluent-kafka's own producer, not by loglake's; what the tables must hold is
folded here from those records, independently of loglake's reader.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import ConfigResource, ConfigEntry, AlterConfigOpType
from pyspark.sql import functions as F

from loglake.batch.planning import plan_batch
from loglake.kafka.admin import admin, ensure_topic, log_bounds
from loglake.core.processes import wait_for
from loglake.ops.audit import audit_dataset
from loglake.ops.diff import diff_range
from loglake.quality.pipeline import recompute_and_publish
from loglake.schemaregistry.resolve import resolve
from loglake.serving import arrow
from loglake.serving.spark import serving_view
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration

CUSTOMERS = {
    "description": "customers of a shop's database, as Debezium's PostgreSQL connector captures them",
    "kind": "changelog", "envelope": "debezium", "history": "scd2", "partitions": 2,
    "key": ["tenant", "id"],
    "schema": {"tenant": {"type": "string"}, "id": {"type": "long"}, "name": {"type": "string"},
               "email": {"type": "string", "required": False, "pattern": "^[^@]+@[^@]+$"},
               "updated_at": {"type": "timestamp", "required": False}},
    "tables": {"speed": "speed.customers", "batch": "batch.customers", "quarantine": "quarantine.customers",
               "latest": "speed.customers_latest"},
}
FIELDS = ("tenant", "id", "name", "email", "updated_at")

_CONNECT = {"tenant": "string", "id": "int64", "name": "string", "email": "string", "updated_at": "string"}


def _struct(name: str, fields, optional: bool) -> dict:
    return {"type": "struct", "optional": optional, "name": name, "field": None,
            "fields": [{"type": _CONNECT[f], "optional": f not in ("tenant", "id"), "field": f,
                        **({"name": "io.debezium.time.ZonedTimestamp", "version": 1} if f == "updated_at" else {})}
                       for f in fields]}


KEY_SCHEMA = _struct("shop.public.customers.Key", ("tenant", "id"), False)
VALUE_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.customers.Envelope", "version": 2,
                "fields": [{**_struct("shop.public.customers.Value", FIELDS, True), "field": "before"},
                           {**_struct("shop.public.customers.Value", FIELDS, True), "field": "after"},
                           {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source",
                            "field": "source", "fields": [
                                {"type": "string", "optional": False, "field": "version"},
                                {"type": "string", "optional": False, "field": "connector"},
                                {"type": "int64", "optional": False, "field": "ts_ms"},
                                {"type": "string", "optional": True, "field": "snapshot"},
                                {"type": "string", "optional": False, "field": "db"},
                                {"type": "string", "optional": False, "field": "table"},
                                {"type": "int64", "optional": True, "field": "txId"},
                                {"type": "int64", "optional": True, "field": "lsn"}]},
                           {"type": "string", "optional": False, "field": "op"},
                           {"type": "int64", "optional": True, "field": "ts_ms"},
                           {"type": "struct", "optional": True, "field": "transaction", "fields": [
                               {"type": "string", "optional": False, "field": "id"},
                               {"type": "int64", "optional": False, "field": "total_order"},
                               {"type": "int64", "optional": False, "field": "data_collection_order"}]}]}

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms


class Capture:
    """A Debezium PostgreSQL connector's output for table public.customers, record by record:
    (key bytes, value bytes) with the JSON converter's ``schemas.enable`` (``wrapped``) or not."""

    def __init__(self):
        self.lsn, self.records = 1000, []

    def change(self, op: str, key: dict, before: dict | None, after: dict | None, at_ms: int, wrapped: bool,
               tx: int | None = None, snapshot: str = "false") -> None:
        self.lsn += 8
        source = {"version": "2.7.3.Final", "connector": "postgresql", "ts_ms": T0 + at_ms, "snapshot": snapshot,
                  "db": "shop", "table": "customers", "txId": tx or self.lsn, "lsn": self.lsn}
        env = {"before": before, "after": after, "source": source, "op": op, "ts_ms": T0 + at_ms + 40,
               "transaction": None}
        self.raw(self._json(KEY_SCHEMA, key, wrapped), self._json(VALUE_SCHEMA, env, wrapped))
        if op == "d":  # Debezium's tombstones.on.delete (default true): the key again, a null value
            self.raw(self._json(KEY_SCHEMA, key, wrapped), None)

    @staticmethod
    def _json(schema: dict, payload: dict, wrapped: bool) -> bytes:
        return json.dumps({"schema": schema, "payload": payload} if wrapped else payload).encode()

    def raw(self, key: bytes | None, value: bytes | None) -> None:
        self.records.append((key, value))


def row(tenant: str, id: int, name: str, email: str | None = None, updated_ms: int | None = None) -> dict:
    at = None if updated_ms is None else datetime.fromtimestamp((T0 + updated_ms) / 1000, timezone.utc)
    return {"tenant": tenant, "id": id, "name": name, "email": email,
            "updated_at": None if at is None else at.isoformat().replace("+00:00", "Z")}


def key_of(r: dict) -> dict:
    return {"tenant": r["tenant"], "id": r["id"]}


def send(config, topic: str, records) -> list[tuple[int, int]]:
    """Write the records, keyed, through confluent-kafka (Debezium's partitioner hashes the key
    bytes as Kafka's default one does); their (partition, offset), in order."""
    producer = Producer(config.kafka_client_conf(**{"enable.idempotence": True, "acks": "all"}))
    placed: list = [None] * len(records)

    def delivered(i: int):
        return lambda err, msg: placed.__setitem__(i, (msg.partition(), msg.offset()))

    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=delivered(i))
    assert producer.flush(30) == 0 and None not in placed
    return placed


def read_back(config, topic: str) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record the log holds now, by Kafka's own consumer: (partition, offset, key, value)."""
    bounds = log_bounds(config, topic)
    consumer = Consumer(config.kafka_client_conf(**{"group.id": "cdc-test", "enable.auto.commit": False,
                                                     "auto.offset.reset": "earliest"}))
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _hi) in bounds.items()])
    out, pending = [], {p for p, (lo, hi) in bounds.items() if hi > lo}
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        for m in consumer.consume(500, 1.0):
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.key(), m.value()))
                if m.offset() >= bounds[m.partition()][1] - 1:
                    pending.discard(m.partition())
    consumer.close()
    assert not pending, f"partitions {pending} not read to their end"
    return sorted(out)


def unwrap(doc):
    return doc["payload"] if isinstance(doc, dict) and "op" not in doc and "tenant" not in doc \
        and isinstance(doc.get("payload"), dict) else doc


def fold(records) -> dict[tuple, dict]:
    """The latest state the log's records make, folded here: newest change per key by offset
    (a key's records share a partition), deletes and tombstones remove it; records that are
    not well-formed changes are skipped (their offsets are quarantined)."""
    state: dict[tuple, dict] = {}
    for _p, _o, key, value in records:
        try:
            k = unwrap(json.loads(key))
            k = (k["tenant"], k["id"])
        except (TypeError, ValueError, KeyError):
            continue
        if value is None:
            state.pop(k, None)
            continue
        try:
            env = unwrap(json.loads(value))
        except ValueError:
            continue
        if not isinstance(env, dict) or env.get("op") not in ("c", "u", "d", "r"):
            continue
        if env["op"] == "d":
            state.pop(k, None)
            continue
        after = env.get("after")
        if not isinstance(after, dict) or (after.get("tenant"), after.get("id")) != k \
                or not isinstance(after.get("name"), str) or not re.fullmatch(r"[^@]+@[^@]+", after.get("email") or "a@b"):
            continue
        state[k] = {f: after.get(f) for f in FIELDS}
    return state


def as_rows(rows) -> dict[tuple, dict]:
    out = {}
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else dict(r)
        at = d["updated_at"]
        d["updated_at"] = None if at is None else at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") \
            if at.tzinfo else at.replace(tzinfo=timezone.utc).isoformat().replace("+00:00", "Z")
        assert (d["tenant"], d["id"]) not in out, f"key {(d['tenant'], d['id'])} twice"
        out[(d["tenant"], d["id"])] = {f: d[f] for f in FIELDS}
    return out


def test_a_debezium_json_topic_lands_its_latest_state_history_and_quarantine_in_both_layers(spark, make_config):
    config = make_config(extra_datasets={"customers": CUSTOMERS})
    ds = config.dataset("customers")
    topic = ensure_topic(config, ds)
    cap = Capture()
    a1, a2, b1 = row("t1", 1, "Ada", "ada@x.io", 5), row("t1", 2, "Bob"), row("t2", 1, "Cy", "cy@x.io")
    # The connector's initial snapshot (op r), wrapped; then live changes, some not.
    for r in (a1, a2, b1):
        cap.change("r", key_of(r), None, r, 10, wrapped=True, snapshot="true")
    a1b = row("t1", 1, "Ada L.", "ada@x.io", 20)
    cap.change("u", key_of(a1), a1, a1b, 20, wrapped=False, tx=7)
    b2 = row("t2", 2, "Dee")
    cap.change("c", key_of(b2), None, b2, 20, wrapped=False, tx=7)  # the same transaction: one source time
    a1c = row("t1", 1, "Ada Lovelace", "ada@l.io", 30)
    cap.change("u", key_of(a1), a1b, a1c, 30, wrapped=True)
    cap.change("d", key_of(a1), a1c, None, 40, wrapped=False)  # then its tombstone
    # Malformed, each its own way (the reason each must be quarantined with).
    bad = [("malformed_envelope", key_of(b1), b"{not json"),
           ("malformed_envelope", key_of(b1), json.dumps({"before": None, "after": b1}).encode()),
           ("unknown_op", key_of(b1), json.dumps({"op": "t", "before": None, "after": None, "source": {}}).encode()),
           ("missing_after", key_of(b1), json.dumps({"op": "u", "before": b1, "after": None}).encode()),
           ("key_mismatch", {"tenant": "t2", "id": 9}, json.dumps({"op": "u", "before": b1, "after": b1}).encode()),
           ("wrong_type", key_of(b1), json.dumps({"op": "u", "before": b1, "after": {**b1, "name": 5}}).encode()),
           ("out_of_domain", key_of(b1), json.dumps({"op": "u", "before": b1, "after": {**b1, "email": "no"}}).encode())]
    for _code, key, value in bad:
        cap.raw(json.dumps(key).encode(), value)
    cap.raw(b"[1]", None)  # a tombstone whose key has no key fields
    bad_reasons = [code for code, _k, _v in bad] + ["null_key"]
    first = send(config, topic, cap.records)
    summary = recompute_and_publish(spark, config, ds, plan_batch(config, ds), "first")
    assert summary.quality.published
    # The batch layer alone: its latest state is the fold of the log so far.
    assert as_rows(serving_view(spark, config, ds).collect()) == fold(read_back(config, topic))

    later = Capture()
    later.lsn = cap.lsn
    a1d = row("t1", 1, "Ada", "ada@new.io", 50)
    later.change("c", key_of(a1d), None, a1d, 50, wrapped=True)  # re-inserted after its delete
    later.change("d", key_of(a2), a2, None, 55, wrapped=True)
    b1b = row("t2", 1, "Cy Twice", "cy@x.io", 60)
    later.change("u", key_of(b1), b1, b1b, 60, wrapped=False)
    for r in (a1d, b1b, b2):  # a re-snapshot: every row again, b2 unchanged
        later.change("r", key_of(r), None, r, 70, wrapped=False, snapshot="true")
    send(config, topic, later.records)
    run_speed(spark, config, ds, available_now=True)

    log = read_back(config, topic)
    expected = fold(log)
    assert set(expected) == {("t1", 1), ("t2", 1), ("t2", 2)}
    # The serving view (batch state as of W_p, the speed changes above folded on top), in Spark
    # and in the Arrow reader: equal to the fold.
    assert as_rows(serving_view(spark, config, ds).collect()) == expected
    assert as_rows(arrow.read(config, "customers").to_pylist()) == expected
    # Provenance: the change's op, source time and log position ride along (the re-snapshot's).
    got = serving_view(spark, config, ds).where("tenant = 't1' AND id = 1").first()
    assert got["_op"] == "r" and json.loads(got["_source_position"])["snapshot"] == "true"
    assert got["_source_time"].replace(tzinfo=timezone.utc).timestamp() * 1000 == T0 + 70

    # Each malformed record quarantined with its own reason, in the batch layer (its offsets below W_p).
    q = spark.read.format("delta").load(config.table_path(ds, "quarantine")).where("_layer = 'batch'")
    reasons = {(r["_partition"], r["_offset"]): r["reason_code"] for r in q.collect()}
    bad_at = first[len(first) - len(bad_reasons):]
    assert [reasons.get(po) for po in bad_at] == bad_reasons
    assert len(reasons) == len(bad_reasons)

    # The audit accounts for every retained offset once: in the latest-state fold or in quarantine.
    result = audit_dataset(config, ds, record=False)
    assert result.ok, result

    # History: (t1, 1) was snapshotted, updated twice, deleted and re-inserted: four versions,
    # each valid until the next began, the third closed by the delete.
    history = spark.sql("SELECT * FROM customers_history WHERE tenant = 't1' AND id = 1 ORDER BY valid_from").collect()
    assert [h["name"] for h in history] == ["Ada", "Ada L.", "Ada Lovelace", "Ada"]
    millis = lambda t: None if t is None else round(t.replace(tzinfo=timezone.utc).timestamp() * 1000)
    assert [(millis(h["valid_from"]), millis(h["valid_to"])) for h in history] == [
        (T0 + 10, T0 + 20), (T0 + 20, T0 + 30), (T0 + 30, T0 + 40), (T0 + 50, None)]
    assert [h["is_current"] for h in history] == [False, False, False, True]
    assert [h["_closed_by_delete"] for h in history] == [False, False, True, False]
    # The re-snapshot of an unchanged row opens no version; its current rows are the latest state.
    assert spark.sql("SELECT count(*) AS n FROM customers_history WHERE tenant = 't2' AND id = 2").first()["n"] == 1
    current = spark.sql("SELECT * FROM customers_history WHERE is_current").collect()
    assert as_rows(current) == expected
    assert as_rows([r for r in arrow.read(config, "customers_history").to_pylist() if r["is_current"]]) == expected

    # The batch layer's recompute over the whole log gives the history the view showed (its
    # speed changes folded in), and a re-run over the same log the same table.
    viewed = rows_json(spark.table("customers_history"))
    assert recompute_and_publish(spark, config, ds, plan_batch(config, ds), "again").quality.published
    table = history_rows(spark, config, ds)
    assert table == viewed, (sorted(set(table) - set(viewed)), sorted(set(viewed) - set(table)))
    assert recompute_and_publish(spark, config, ds, plan_batch(config, ds), "third").quality.published
    assert history_rows(spark, config, ds) == table
    assert as_rows(serving_view(spark, config, ds).collect()) == expected
    # The speed layer's changes (from the first run's watermark on) against the batch layer's
    # state: none changed, none missing in speed; the batch holds only each key's newest.
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, topic).items()}
    starts = {p: max(o for q, o in first if q == p) + 1 for p, _o in first}
    assert any(ends[p] > start for p, start in starts.items())
    for p, start in ((p, s) for p, s in starts.items() if ends[p] > s):
        d = diff_range(config, ds, p, start, ends[p])
        assert d.changed.rows == 0 and d.missing_in_speed.count == 0 and d.missing_in_batch is None, d


def rows_json(df) -> list[str]:
    return sorted(r[0] for r in df.select(F.to_json(F.struct(*sorted(df.columns)))).collect())


def history_rows(spark, config, ds) -> list[str]:
    return rows_json(spark.read.format("delta").load(config.table_path(ds, "history")))


def test_a_compacted_cdc_topic_stays_exact_and_its_history_outlives_the_compaction(spark, make_config):
    config = make_config(extra_datasets={"customers": {**CUSTOMERS, "partitions": 1}})
    ds = config.dataset("customers")
    # The broker's cleaner looks for work every 15 s by default: sooner, for this test (a
    # cluster-wide dynamic setting of the suite's broker, set back after).
    cleaner(config, "500")
    try:
        _compaction(spark, config, ds)
    finally:
        cleaner(config, None)


def cleaner(config, backoff_ms: str | None) -> None:
    op = AlterConfigOpType.SET if backoff_ms is not None else AlterConfigOpType.DELETE
    client = admin(config)
    resources = [ConfigResource("BROKER", str(b), incremental_configs=[
        ConfigEntry("log.cleaner.backoff.ms", backoff_ms or "", incremental_operation=op)])
        for b in client.list_topics(timeout=30).brokers]
    for future in client.incremental_alter_configs(resources).values():
        future.result(30)


def _compaction(spark, config, ds) -> None:
    topic = ensure_topic(config, ds, extra={"cleanup.policy": "compact", "segment.ms": "100",
                                            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
                                            "min.compaction.lag.ms": "0"})
    cap = Capture()
    rows = [row("t1", i, f"n{i}") for i in range(1, 7)]
    for r in rows:
        cap.change("c", key_of(r), None, r, 10, wrapped=False)
    for r in rows[:4]:
        cap.change("u", key_of(r), r, {**r, "name": r["name"] + "-2"}, 20, wrapped=False)
    for r in rows[:2]:
        cap.change("d", key_of(r), {**r, "name": r["name"] + "-2"}, None, 30, wrapped=False)
    send(config, topic, cap.records)
    before = recompute_and_publish(spark, config, ds, plan_batch(config, ds), "before")
    assert before.quality.published
    history = history_rows(spark, config, ds)
    full = read_back(config, topic)

    def compacted() -> bool:
        held = read_back(config, topic)
        return len(held) < len(full) and not any(v is None for *_r, v in held)

    # Newer records roll the segments that hold the old ones; the cleaner then drops the
    # superseded records and, a pass later, the tombstones.
    filler = Capture()
    for i in range(3):
        r = row("t9", 100 + i, "filler")
        filler.change("c", key_of(r), None, r, 40 + i, wrapped=False)
        send(config, topic, filler.records[-1:])
        time.sleep(0.3)
    wait_for(compacted, 120, "the broker to compact the topic and drop its tombstones", 2.0)
    held = read_back(config, topic)
    expected = fold(held)
    assert ("t1", 1) not in expected and ("t1", 6) in expected
    after = recompute_and_publish(spark, config, ds, plan_batch(config, ds), "after")
    assert after.quality.published
    assert as_rows(serving_view(spark, config, ds).collect()) == expected
    assert audit_dataset(config, ds, record=False).ok
    # The versions whose changes the broker compacted away are still in the history.
    now = history_rows(spark, config, ds)
    assert set(history) <= set(now)


# Debezium's Avro converter (Confluent's AvroConverter) names the row record once, in before, and
# refers to it by name in after; the source block is a record of its own.
AVRO_VALUE = {"type": "record", "name": "Value", "namespace": "shop.public.customers", "fields": [
    {"name": "tenant", "type": "string"}, {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "updated_at", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}],
     "default": None}]}
AVRO_ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "shop.public.customers",
                 "connect.name": "shop.public.customers.Envelope", "fields": [
                     {"name": "before", "type": ["null", AVRO_VALUE], "default": None},
                     {"name": "after", "type": ["null", "Value"], "default": None},
                     {"name": "source", "type": {"type": "record", "name": "Source", "namespace":
                                                 "io.debezium.connector.postgresql", "fields": [
                                                     {"name": "version", "type": "string"},
                                                     {"name": "connector", "type": "string"},
                                                     {"name": "ts_ms", "type": "long"},
                                                     {"name": "db", "type": "string"},
                                                     {"name": "table", "type": "string"},
                                                     {"name": "lsn", "type": ["null", "long"], "default": None}]}},
                     {"name": "op", "type": "string"},
                     {"name": "ts_ms", "type": ["null", "long"], "default": None},
                     {"name": "transaction", "type": ["null", {"type": "record", "name": "block", "namespace":
                                                               "event", "fields": [
                                                                   {"name": "id", "type": "string"},
                                                                   {"name": "total_order", "type": "long"},
                                                                   {"name": "data_collection_order", "type": "long"}]}],
                      "default": None}]}
AVRO_KEY = {"type": "record", "name": "Key", "namespace": "shop.public.customers",
            "fields": [{"name": "tenant", "type": "string"}, {"name": "id", "type": "long"}]}


def test_a_debezium_avro_topic_through_the_registry_lands_its_latest_state(spark, make_config, registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    conf = {k: v for k, v in CUSTOMERS.items() if k != "schema"}
    config = make_config(registry=registry_url, extra_datasets={"customers": {
        **conf, "format": "avro", "key_format": "avro", "history": "none"}})
    topic = ensure_topic(config, config.dataset("customers"))
    registry = SchemaRegistryClient({"url": config.registry.url})
    keys = AvroSerializer(registry, json.dumps(AVRO_KEY))
    values = AvroSerializer(registry, json.dumps(AVRO_ENVELOPE))
    kctx, vctx = SerializationContext(topic, MessageField.KEY), SerializationContext(topic, MessageField.VALUE)
    lsn = [0]

    def change(op, r, before=None, at=10):
        lsn[0] += 8
        env = {"before": before, "after": r if op != "d" else None, "op": op, "ts_ms": T0 + at + 40,
               "source": {"version": "2.7.3.Final", "connector": "postgresql", "ts_ms": T0 + at, "db": "shop",
                          "table": "customers", "lsn": lsn[0]}, "transaction": None}
        out = [(keys(key_of(r), kctx), values(env, vctx))]
        return out + ([(keys(key_of(r), kctx), None)] if op == "d" else [])

    a, b, c = row("t1", 1, "Ada"), row("t1", 2, "Bob", "bob@x.io"), row("t2", 1, "Cy")
    first = [*change("r", a), *change("r", b), *change("c", c, at=20), *change("u", {**a, "name": "Ada L."}, a, 30)]
    bad = [(keys(key_of(a), kctx), b"plain bytes, no magic byte"),
           (keys({"tenant": "t1", "id": 9}, kctx), values({"op": "u", "before": None, "after": a, "ts_ms": None,
                                                           "source": {"version": "x", "connector": "postgresql",
                                                                      "ts_ms": T0, "db": "shop", "table": "customers",
                                                                      "lsn": None}, "transaction": None}, vctx)),
           (keys(key_of(a), kctx), values({"op": "x", "before": None, "after": a, "ts_ms": None,
                                           "source": {"version": "x", "connector": "postgresql", "ts_ms": T0,
                                                      "db": "shop", "table": "customers", "lsn": None},
                                           "transaction": None}, vctx))]
    placed = send(config, topic, first + bad)
    ds = resolve(config, config.dataset("customers"))  # the columns: the envelope's after record
    assert list(ds.fields) == list(FIELDS)
    assert recompute_and_publish(spark, config, ds, plan_batch(config, ds), "first").quality.published
    assert as_rows(serving_view(spark, config, ds).collect()) == {("t1", 1): {**a, "name": "Ada L."}, ("t1", 2): b,
                                                                 ("t2", 1): c}
    send(config, topic, [*change("d", b, b, 40), *change("u", {**c, "email": "cy@x.io"}, c, 50)])
    run_speed(spark, config, ds, available_now=True)

    expected = {("t1", 1): {**a, "name": "Ada L."}, ("t2", 1): {**c, "email": "cy@x.io"}}
    assert as_rows(serving_view(spark, config, ds).collect()) == expected
    q = spark.read.format("delta").load(config.table_path(ds, "quarantine")).where("_layer = 'batch'")
    reasons = {(r["_partition"], r["_offset"]): r["reason_code"] for r in q.collect()}
    assert [reasons.get(po) for po in placed[-3:]] == ["no_magic_byte", "key_mismatch", "unknown_op"]
    assert audit_dataset(config, ds, record=False).ok
