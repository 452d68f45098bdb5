"""Sample data: a job-view-like event stream of a chosen record size, fast to produce.

``bench_events`` has job_views' typed fields (a pattern, an enum, ranges, a timestamp) plus
an optional ``note`` string that pads each record to the requested size, so 100 B, 1 KB
and 10 KB records exercise the same validation. Records come from a pool of pre-encoded
values (producing must not be the bottleneck of a consumer benchmark); a small share is
malformed so the quarantine path is part of every measurement. A config holds the dataset
with ``write_conf(..., extra_datasets={DATASET: dataset_file()})``; the benchmarks measure on it.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Callable

from confluent_kafka import Producer

DATASET = "bench_events"
BAD_EVERY = 1000  # one malformed record (wrong type) per this many


def dataset_file(partitions: int = 6) -> dict:
    """The dataset definition (a conf/datasets file's content)."""
    return {
        "description": "Benchmark events: a job view's fields, padded to a record size.",
        "kind": "events",
        "partitions": partitions,
        "key": "user_id",
        "schema": {
            "view_id": {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
            "user_id": {"type": "long", "min": 1},
            "job_id": {"type": "long", "min": 1},
            "viewed_at": {"type": "timestamp"},
            "source": {"type": "string", "enum": ["search", "recommendation", "email", "company_page", "direct"]},
            "duration_ms": {"type": "long", "min": 0, "max": 86400000},
            "note": {"type": "string", "required": False},
        },
    }


def pool(record_bytes: int, size: int = 2000, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """``size`` distinct (key, value) pairs of about ``record_bytes`` each (value JSON)."""
    rng = random.Random(seed)
    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    sources = ["search", "recommendation", "email", "company_page", "direct"]
    out = []
    for i in range(size):
        user = rng.randint(1, 50_000)
        value = {
            "view_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "user_id": user,
            "job_id": rng.randint(1, 200_000),
            "viewed_at": (now - timedelta(milliseconds=rng.randint(0, 86_400_000))).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "source": rng.choice(sources),
            "duration_ms": rng.randint(0, 600_000),
        }
        base = len(json.dumps(value)) + len(', "note": ""')
        if record_bytes > base:
            letters = "abcdefghijklmnopqrstuvwxyz "
            value["note"] = "".join(rng.choices(letters, k=record_bytes - base))
        if i % BAD_EVERY == BAD_EVERY - 1:
            value["user_id"] = str(user)  # wrong type: quarantined by every consumer
        out.append((str(user).encode(), json.dumps(value).encode()))
    return out


def produce(bootstrap: str, topic: str, count: int, record_bytes: int, *, rate: float | None = None,
            timestamps: bool = False, encode: Callable[[bytes], bytes] | None = None,
            records: list[tuple[bytes, bytes]] | None = None) -> float:
    """Produce ``count`` records to ``topic`` (must exist); seconds taken.

    ``rate`` paces the sends (records/s); the record's Kafka timestamp is its send time
    (CreateTime), which is what freshness is measured from. ``encode`` turns each JSON value
    of the pool into another format once, before the sends (the same records in Avro, say).
    ``records``: (key, value) pairs to send instead of the pool's, in turn.
    """
    records = records or pool(record_bytes)
    if encode is not None:
        records = [(key, encode(value)) for key, value in records]
    # Its client log (retries while a broker starts or moves) goes to Python's logging, not
    # to the terminal of a benchmark or a soak run.
    p = Producer({"bootstrap.servers": bootstrap, "logger": logging.getLogger("loglake.kafka"),
                  "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5 if rate else 20, "compression.type": "lz4",
                  "queue.buffering.max.kbytes": 1048576, "batch.size": 1000000})
    start = time.monotonic()
    n = len(records)
    for i in range(count):
        key, value = records[i % n]
        while True:
            try:
                p.produce(topic, key=key, value=value)
                break
            except BufferError:
                p.poll(0.01)
        if rate and i % 50 == 0:
            p.poll(0)
            ahead = (i + 1) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        elif i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered to {topic}")
    return time.monotonic() - start


def bad_count(count: int) -> int:
    """How many of the first ``count`` produced records are malformed."""
    full, rest = divmod(count, 2000)
    per_pool = 2000 // BAD_EVERY
    return full * per_pool + sum(1 for i in range(rest) if i % BAD_EVERY == BAD_EVERY - 1)
