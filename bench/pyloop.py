"""The simple alternative a user might write instead of the speed layer (P2's reference).

One Python process: confluent-kafka consumer → ``json.loads`` → the same per-field checks
the speed layer makes (types strictly, pattern, enum, range, ISO timestamp) → columns →
every ``flush`` records a pyarrow table appended with delta-rs (valid rows to one table,
malformed ones with a reason to another) → commit the consumer position. No exactly-once,
no replay guarantees: a fair floor for "what does the platform cost".
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import pyarrow as pa
from confluent_kafka import Consumer
from deltalake import write_deltalake

_PY_TYPES = {"string": (str,), "timestamp": (str,), "long": (int,), "double": (int, float), "boolean": (bool,)}


def _checker(fields: dict):
    """A function value-dict → reason (None when valid), from a dataset's field specs."""
    specs = []
    for name, spec in fields.items():
        specs.append((name, spec.required, spec.type, _PY_TYPES[spec.type],
                      re.compile(spec.pattern) if spec.pattern else None,
                      set(spec.enum) if spec.enum else None, spec.min, spec.max))

    def check(v) -> str | None:
        if not isinstance(v, dict):
            return "not_an_object"
        for name, required, typ, py, pattern, enum, lo, hi in specs:
            x = v.get(name)
            if x is None:
                if required:
                    return "missing_field"
                continue
            if not isinstance(x, py) or (typ != "boolean" and isinstance(x, bool)):
                return "wrong_type"
            if typ == "timestamp":
                try:
                    datetime.fromisoformat(x)
                except ValueError:
                    return "wrong_type"
            if enum is not None and x not in enum:
                return "out_of_domain"
            if lo is not None and x < lo or hi is not None and x > hi:
                return "out_of_domain"
            if pattern is not None and not pattern.search(x):
                return "out_of_domain"
        return None
    return check


def run(bootstrap: str, topic: str, ds, out_dir: str, expected: int, flush: int) -> dict:
    """Consume ``expected`` records of ``topic``; records/s and CPU seconds, first poll excluded."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pyloop-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    check = _checker(ds.fields)
    names = list(ds.fields)
    stamps = [n for n, spec in ds.fields.items() if spec.type == "timestamp"]
    cols: dict[str, list] = {n: [] for n in names + ["_partition", "_offset", "_kafka_timestamp"]}
    bad: dict[str, list] = {"_partition": [], "_offset": [], "value": [], "reason_code": []}
    n = 0
    start = cpu0 = None
    flushes = 0

    def flush_out() -> None:
        nonlocal cols, bad, flushes
        if cols["_offset"]:
            for name in stamps:
                cols[name] = [None if x is None else datetime.fromisoformat(x) for x in cols[name]]
            write_deltalake(f"{out_dir}/valid", pa.table(cols), mode="append")
        if bad["_offset"]:
            write_deltalake(f"{out_dir}/quarantine", pa.table(bad), mode="append")
        if cols["_offset"] or bad["_offset"]:
            consumer.commit(asynchronous=False)
        cols = {k: [] for k in cols}
        bad = {k: [] for k in bad}
        flushes += 1

    while n < expected:
        msgs = consumer.consume(10000, 1.0)
        if not msgs:
            continue
        if start is None:
            start, cpu0 = time.monotonic(), time.process_time()
        for m in msgs:
            if m.error() is not None:
                raise RuntimeError(str(m.error()))
            raw = m.value()
            try:
                v = json.loads(raw) if raw is not None else None
                reason = check(v) if raw is not None else "null_value"
            except ValueError:
                reason = "bad_json"
            if reason is None:
                for name in names:
                    cols[name].append(v.get(name))
                cols["_partition"].append(m.partition())
                cols["_offset"].append(m.offset())
                cols["_kafka_timestamp"].append(m.timestamp()[1])
            else:
                bad["_partition"].append(m.partition())
                bad["_offset"].append(m.offset())
                bad["value"].append(raw)
                bad["reason_code"].append(reason)
            n += 1
            if n % flush == 0:
                flush_out()
    flush_out()
    seconds = time.monotonic() - start
    cpu = time.process_time() - cpu0
    consumer.close()
    return {"records": n, "seconds": round(seconds, 3), "records_per_second": round(n / seconds),
            "cpu_seconds": round(cpu, 2), "cpu_seconds_per_million": round(cpu / n * 1e6, 1), "flushes": flushes}


def bare(bootstrap: str, topic: str, expected: int) -> dict:
    """A bare confluent-kafka consumer reading ``expected`` records (P1's reference)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    n = 0
    start = cpu0 = None
    while n < expected:
        msgs = consumer.consume(10000, 1.0)
        if msgs and start is None:
            start, cpu0 = time.monotonic(), time.process_time()
        n += sum(1 for m in msgs if m.error() is None)
    seconds = time.monotonic() - start
    cpu = time.process_time() - cpu0
    consumer.close()
    return {"records": n, "seconds": round(seconds, 3), "records_per_second": round(n / seconds),
            "cpu_seconds": round(cpu, 2)}
