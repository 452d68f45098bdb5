"""Offset-coverage audit: every offset Kafka retains lands exactly once in the tables.

Per partition p, with W_p the batch watermark and S_p the speed layer's committed position:

- batch part ``[earliest, W_p)``: each retained offset exactly once in ``batch.<ds>`` ∪
  the ``_layer = 'batch'`` rows of ``quarantine.<ds>``. A changelog's batch table is the
  latest state by key, so there each offset must be accounted for exactly once as
  quarantined, as its key's row, as superseded, or as a deleted key
  (``loglake.coverage.check_latest_state``);
- speed part ``[W_p (earliest if none), S_p)``: each retained offset exactly once in
  ``speed.<ds>`` ∪ the ``_layer = 'speed'`` quarantine rows (a changelog's speed table
  keeps every valid change, tombstones included, so the same rule applies).

No JVM: the log is read with confluent-kafka, the tables with delta-rs. Reading order is
what makes it race-free while the stream and batch jobs run: the log's offsets first,
then the speed position, then the watermarks, then the tables. Both layers commit their
rows to Delta before they record a position, so the tables read last hold at least
everything below the positions read before them; rows past the positions are ignored.
"""

from __future__ import annotations

import time
import uuid
from array import array
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from loglake.config import Config, Dataset
from loglake.coverage import Coverage, check_exactly_once, check_latest_state, describe_sample
from loglake.coverage import sample as first_offsets
from loglake.errors import KafkaUnavailableError

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
    from confluent_kafka import Consumer, KafkaError, TopicPartition

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


def _table_offsets(config: Config, path: str, topic: str, where: str = "", extra: str = "",
                   version: int | None = None) -> dict[int, dict]:
    """Per partition, a table's ``_offset`` values (and ``extra`` column as ``x``) for ``topic``,
    at the pinned ``version`` (None: no table at the pinned point)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    from loglake.tables import open_table

    table = None if version is None else open_table(path, version)
    if table is None:
        return {}
    cols = '"_partition", "_offset"' + (f', CAST("{extra}" AS VARCHAR) AS x' if extra else "")
    topic_sql = topic.replace("'", "''")
    sql = f"SELECT {cols} FROM t WHERE \"_topic\" = '{topic_sql}'{where} ORDER BY \"_partition\", \"_offset\""
    data = pa.table(QueryBuilder().register("t", table).execute(sql).read_all())
    parts = data.column("_partition").to_numpy()
    offsets = data.column("_offset").to_numpy().astype(np.int64)
    xs = data.column("x").to_pylist() if extra else None
    out = {}
    for p in np.unique(parts).tolist():
        idx = np.flatnonzero(parts == p)
        out[p] = {"offsets": offsets[idx], "x": [xs[i] for i in idx] if xs is not None else None}
    return out


def _plan_ranges(bounds: dict[int, tuple[int, int]], positions: dict[int, int | None],
                 watermarks: dict[int, int]) -> dict[int, dict[str, tuple[int, int]]]:
    """Per partition, the batch range ``[earliest, W_p)`` and the speed range ``[W_p, S_p)``."""
    out = {}
    for p, (lo, _hi) in sorted(bounds.items()):
        w = watermarks.get(p)
        batch_to = max(lo, w) if w is not None else lo
        pos = positions.get(p)
        speed_to = max(batch_to, pos) if pos is not None else batch_to
        out[p] = {"batch": (lo, batch_to), "speed": (batch_to, speed_to)}
    return out


def _check(ds: Dataset, layer: str, part: LogPartition, start: int, end: int, tables: dict) -> Coverage:
    if layer == "batch" and ds.kind == "changelog":
        state = tables["state"]
        return check_latest_state(part.offsets, part.keys, part.tombstone, tables["quarantine"],
                                  state["offsets"], state["x"], start, end)
    return check_exactly_once(part.offsets, np.concatenate([tables["rows"], tables["quarantine"]]), start, end)


def audit_dataset(config: Config, ds: Dataset, run_id: str | None = None, sample: int = 20,
                  record: bool = True) -> dict:
    """Audit every partition of ``ds``; store one row per partition and layer in
    ``_audit_results`` (unless ``record`` is false) and return the result. ``sample``:
    how many offending offsets to keep per kind. The caller decides whether to fail."""
    from loglake.kafka_admin import group_offsets, log_bounds
    from loglake.snapshots import pin

    started = time.monotonic()
    audited_at = datetime.now(timezone.utc)
    run_id = run_id or f"audit-{audited_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    # Commit order: log, then speed position, then the dataset pinned at one point (speed-side
    # tables, then the ledger's watermarks and serving point, then batch: loglake.snapshots).
    bounds = log_bounds(config, ds.topic)
    positions = group_offsets(config, ds.consumer_group, ds.topic, len(bounds))
    snap = pin(config, ds)
    wms = snap.watermarks({p: lo for p, (lo, _hi) in bounds.items()})
    plan = _plan_ranges(bounds, positions, wms)
    changelog = ds.kind == "changelog"
    quarantine = config.table_path(ds, "quarantine")
    tables = {
        "batch": _table_offsets(config, config.table_path(ds, "batch"), ds.topic, extra=ds.key if changelog else "",
                                version=snap.version("batch")),
        "speed": _table_offsets(config, config.table_path(ds, "speed"), ds.topic, version=snap.version("speed")),
        "q_batch": _table_offsets(config, quarantine, ds.topic, " AND \"_layer\" = 'batch'",
                                  version=snap.batch_quarantine_version),
        "q_speed": _table_offsets(config, quarantine, ds.topic, " AND \"_layer\" = 'speed'",
                                  version=snap.version("quarantine")),
    }
    log_started = time.monotonic()
    log = read_log(config, ds.topic, {p: (r["batch"][0], r["speed"][1]) for p, r in plan.items()}, keys=changelog)
    log_seconds = time.monotonic() - log_started
    # Retention may have deleted offsets while we read: check only what is still retained.
    after = log_bounds(config, ds.topic)
    notes = []
    rows = []
    empty = np.zeros(0, np.int64)
    for p, ranges in plan.items():
        lo_now = after.get(p, bounds[p])[0]
        for layer in ("batch", "speed"):
            start, end = ranges[layer]
            if lo_now > start:
                notes.append(f"[{p}] retention moved the earliest offset to {lo_now} during the audit; "
                             f"{layer} checked from there")
                start, end = lo_now, max(lo_now, end)
            own = tables[layer].get(p, {"offsets": empty, "x": []})
            quarantined = tables[f"q_{layer}"].get(p, {"offsets": empty})["offsets"]
            cov = _check(ds, layer, log[p], start, end,
                         {"rows": own["offsets"], "state": own, "quarantine": quarantined})
            rows.append(_row(ds, p, layer, start, end, cov, sample))
        if wms.get(p) is None:
            notes.append(f"[{p}] no batch watermark yet: batch part empty, speed checked from the earliest offset")
        if positions.get(p) is None:
            notes.append(f"[{p}] no speed position committed yet: speed part empty")
    result = {
        "dataset": ds.name, "topic": ds.topic, "kind": ds.kind, "run_id": run_id,
        "audited_at": audited_at.isoformat(), "ok": all(r["ok"] for r in rows),
        "offsets_checked": sum(r["offsets_checked"] for r in rows),
        "missing": sum(r["missing"] for r in rows), "duplicated": sum(r["duplicated"] for r in rows),
        "unexpected": sum(r["unexpected"] for r in rows),
        "log_offsets_read": sum(len(part.offsets) for part in log.values()),
        "log_seconds": round(log_seconds, 3), "seconds": round(time.monotonic() - started, 3),
        "partitions": rows, "notes": notes,
        # Offsets the log lost before a layer read them, accepted by an operator: not checked
        # (the log no longer holds them), reported.
        "lost": [{k: (r[k].isoformat() if hasattr(r[k], "isoformat") else r[k])
                  for k in ("partition", "start", "end", "reason", "recorded_by", "committed_at")} for r in snap.lost],
    }
    if record:
        write_results(config, result, audited_at)
    return result


def _row(ds: Dataset, p: int, layer: str, start: int, end: int, cov: Coverage, n: int) -> dict:
    return {
        "partition": p, "layer": layer, "checked_from": start, "checked_to": end,
        "offsets_checked": cov.checked, "missing": len(cov.missing), "duplicated": len(cov.duplicated),
        "unexpected": len(cov.unexpected), "sample_missing": first_offsets(cov.missing, n),
        "sample_duplicated": first_offsets(cov.duplicated, n),
        "sample_unexpected": first_offsets(cov.unexpected, n),
        "describe_missing": describe_sample(cov.missing, n),
        "describe_duplicated": describe_sample(cov.duplicated, n),
        "describe_unexpected": describe_sample(cov.unexpected, n), "ok": cov.ok,
    }


def write_results(config: Config, result: dict, audited_at: datetime) -> None:
    """Append the audit's rows to ``_audit_results`` (``loglake.contracts.AUDIT_RESULTS``)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from loglake.contracts import AUDIT_RESULTS

    rows = [{
        **{k: r[k] for k in ("partition", "layer", "checked_from", "checked_to", "offsets_checked", "missing",
                             "duplicated", "unexpected", "ok")},
        "dataset": result["dataset"], "topic": result["topic"], "run_id": result["run_id"], "audited_at": audited_at,
        "sample_missing": r["describe_missing"], "sample_duplicated": r["describe_duplicated"],
        "sample_unexpected": r["describe_unexpected"],
    } for r in result["partitions"]]
    path = config.system_table_path(AUDIT_RESULTS).replace("s3a://", "s3://")
    write_deltalake(path, pa.Table.from_pylist(rows, schema=AUDIT_RESULTS.contract.arrow_schema()), mode="append")


def format_audit(result: dict) -> list[str]:
    """Lines for an operator: the verdict, then per partition and layer the counts and the
    offending offsets (a sample, with the total, when there are many)."""
    verdict = "OK" if result["ok"] else "FAILED"
    lines = [f"audit {result['dataset']} ({result['topic']}, {result['kind']}): {verdict}: "
             f"{result['offsets_checked']:,} offsets checked, {result['missing']} missing, "
             f"{result['duplicated']} duplicated, {result['unexpected']} unexpected "
             f"(run {result['run_id']}, {result['seconds']:.1f}s)"]
    for r in result["partitions"]:
        lines.append(f"  [{r['partition']}] {r['layer']:<5} [{r['checked_from']}, {r['checked_to']})  "
                     f"{r['offsets_checked']} checked  {r['missing']} missing  {r['duplicated']} duplicated  "
                     f"{r['unexpected']} unexpected")
        for kind in ("missing", "duplicated", "unexpected"):
            if r[kind]:
                lines.append(f"      {kind} offsets: {r['describe_' + kind]}")
    lines += [f"  acknowledged loss: [{r['partition']}] offsets [{r['start']}, {r['end']}) "
              f"({r['end'] - r['start']:,} offsets) accepted by {r['recorded_by']} at {r['committed_at']}: {r['reason']}"
              for r in result.get("lost", [])]
    lines += [f"  note: {n}" for n in result["notes"]]
    return lines
