"""``loglake produce --format debezium-avro|debezium-json`` against a real broker and registry: what
it writes is read back with confluent-kafka's own consumer and, for Avro, its own
``AvroDeserializer`` (not loglake's reader), and checked against the producer's account: the
ops, the keys, each delete's tombstone, the malformed records, each key's last row."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from loglake.core.config import load_config
from loglake.local import debezium
from loglake.local.produce import produce
from loglake.schemaregistry.resolve import resolve
from loglake.schemaregistry.serializers import UNKNOWN_ID
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

ORDERS = {"kind": "changelog", "envelope": "debezium", "partitions": 2, "key": "id", "format": "avro",
          "key_format": "avro"}
VALUE = {"type": "record", "name": "Value", "namespace": "shop.orders", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "qty", "type": "int"},
    {"name": "price", "type": ["null", "double"], "default": None},
    {"name": "placed_at", "type": {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}},
]}
CUSTOMERS = {
    "kind": "changelog", "envelope": "debezium", "partitions": 2, "key": ["tenant", "id"],
    "schema": {"tenant": {"type": "string", "enum": ["t1", "t2"]}, "id": {"type": "long", "min": 1, "max": 100000},
               "name": {"type": "string"}, "updated_at": {"type": "timestamp"}},
}


def read(config, topic: str, partitions: int, count: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (``count`` expected): partition, offset, key, value."""
    consumer = Consumer(config.kafka_client_conf(**{
        "group.id": f"test-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    assert len(out) == count
    return sorted(out, key=lambda r: (r[0], r[1]))


def text(key: dict) -> str:
    return "\x1f".join(v if isinstance(v, str) else json.dumps(v) for v in key.values())


def test_debezium_avro_is_what_confluents_deserializer_reads(make_config, registry_url, tmp_path):
    config = make_config(registry=registry_url, extra_datasets={"orders_cdc": ORDERS})
    ds = config.dataset("orders_cdc")
    schema = tmp_path / "value.avsc"
    schema.write_text(json.dumps(VALUE))
    acked: list[tuple[int, int]] = []
    bad: list[tuple[int, int]] = []
    first = produce(config, ds, 100, bad_fraction=0.06, seed=5, acked=acked, malformed=bad,
                    debezium=debezium.encoding(config, ds, "debezium-avro", schema_file=schema))
    # Again without --schema: the Envelope the subject holds now.
    second = produce(config, ds, 20, seed=6, acked=acked,
                     debezium=debezium.encoding(config, ds, "debezium-avro"))
    # And from the dataset code's AVRO_VALUE (the conf read again: the code file is new).
    (config.conf_dir / "datasets" / "orders_cdc.py").write_text(f"AVRO_VALUE = {VALUE!r}\n")
    config = load_config(config.conf_dir, home=config.home)
    ds = config.dataset("orders_cdc")
    third = produce(config, ds, 10, seed=7, acked=acked, debezium=debezium.encoding(config, ds, "debezium-avro"))
    assert (first.records, first.good, first.bad, second.records, third.records) == (100, 94, 6, 20, 10)

    registry = SchemaRegistryClient({"url": registry_url})
    assert json.loads(registry.get_latest_version(f"{ds.topic}-key").schema.schema_str)["name"] == "Key"
    envelope = json.loads(registry.get_latest_version(f"{ds.topic}-value").schema.schema_str)
    assert envelope["name"] == "Envelope" and envelope["connect.name"] == "loglake.public.orders_cdc.Envelope"
    # loglake reads the table's columns from the Envelope's after record.
    assert list(resolve(config, ds).fields) == [f["name"] for f in VALUE["fields"]]
    keys, values = AvroDeserializer(registry), AvroDeserializer(registry)
    key_ctx = SerializationContext(ds.topic, MessageField.KEY)
    value_ctx = SerializationContext(ds.topic, MessageField.VALUE)

    records = read(config, ds.topic, ds.partitions, 130)
    assert {(p, o) for p, o, _k, _v in records} == set(acked)
    kinds: Counter = Counter()
    ops: Counter = Counter()
    fold: dict[str, dict | None] = {}
    for p, o, k, v in records:
        key = keys(k, key_ctx)
        if (p, o) in bad:
            if v[:1] == b"{":
                kinds["no_magic_byte"] += 1
            elif v[1:5] == UNKNOWN_ID.to_bytes(4, "big"):
                with pytest.raises(SchemaRegistryError) as unknown:  # the registry never gave the id
                    values(v, value_ctx)
                assert unknown.value.http_status_code == 404
                kinds["unknown_schema_id"] += 1
            else:
                assert key["id"] != values(v, value_ctx)["after"]["id"]
                kinds["key_mismatch"] += 1
            continue
        env = None if v is None else values(v, value_ctx)
        ops[None if env is None else env["op"]] += 1
        if env is not None:
            row = env["after"] if env["op"] != "d" else env["before"]
            assert key == {"id": row["id"]} and env["source"]["table"] == "orders_cdc"
        fold[text(key)] = None if env is None else env["after"]
    assert kinds == {"no_magic_byte": 2, "unknown_schema_id": 2, "key_mismatch": 2}
    assert ops["c"] and ops["u"] and ops["r"]
    assert ops["d"] == ops[None] == first.tombstones + second.tombstones + third.tombstones > 0
    assert fold == {**first.last_value, **second.last_value, **third.last_value}


def test_debezium_json_with_and_without_the_converters_wrapper(make_config):
    config = make_config(extra_datasets={"customers_cdc": CUSTOMERS, "customers_bare": CUSTOMERS})
    ds = config.dataset("customers_cdc")
    acked: list[tuple[int, int]] = []
    bad: list[tuple[int, int]] = []
    # Transactions, a third aborted: the account is what a read_committed consumer sees.
    res = produce(config, ds, 150, bad_fraction=0.04, seed=3, transactional=True, transaction_size=20,
                  abort_every=3, acked=acked, malformed=bad,
                  debezium=debezium.encoding(config, ds, "debezium-json"))
    assert res.aborted_transactions == 2 and res.records == len(acked) < 150
    fold: dict[str, dict | None] = {}
    tombstones = 0
    for p, o, k, v in read(config, ds.topic, ds.partitions, res.records):
        if (p, o) in bad:
            continue
        key = json.loads(k)
        assert key["schema"]["name"] == "loglake.public.customers_cdc.Key"
        if v is None:
            tombstones += 1
            fold[text(key["payload"])] = None
            continue
        value = json.loads(v)
        assert value["schema"]["name"] == "loglake.public.customers_cdc.Envelope"
        env = value["payload"]
        row = env["after"] if env["op"] != "d" else env["before"]
        assert key["payload"] == {"tenant": row["tenant"], "id": row["id"]}
        fold[text(key["payload"])] = env["after"]
    assert fold == res.last_value and tombstones == res.tombstones
    assert len(bad) == res.bad

    # From the command line, its default format, without the wrapper (schemas.enable=false): each
    # delete's tombstone comes next.
    bare = config.dataset("customers_bare")
    cli = run_loglake(config, "produce", "customers_bare", "--count", "80", "--seed", "4", "--no-json-schemas",
                      "--quiet")
    assert cli.returncode == 0, cli.stderr
    said = re.search(r"produced 80 records to \S+ \(80 good, 0 malformed, (\d+) tombstones\)", cli.stdout)
    assert said, cli.stdout
    records = read(config, bare.topic, bare.partitions, 80)
    ops: Counter = Counter()
    for (p, _o, k, v), (p2, _o2, k2, v2) in zip(records, records[1:] + [(None, None, None, None)]):
        env = None if v is None else json.loads(v)
        ops[None if env is None else env["op"]] += 1
        assert set(json.loads(k)) == {"tenant", "id"}
        if env is not None and env["op"] == "d":
            assert (p2, k2, v2) == (p, k, None)
    assert ops["d"] == ops[None] == int(said[1]) and ops["c"] and ops["r"]
