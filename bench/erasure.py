"""E1 and E2: what a GDPR erasure costs, and what the erased keys cost the speed layer after.

Both on the benchmark dataset (``loglake.testing.workload``: job_views' typed fields, its
record key and ``user_id`` field the data subject), produced from the workload's own records
with ``user_id`` rewritten so that each record list entry is a subject of its own (1 in 1,000
records malformed, as the workload's are; ``subjects``). The topic cycles through the list,
so the subject of entry ``j`` has exactly ``len(range(j, records, entries))`` records, spread
over its whole partition.

- E1, one erasure on a 5,000,000-row table (``LOGLAKE_BENCH_E1_RECORDS`` overrides; ``--quick``
  200,000): ~100 B asked per record as bench/batch.py's P4 (the typed fields make ~170 B),
  100,000 subjects of 50 records each, 6 partitions. The speed layer runs once over the
  topic available-now (three micro-batches, ``loglake.speed.stream.run_speed``) and the batch
  layer recomputes the whole log once (``loglake.batch.recompute.run_batch``, as P4 does), so
  speed, batch and quarantine tables all hold the subjects' rows. Then, per repeat, one
  subject (a different one each time, 50 records) is erased:
  ``loglake.erasure.erase.erase(config, ds, key, reason=..., field_name="user_id")``, timed
  from outside (wall seconds: the value, median of the repeats). Before it, the search alone
  is timed: ``loglake.erasure.search.in_log`` (the retained log, confluent-kafka) and
  ``in_tables`` (every table, delta-rs) for the same key, as the erasure runs them. Per
  table: the rows deleted and the files the erasure's delta-rs commit removed and added
  (its ``operationMetrics``, read from the table's history at the commit's version). After
  it, ``purge_due(config, ds, force=True)``: wall seconds and the files of older versions it
  deleted (a purge that fails is reported in the run's ``purge_error`` and the summary, so the
  erasure's figures stay). No speed stream runs meanwhile (its appends would be held,
  ``appends_paused``).
- E2, the speed layer's rate with 10,000 erased keys ÷ with none: bench/speed.py's P1 topic
  shape (600,000 × 1 KB, 6 partitions, micro-batches of a third; ``--quick`` a fifth of it),
  of 120,000 subjects cycled; every 12th subject erased (10,000 keys, 1 in 12 records:
  ~8%). Their positions are read from the log once (``loglake.kafka.log.read_log``). A run
  with erasures gets, in its fresh config, an erasure ledger built directly (not 10,000
  ``erase`` calls): ``loglake.ledger.erasures.record`` once per ``KEYS_PER_ERASURE`` keys,
  each ``Erasure`` standing for that many keys (its ``subject`` the hash of their list) with
  their offsets — 10 requests, not one per key, since 10,000 ``record`` calls would be 20,000
  delta-rs commits; the speed layer reads only the offsets (``erased_offsets``) whatever the
  requests' shape. The runs without have no ledger at all. Each micro-batch then anti-joins
  the erased positions (``loglake.records.kafka_source.without_erased``, broadcast). Runs as
  ``bench.speed.Topic``'s (steady micro-batches after the first), with and without
  alternating, the first of each round rotating. E2 = records/s with ÷ without (medians);
  both rates, CPU-seconds per million and the erased offsets in the detail.
"""

from __future__ import annotations

import json
import os
import time

from bench.harness import Harness, median, result
from bench.speed import P1_RECORDS, Topic
from loglake.testing import workload

FIELD = "user_id"
PARTITIONS = 6
USER_BASE = 10_000_000           # subject j's user id: USER_BASE + j (8 digits: few false hits)

E1_RECORDS = 5_000_000
E1_QUICK_RECORDS = 200_000
E1_RECORD_BYTES = 100            # asked, as P4's (the typed fields alone make ~170 B)
E1_PER_SUBJECT = 50              # records of each subject

E2_SUBJECTS = 120_000
E2_ERASED = 10_000               # every E2_SUBJECTS // E2_ERASED-th subject
KEYS_PER_ERASURE = 1_000         # keys per ledger request (see the docstring)


def subjects(record_bytes: int, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` records (key, value) of the benchmark dataset, entry ``j`` the subject
    ``USER_BASE + j``: the workload's pool with ``user_id`` (and the record key) rewritten; a
    malformed record (``user_id`` a string) stays malformed."""
    templates = [json.loads(v) for _k, v in workload.pool(record_bytes)]
    out = []
    for j in range(count):
        value = dict(templates[j % len(templates)])
        user = USER_BASE + j
        value[FIELD] = str(user) if isinstance(value[FIELD], str) else user
        out.append((str(user).encode(), json.dumps(value).encode()))
    return out


class SubjectTopic(Topic):
    """``Topic`` cycling through ``entries`` subjects (``subjects``)."""

    def __init__(self, h: Harness, record_bytes: int, records: int, entries: int):
        self.entries = entries
        super().__init__(h, PARTITIONS, record_bytes, records)

    def fill(self, config, topic: str) -> float:
        return workload.produce(self.h.bootstrap, topic, self.records, self.record_bytes,
                                records=subjects(self.record_bytes, self.entries))

    def records_of(self, j: int) -> int:
        """How many records subject ``j`` has on the topic."""
        return len(range(j, self.records, self.entries))

    def well_formed(self, j: int) -> bool:
        return j % 2000 % workload.BAD_EVERY != workload.BAD_EVERY - 1

    def speed_run(self, i, erased: dict[bytes, dict[int, list[int]]] | None = None) -> dict:
        """``Topic.speed_run``, with (``erased``: key → its offsets per partition) the erasure
        ledger of those keys written into the run's fresh config first (not timed)."""
        from loglake.speed.stream import run_speed

        config = self.config(f"run{i}-{'erased' if erased else 'none'}")
        ds = config.dataset(workload.DATASET)
        if erased:
            t0 = time.monotonic()
            n = write_ledger(config, ds, erased)
            self.h.log(f"  ledger of {len(erased):,} erased keys ({n:,} offsets) written in "
                       f"{time.monotonic() - t0:.1f}s")
        spark = self.h.spark(config)
        return self._timed(i, "speed run" + (" with erased keys" if erased else ""), spark,
                           lambda: run_speed(spark, config, ds, available_now=True)["_batches"])


def write_ledger(config, ds, erased: dict[bytes, dict[int, list[int]]]) -> int:
    """The erasure ledger of ``erased`` (key → offsets per partition): one ``record`` per
    ``KEYS_PER_ERASURE`` keys. The offsets recorded."""
    import uuid
    from datetime import datetime, timezone

    import pyarrow as pa

    from loglake.kafka.admin import log_bounds
    from loglake.ledger import erasures
    from loglake.ledger.erasures import Erasure, subject

    positions = {p: hi for p, (_lo, hi) in sorted(log_bounds(config, ds.topic).items())}
    keys = sorted(erased)
    total = 0
    for n, at in enumerate(range(0, len(keys), KEYS_PER_ERASURE)):
        batch = keys[at:at + KEYS_PER_ERASURE]
        parts, offs = [], []
        for k in batch:
            for p, os_ in erased[k].items():
                parts += [p] * len(os_)
                offs += os_
        table = pa.table({"partition": pa.array(parts, pa.int32()), "offset": pa.array(offs, pa.int64())})
        now = datetime.now(timezone.utc)
        e = Erasure(f"erase-bench-{n}-{uuid.uuid4().hex[:8]}", ds.name, ds.topic, FIELD,
                    subject(ds.name, FIELD, ",".join(k.decode() for k in batch)), False,
                    f"bench E2: {len(batch)} keys", "bench", now, positions, table.num_rows)
        erasures.record(config, e, table)
        total += table.num_rows
    return total


def offsets_of_keys(config, topic: str, keys: set[bytes]) -> dict[bytes, dict[int, list[int]]]:
    """Per key of ``keys``, its offsets per partition, read from the whole log."""
    from loglake.kafka.admin import log_bounds
    from loglake.kafka.log import read_log

    found = read_log(config, topic, log_bounds(config, topic),
                     changes=lambda k, v: (k if k in keys else None, False), match=lambda k, v: k in keys)
    out: dict[bytes, dict[int, list[int]]] = {}
    for p, part in found.items():
        for o, k in zip(part.offsets.tolist(), part.keys):
            if k is not None:
                out.setdefault(k, {}).setdefault(p, []).append(o)
    return out


def commit_metrics(config, path: str, version: int) -> dict:
    """The ``operationMetrics`` of the commit at ``version`` of the table at ``path``."""
    from loglake.tables import open_table

    table = open_table(path, store=config.object_store)
    for entry in table.history(table.version() - version + 1):
        if entry.get("version") == version:
            return entry.get("operationMetrics") or {}
    return {}


def e1(h: Harness) -> dict:
    from loglake.batch.recompute import run_batch
    from loglake.core.offsets import OffsetRange
    from loglake.core.plans import Plan
    from loglake.erasure import search
    from loglake.erasure.erase import erase, purge_due, side_tables
    from loglake.kafka.admin import log_bounds
    from loglake.speed.stream import run_speed
    from loglake.tables import dataset_tables, snapshot

    count = int(os.environ.get("LOGLAKE_BENCH_E1_RECORDS") or (E1_QUICK_RECORDS if h.quick else E1_RECORDS))
    entries = max(1, count // E1_PER_SUBJECT)
    topic = SubjectTopic(h, E1_RECORD_BYTES, count, entries)
    config = topic.config("e1")
    ds = config.dataset(workload.DATASET)
    spark = h.spark(config)

    t0 = time.monotonic()
    run_speed(spark, config, ds, available_now=True)
    speed_s = time.monotonic() - t0
    bounds = log_bounds(config, ds.topic)
    plan = Plan(ds.name, tuple(OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in sorted(bounds.items())),
                "backfill", ("E1 benchmark: the whole log",))
    t0 = time.monotonic()
    summary = run_batch(spark, config, ds, plan, "e1-recompute")
    batch_s = time.monotonic() - t0
    tables = {}
    for t in dataset_tables(config, ds):
        try:
            s = snapshot(t.path, store=config.object_store)
        except FileNotFoundError:
            continue
        tables[t.name] = {"layer": t.layer, "files": s.files, "bytes": s.bytes}
    h.log(f"E1: speed layer over {count:,} records in {speed_s:.1f}s, batch recompute in {batch_s:.1f}s "
          f"({summary.records:,} + {summary.quarantined:,} quarantined); tables {tables}")

    def one(i: int) -> dict:
        # Subjects spread over the list, a different one each repeat, well-formed (the rows in
        # speed and batch; a malformed one's are in the quarantine).
        j = (i + 1) * entries // (h.repeats + 1)
        while not topic.well_formed(j):
            j += 1
        key = str(USER_BASE + j)
        match = search.matcher(ds, FIELD, key)
        t0 = time.monotonic()
        in_log = search.in_log(config, ds, log_bounds(config, ds.topic), match)
        log_s = time.monotonic() - t0
        t0 = time.monotonic()
        in_tables = search.in_tables(config, ds, FIELD, key, match, side_tables(config, ds))
        tables_s = time.monotonic() - t0
        t0 = time.monotonic()
        res = erase(config, ds, key, reason="bench E1", field_name=FIELD, requested_by="bench",
                    say=lambda m: h.log(f"  erase: {m}"))
        erase_s = time.monotonic() - t0
        per_table = {}
        for name, d in res.tables.items():
            m = commit_metrics(config, d["path"], d["version"])
            per_table[name] = {"rows": d["rows"], "version": d["version"],
                               "files_removed": m.get("num_removed_files"), "files_added": m.get("num_added_files"),
                               "rows_copied": m.get("num_copied_rows"), "delete_ms": m.get("execution_time_ms")}
        t0 = time.monotonic()
        try:
            done, purge_error = purge_due(config, ds, force=True), None
        except Exception as e:  # a purge that fails must not lose the erasure's figures: reported
            done, purge_error = [], f"{type(e).__name__}: {e}"
            h.log(f"  erasure {i}: the purge failed: {purge_error}")
        purge_s = time.monotonic() - t0
        purged = sum(len(t["files"]) for d in done for t in d["tables"])
        run = {"subject_records": topic.records_of(j), "offsets": res.offsets,
               "search_log_seconds": round(log_s, 2), "search_log_offsets": sum(len(o) for o in in_log.values()),
               "search_tables_seconds": round(tables_s, 2),
               "search_tables_offsets": sum(len(o) for o in in_tables.values()),
               "erase_seconds": round(erase_s, 2), "erase_own_seconds": res.seconds, "tables": per_table,
               "rows_deleted": sum(d["rows"] for d in res.tables.values()),
               "files_rewritten": sum(t["files_removed"] or 0 for t in per_table.values()),
               "purge_seconds": round(purge_s, 2), "purged_files": purged, "purge_error": purge_error,
               "notes": res.notes}
        h.log(f"  erasure {i}: {res.offsets} offsets, {run['rows_deleted']} rows in {len(per_table)} tables "
              f"({run['files_rewritten']} files rewritten) in {erase_s:.1f}s (search: log {log_s:.1f}s, tables "
              f"{tables_s:.1f}s); purge {purge_s:.1f}s, {purged} files")
        return run

    runs = h.repeat(one)
    purge_errors = [r["purge_error"] for r in runs if r["purge_error"]]
    med = {k: median([r[k] for r in runs]) for k in ("erase_seconds", "search_log_seconds", "search_tables_seconds",
                                                      "purge_seconds", "offsets", "rows_deleted", "files_rewritten",
                                                      "purged_files")}
    m = result("E1", f"one erasure's cost on a {count / 1e6:g}M-row table (wall seconds)", round(med["erase_seconds"], 2),
               "s", runs=runs,
               detail={"records": count, "record_bytes_asked": E1_RECORD_BYTES, "partitions": PARTITIONS,
                       "subjects": entries, "records_per_subject": E1_PER_SUBJECT, "field": FIELD,
                       "medians": med, "tables_before": tables, "purge_errors": purge_errors,
                       "setup": {"produce_seconds": round(topic.produce_seconds, 1),
                                 "speed_run_seconds": round(speed_s, 1), "batch_recompute_seconds": round(batch_s, 1),
                                 "batch_records": summary.records, "batch_quarantined": summary.quarantined}},
               chart={"kind": "bar", "labels": ["search: log", "search: tables", "erase (whole)", "purge"],
                      "values": [med["search_log_seconds"], med["search_tables_seconds"], med["erase_seconds"],
                                 med["purge_seconds"]],
                      "ylabel": f"seconds (median; {count / 1e6:g}M rows, a {E1_PER_SUBJECT}-record subject)",
                      "colors": ["tab:gray", "tab:gray", "tab:blue", "tab:orange"]})
    m["summary"] = (f"{count / 1e6:g}M rows: erase {med['erase_seconds']:.1f}s ({med['offsets']:.0f} offsets, "
                    f"{med['rows_deleted']:.0f} rows, {med['files_rewritten']:.0f} files rewritten); its search "
                    f"alone: log {med['search_log_seconds']:.1f}s + tables {med['search_tables_seconds']:.1f}s; "
                    f"purge {med['purge_seconds']:.1f}s ({med['purged_files']:.0f} files)"
                    + (f"; the purge FAILED in {len(purge_errors)} of {len(runs)} runs: {purge_errors[0]}"
                       if purge_errors else ""))
    return m


def e2(h: Harness) -> dict:
    records = max(30_000, int(P1_RECORDS * (0.2 if h.quick else 1.0)))
    topic = SubjectTopic(h, 1024, records, E2_SUBJECTS)
    step = E2_SUBJECTS // E2_ERASED
    keys = {str(USER_BASE + j).encode() for j in range(0, E2_SUBJECTS, step) if j < records}
    t0 = time.monotonic()
    erased = offsets_of_keys(topic.config("e2-positions"), topic.topic, keys)
    offsets = sum(len(o) for per in erased.values() for o in per.values())
    expected = sum(topic.records_of(j) for j in range(0, E2_SUBJECTS, step))
    h.log(f"E2: {len(erased):,} keys to erase hold {offsets:,} of {records:,} records (expected {expected:,}), "
          f"found in {time.monotonic() - t0:.1f}s")

    def round_(i: int) -> dict:
        # The first of each round alternates: neither side gets the JVM's warm-up to itself.
        turn = ["none", "erased"] if i % 2 == 0 else ["erased", "none"]
        return {side: topic.speed_run(i, erased if side == "erased" else None) for side in turn}

    rounds = h.repeat(round_)
    rps = {side: median([r[side]["records_per_second"] for r in rounds]) for side in ("none", "erased")}
    cpu = {side: median([r[side]["cpu_seconds_per_million"] for r in rounds]) for side in ("none", "erased")}
    ratio = rps["erased"] / rps["none"]
    labels = ["no erasure", f"{len(erased):,} erased keys"]
    m = result("E2", "speed layer with 10,000 erased keys ÷ with none", round(ratio, 3), "ratio",
               reference={"no erasures records/s": rps["none"]}, runs=rounds,
               detail={"records_per_second": rps, "cpu_seconds_per_million": cpu, "erased_keys": len(erased),
                       "erased_offsets": offsets, "erased_share": round(offsets / records, 4),
                       "ledger_requests": -(-len(erased) // KEYS_PER_ERASURE), "records": records,
                       "record_bytes": 1024, "subjects": E2_SUBJECTS, "partitions": PARTITIONS,
                       "max_offsets_per_trigger": -(-records // 3)},
               chart={"kind": "panels", "panels": [
                   {"kind": "bar", "labels": labels, "values": [rps["none"], rps["erased"]],
                    "ylabel": "records/s (steady micro-batches)", "title": "throughput"},
                   {"kind": "bar", "labels": labels, "values": [cpu["none"], cpu["erased"]],
                    "ylabel": "CPU-seconds per million records", "title": "CPU (whole run incl. first batch)"}]})
    m["summary"] = (f"with {len(erased):,} erased keys ({offsets:,} offsets) {rps['erased']:,.0f} rec/s vs none "
                    f"{rps['none']:,.0f} rec/s; CPU-s per million {cpu['erased']} / {cpu['none']}")
    return m


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    out = []
    if only is None or "E1" in only:
        out.append(e1(h))
    if only is None or "E2" in only:
        out.append(e2(h))
    return out
