"""What the log holds: the offsets (and for changelogs the keys and deletes) Kafka retains
in given ranges, read with confluent-kafka as the tables' writers read it (committed records
only). The audit compares the tables with it.

A changelog's record says which key it changes and whether it deletes it (``record_change``):
a plain changelog's key is its record key's text and a tombstone deletes; a Debezium topic's key
is its record key's fields (JSON, with or without the converter's schema wrapper, or Avro through
the registry, read with confluent-kafka's own deserializer: ``loglake.schemaregistry.serializers``)
and ``op = d`` deletes too. Its
fields' texts are joined with ``KEY_SEPARATOR``, as ``key_text_sql`` joins a table's key columns.
"""

from __future__ import annotations

import json
import time
from array import array
from dataclasses import dataclass
from typing import Callable

import numpy as np
from confluent_kafka import Consumer, KafkaError, TopicPartition

from loglake.core.config import Config, Dataset
from loglake.core.errors import KafkaUnavailableError

STALL_SECONDS = 30.0  # no record and no end-of-partition for this long: the broker is gone
KEY_SEPARATOR = "\x1f"  # between a key's fields' texts (ASCII's unit separator)

# (record key bytes, value bytes) -> (the key's text, or None when it has none; whether it deletes it)
Change = Callable[["bytes | None", "bytes | None"], "tuple[str | None, bool]"]


def key_text(values) -> str:
    """A key's identity from its fields' values, as ``key_text_sql`` reads it from a table
    (a value as Delta's SQL casts it to text)."""
    return KEY_SEPARATOR.join(v if isinstance(v, str) else json.dumps(v) for v in values)


def key_text_sql(keys: list[str]) -> str:
    """The SQL (DataFusion) of a table's key as text, the fields joined as ``record_change`` joins them."""
    texts = [f'CAST("{k}" AS VARCHAR)' for k in keys]
    return texts[0] if len(texts) == 1 else "concat_ws(chr(31), " + ", ".join(texts) + ")"


def _plain(key: bytes | None, value: bytes | None) -> tuple[str | None, bool]:
    return (None if key is None else key.decode("utf-8", "replace")), value is None


def _unwrapped(doc, marker: str):
    if isinstance(doc, dict) and marker not in doc and isinstance(doc.get("payload"), dict):
        return doc["payload"]
    return doc


def _debezium_json(keys: list[str]) -> Change:
    def change(key: bytes | None, value: bytes | None) -> tuple[str | None, bool]:
        try:
            k = _unwrapped(json.loads(key), keys[0]) if key is not None else None
            v = _unwrapped(json.loads(value), "op") if value is not None else None
        except (ValueError, UnicodeDecodeError):
            return None, False
        if not isinstance(k, dict) or any(f not in k or k[f] is None for f in keys):
            return None, False
        return key_text(k[f] for f in keys), v is None or (isinstance(v, dict) and v.get("op") == "d")
    return change


def record_change(ds: Dataset) -> Change:
    """What a record of a changelog ``ds`` in JSON changes: its key's text, whether it deletes it
    (a registry format's: ``loglake.schemaregistry.serializers.debezium_change``)."""
    return _debezium_json(ds.keys) if ds.debezium else _plain


@dataclass
class LogPartition:
    """What one partition of the log holds below a limit: offsets, and for changelogs the
    record keys and whether each record deletes its key (a tombstone; Debezium's op d)."""

    offsets: np.ndarray
    keys: list[str | None] | None = None
    tombstone: np.ndarray | None = None
    matched: np.ndarray | None = None  # the offsets whose record ``read_log``'s ``match`` took


def read_log(config: Config, topic: str, ranges: dict[int, tuple[int, int]],
             changes: Change | None = None,
             match: Callable[["bytes | None", "bytes | None"], bool] | None = None) -> dict[int, LogPartition]:
    """The offsets the log actually holds in ``[start, end)`` per partition (``ranges``).

    Offsets need not be contiguous (transaction markers, compaction), so they are read,
    never computed from end - start. ``changes``: also keep each record's key and whether it
    deletes it (``record_change``). ``match``: also keep the offsets of the records it takes
    (given record key and value bytes; an erasure's search, ``loglake.erasure.search``).
    """
    keys = changes is not None

    consumer = Consumer(config.kafka_client_conf(**{
        "group.id": "loglake-audit",
        # Read-only: the audit never moves any group's position.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # What the tables hold: both layers read committed records only (Spark's Kafka source
        # with kafka.isolation.level=read_committed), so records of aborted transactions are
        # in no table, and the offsets they and the markers take are not missing.
        "isolation.level": "read_committed",
        # End of partition is how a partition whose last offsets are markers finishes.
        "enable.partition.eof": True,
        # If retention deletes the start while we read, continue from the new earliest.
        "auto.offset.reset": "earliest",
    }))
    pending = {p for p, (s, e) in ranges.items() if e > s}
    found = {p: array("q") for p in ranges}
    found_keys: dict[int, list] = {p: [] for p in ranges}
    found_tomb: dict[int, array] = {p: array("b") for p in ranges}
    matched: dict[int, array] = {p: array("q") for p in ranges}
    try:
        if pending:
            consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in sorted(pending)])
        last_progress = time.monotonic()
        while pending:
            msgs = consumer.consume(num_messages=10_000, timeout=1.0)
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_SECONDS:
                raise KafkaUnavailableError(f"reading {topic} partitions {sorted(pending)} for the audit: "
                                            f"nothing arrived for {STALL_SECONDS:.0f}s")
            done = set()
            for m in msgs:
                p = m.partition()
                if p not in pending:
                    continue
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(p)
                        continue
                    raise KafkaUnavailableError(f"reading {topic}[{p}] for the audit: {err}")
                o = m.offset()
                end = ranges[p][1]
                if o < end:
                    found[p].append(o)
                    if keys:
                        k, deletes = changes(m.key(), m.value())
                        found_keys[p].append(k)
                        found_tomb[p].append(deletes)
                    if match is not None and match(m.key(), m.value()):
                        matched[p].append(o)
                if o >= end - 1:
                    done.add(p)
            if done:
                pending -= done
                consumer.pause([TopicPartition(topic, p) for p in done])
    finally:
        consumer.close()
    return {p: LogPartition(np.frombuffer(found[p], dtype=np.int64) if len(found[p]) else np.zeros(0, np.int64),
                            found_keys[p] if keys else None,
                            np.frombuffer(found_tomb[p], dtype=np.int8).astype(bool) if keys else None,
                            np.array(matched[p], dtype=np.int64) if match is not None else None)
            for p in ranges}
