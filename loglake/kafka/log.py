"""What the log holds: the offsets (and for changelogs the keys and tombstones) Kafka retains
in given ranges, read with confluent-kafka as the tables' writers read it (committed records
only). The audit compares the tables with it."""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass

import numpy as np
from confluent_kafka import Consumer, KafkaError, TopicPartition

from loglake.core.config import Config
from loglake.core.errors import KafkaUnavailableError

STALL_SECONDS = 30.0  # no record and no end-of-partition for this long: the broker is gone


@dataclass
class LogPartition:
    """What one partition of the log holds below a limit: offsets, and for changelogs the
    record keys and whether each record is a tombstone (null value)."""

    offsets: np.ndarray
    keys: list[str | None] | None = None
    tombstone: np.ndarray | None = None


def read_log(config: Config, topic: str, ranges: dict[int, tuple[int, int]], keys: bool = False) -> dict[int, LogPartition]:
    """The offsets the log actually holds in ``[start, end)`` per partition (``ranges``).

    Offsets need not be contiguous (transaction markers, compaction), so they are read,
    never computed from end - start. ``keys``: also keep record keys and tombstone flags.
    """

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
                        k = m.key()
                        found_keys[p].append(None if k is None else k.decode("utf-8", "replace"))
                        found_tomb[p].append(m.value() is None)
                if o >= end - 1:
                    done.add(p)
            if done:
                pending -= done
                consumer.pause([TopicPartition(topic, p) for p in done])
    finally:
        consumer.close()
    return {p: LogPartition(np.frombuffer(found[p], dtype=np.int64) if len(found[p]) else np.zeros(0, np.int64),
                            found_keys[p] if keys else None,
                            np.frombuffer(found_tomb[p], dtype=np.int8).astype(bool) if keys else None)
            for p in ranges}
