"""F2: the speed layer on a Debezium JSON topic beside the plain changelog of the same changes.

One stream of row changes of a ``customers`` table (inserts, then updates of random keys;
~300 B rows) is produced three times, one topic each: as a plain changelog (the key's text,
the row as the value), as Debezium's JSON converter writes it without its schema wrapper
(``schemas.enable=false``: the key ``{"id": ...}``, the value the envelope with ``before``,
``after``, ``source``, ``op``), and with it (Debezium's default, each record carrying its
schema). No deletes: each change is one record on every topic, so the counts are equal. The
speed layer runs over each (``bench.speed.Topic``'s runs: steady micro-batches after the first),
the three interleaved, the first of each round rotating. F2 = Debezium (no wrapper) records/s ÷
plain records/s (medians); the wrapped topic's rate is in the detail.
"""

from __future__ import annotations

import json
import random
import time

from bench.harness import Harness, median, result
from bench.speed import Topic
from loglake.testing import workload

RECORDS = 300_000
KEYS = 50_000
T0 = 1_767_225_600_000

SCHEMA = {"id": {"type": "long"}, "name": {"type": "string"}, "email": {"type": "string", "required": False},
          "city": {"type": "string"}, "plan": {"type": "string", "enum": ["free", "pro", "team"]},
          "balance": {"type": "double"}, "updated_at": {"type": "timestamp"},
          "note": {"type": "string", "required": False}}


def changes(count: int, seed: int = 11) -> list[tuple[int, dict, dict | None, str, int]]:
    """(key, row after, row before, op, source ms) of ``count`` changes: every key inserted
    first, then updates of random keys."""
    rng = random.Random(seed)
    rows: dict[int, dict] = {}
    out = []
    for i in range(count):
        key = i + 1 if i < min(KEYS, count) else rng.randint(1, KEYS)
        at = T0 + i
        row = {"id": key, "name": f"customer {key}", "email": f"c{key}@example.com",
               "city": rng.choice(["Lyon", "Porto", "Oslo", "Lima", "Pune"]), "plan": rng.choice(["free", "pro", "team"]),
               "balance": round(rng.uniform(0, 10_000), 2),
               "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at / 1000)) + f".{at % 1000:03d}Z",
               "note": "x" * rng.randint(60, 120)}
        out.append((key, row, rows.get(key), "u" if key in rows else "c", at))
        rows[key] = row
    return out


def _row_schema() -> dict:
    kinds = {"long": "int64", "double": "double", "string": "string", "timestamp": "string"}
    return {"type": "struct", "optional": True, "name": "shop.public.customers.Value",
            "fields": [{"type": kinds[spec["type"]], "optional": not spec.get("required", True), "field": name}
                       for name, spec in SCHEMA.items()]}


ENVELOPE_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.customers.Envelope", "fields": [
    {**_row_schema(), "field": "before"}, {**_row_schema(), "field": "after"},
    {"type": "struct", "optional": False, "field": "source", "name": "io.debezium.connector.postgresql.Source",
     "fields": [{"type": "string", "optional": False, "field": f} for f in ("version", "connector", "db", "table")]
     + [{"type": "int64", "optional": False, "field": f} for f in ("ts_ms", "txId", "lsn")]},
    {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}
KEY_SCHEMA = {"type": "struct", "optional": False, "name": "shop.public.customers.Key",
              "fields": [{"type": "int64", "optional": False, "field": "id"}]}


class ChangeTopic(Topic):
    """``Topic`` holding the change stream in one of three forms: ``plain``, ``debezium``
    (Debezium's JSON without the schema wrapper) or ``wrapped`` (with it)."""

    def __init__(self, h: Harness, form: str, records: int):
        self.form = form
        super().__init__(h, 6, 0, records)

    def dataset_file(self) -> dict:
        out = {"description": f"customers' changes ({self.form})", "kind": "changelog", "partitions": self.partitions,
               "key": "id", "schema": SCHEMA, "tables": {"latest": "speed.bench_events_latest"}}
        return out if self.form == "plain" else {**out, "envelope": "debezium"}

    def encode(self, key: int, after: dict, before: dict | None, op: str, at: int) -> tuple[bytes, bytes]:
        if self.form == "plain":
            return str(key).encode(), json.dumps(after).encode()
        envelope = {"before": before, "after": after, "op": op, "ts_ms": at + 30,
                    "source": {"version": "2.7.3.Final", "connector": "postgresql", "db": "shop", "table": "customers",
                               "ts_ms": at, "txId": at - T0, "lsn": 1000 + 8 * (at - T0)}}
        k = {"id": key}
        if self.form == "wrapped":
            envelope, k = {"schema": ENVELOPE_SCHEMA, "payload": envelope}, {"schema": KEY_SCHEMA, "payload": k}
        return json.dumps(k).encode(), json.dumps(envelope).encode()

    def fill(self, config, topic: str) -> float:
        return workload.produce(self.h.bootstrap, topic, self.records, 0,
                                records=[self.encode(*c) for c in changes(self.records)])


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "F2" not in only:
        return []
    n = max(30_000, int(RECORDS * (0.2 if h.quick else 1.0)))
    topics = {form: ChangeTopic(h, form, n) for form in ("plain", "debezium", "wrapped")}
    order = list(topics)

    def round_(i: int) -> dict:
        # The first of each round rotates: no form gets the JVM's warm-up or its warmest runs to itself.
        turn = order[i % 3:] + order[:i % 3]
        return {form: topics[form].speed_run(i) for form in turn}

    rounds = h.repeat(round_)
    rps = {form: median([r[form]["records_per_second"] for r in rounds]) for form in order}
    cpu = {form: median([r[form]["cpu_seconds_per_million"] for r in rounds]) for form in order}
    ratio = rps["debezium"] / rps["plain"]
    m = result("F2", "speed layer on a Debezium JSON topic ÷ on the plain changelog (same changes)", round(ratio, 3),
               "ratio", reference={"plain changelog records/s": rps["plain"]}, runs=rounds,
               detail={"records_per_second": rps, "cpu_seconds_per_million": cpu, "records": n, "keys": KEYS,
                       "partitions": 6},
               chart={"kind": "bar", "labels": ["plain changelog", "Debezium JSON", "Debezium JSON, schema wrapper"],
                      "values": [rps["plain"], rps["debezium"], rps["wrapped"]],
                      "ylabel": "speed layer records/s (changelog, 6 partitions)"})
    m["summary"] = (f"Debezium JSON {rps['debezium']:,.0f} rec/s (with the schema wrapper {rps['wrapped']:,.0f}) vs "
                    f"plain changelog {rps['plain']:,.0f} rec/s; CPU-s per million {cpu['debezium']} / "
                    f"{cpu['wrapped']} / {cpu['plain']}")
    return [m]
