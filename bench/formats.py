"""F1: the speed layer on Avro beside JSON — the same records, one topic per format.

The benchmark dataset's records (``loglake.testing.workload``, 1 KB, 1 in 1,000 malformed)
are produced twice: once as JSON to a topic of the JSON dataset, once in the Schema
Registry's Avro format (confluent-kafka's ``AvroSerializer``, the schema of the dataset's
fields registered in the run's own registry) to a topic of an Avro twin of the dataset. The
malformed JSON records have no Avro form: the Avro topic carries them as they are (JSON,
quarantined there as ``no_magic_byte``), so both topics quarantine the same records. The
speed layer runs over each (``bench.speed.Topic``'s runs: steady micro-batches after the
first), one of each format after the other, the first of each pair alternating; F1 = Avro
records/s ÷ JSON records/s (medians).
"""

from __future__ import annotations

import json
from datetime import datetime

from bench.harness import Harness, median, result
from bench.speed import KB, Topic
from loglake.testing import workload

RECORDS = 300_000


class AvroTopic(Topic):
    """``Topic`` with the same records in Avro, on a registry-format twin of the dataset."""

    def dataset_file(self) -> dict:
        return {"description": "bench_events in Avro", "kind": "events", "partitions": self.partitions,
                "key": "user_id", "format": "avro"}

    def profile(self) -> dict:
        return {"registry": self.h.registry_url}

    def fill(self, config, topic: str) -> float:
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        from loglake.schemaregistry import avro, client, register

        ds = config.dataset(workload.DATASET)
        # The Avro schema of the JSON dataset's fields (a config of the JSON twin says them).
        schema = avro.schema_of(self.config("fields", workload.dataset_file(self.partitions)).dataset(workload.DATASET))
        register(config, ds.subject_name, schema)
        serialize = AvroSerializer(client(config), schema, conf={"auto.register.schemas": False})
        ctx = SerializationContext(topic, MessageField.VALUE)

        def encode(value: bytes) -> bytes:
            v = json.loads(value)
            if not isinstance(v["user_id"], int):  # the malformed ones: no Avro form, sent as they are
                return value
            v.setdefault("note", None)
            v["viewed_at"] = datetime.fromisoformat(v["viewed_at"].replace("Z", "+00:00"))
            return serialize(v, ctx)

        return workload.produce(self.h.bootstrap, topic, self.records, self.record_bytes, encode=encode)


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "F1" not in only:
        return []
    n = max(30_000, int(RECORDS * (0.2 if h.quick else 1.0)))
    json_topic, avro_topic = Topic(h, 6, KB, n), AvroTopic(h, 6, KB, n)

    def pair(i: int) -> tuple[dict, dict]:
        # Interleaved, the first of each pair alternating: neither format gets the JVM's
        # warm-up (the session's first run) or its warmer later runs to itself.
        if i % 2:
            avro = avro_topic.speed_run(i)
            return json_topic.speed_run(i), avro
        return json_topic.speed_run(i), avro_topic.speed_run(i)

    pairs = h.repeat(pair)
    json_runs, avro_runs = [j for j, _a in pairs], [a for _j, a in pairs]
    json_rps = median([r["records_per_second"] for r in json_runs])
    avro_rps = median([r["records_per_second"] for r in avro_runs])
    ratio = avro_rps / json_rps
    m = result("F1", "speed layer on Avro ÷ on JSON (same records)", round(ratio, 3), "ratio",
               reference={"JSON records/s": json_rps},
               runs=[{"json": j, "avro": a} for j, a in zip(json_runs, avro_runs)],
               detail={"json_records_per_second": json_rps, "avro_records_per_second": avro_rps, "records": n,
                       "record_bytes": KB, "partitions": 6},
               chart={"kind": "bar", "labels": ["JSON (schema in the conf)", "Avro (Schema Registry)"],
                      "values": [json_rps, avro_rps], "ylabel": "speed layer records/s (1 KB, 6 partitions)"})
    m["summary"] = f"Avro {avro_rps:,.0f} rec/s vs JSON {json_rps:,.0f} rec/s on the same records"
    return [m]
