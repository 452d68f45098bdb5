"""Offset-coverage audit: every offset Kafka retains lands exactly once in the tables.

Per partition p, with W_p the batch watermark and S_p the speed layer's committed position:

- batch part ``[earliest, W_p)``: each retained offset exactly once in ``batch.<ds>`` ∪
  the ``_layer = 'batch'`` rows of ``quarantine.<ds>``. A changelog's batch table is the
  latest state by key, so there each offset must be accounted for exactly once as
  quarantined, as its key's row, as superseded, or as a deleted key
  (``loglake.ops.coverage.check_latest_state``);
- speed part ``[W_p (earliest if none), S_p)``: each retained offset exactly once in
  ``speed.<ds>`` ∪ the ``_layer = 'speed'`` quarantine rows (a changelog's speed table
  keeps every valid change, tombstones included, so the same rule applies).

Both at the versions readers are served (``loglake.ledger.snapshots.pin``) and at the tables' newest
versions, where those differ: a write loglake did not make (a notebook, another tool) is in
the newest version long before anything serves it, and a publish refuses to serve it
(``loglake.lake.system_tables.serving_versions``); the audit says which version is damaged and
lists such commits of the batch and quarantine tables since the served versions.

No JVM: the log is read with confluent-kafka (``loglake.kafka.log``), the tables with delta-rs;
the result, its rows in ``_audit_results`` and its lines are ``loglake.ops.audit_report``'s. Reading order is
what makes it race-free while the stream and batch jobs run: the log's offsets first,
then the speed position, then the watermarks, then the tables. Both layers commit their
rows to Delta before they record a position, so the tables read last hold at least
everything below the positions read before them; rows past the positions are ignored. The newest versions are read after the served ones, in the
same order (speed side, ledger, batch).
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import numpy as np

from loglake.core.config import Config, Dataset
from loglake.kafka.admin import group_offsets, log_bounds
from loglake.kafka.log import LogPartition, key_text_sql, read_log, record_change
from loglake.ledger.erasures import erased_offsets
from loglake.ledger.history import unserved_foreign_commits
from loglake.leases import holders
from loglake.ledger.ranges import ledger_path, ledger_rows
from loglake.ledger.snapshots import SPEED_SIDE, DatasetSnapshot, pin
from loglake.tables import open_table
from loglake.ops.audit_report import AuditResult, AuditRow, AuditTotals, LostRange, iso, row, write_results
from loglake.ops.coverage import Coverage, check_exactly_once, check_latest_state

def _changes(config: Config, ds: Dataset):
    """What each record of changelog ``ds`` changes (``loglake.kafka.log.Change``)."""
    if ds.debezium and ds.in_registry:
        from loglake.schemaregistry.serializers import debezium_change

        return debezium_change(config, ds)
    return record_change(ds)


def _table_offsets(config: Config, path: str, topic: str, where: str = "", extra: str = "",
                   version: int | None = None) -> dict[int, dict]:
    """Per partition, a table's ``_offset`` values (and the SQL expression ``extra`` as ``x``) for
    ``topic``, at the pinned ``version`` (None: no table at the pinned point)."""
    import pyarrow as pa
    from deltalake import QueryBuilder


    table = None if version is None else open_table(path, version, config.object_store)
    if table is None:
        return {}
    cols = '"_partition", "_offset"' + (f', {extra} AS x' if extra else "")
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


def without_erased(part: LogPartition, erased: np.ndarray) -> tuple[LogPartition, np.ndarray]:
    """The log's records of one partition as the tables must hold them: without the erased
    offsets (``loglake erase``), which are accounted for in no table; and those offsets."""
    if not len(erased) or not len(part.offsets):
        return part, np.zeros(0, np.int64)
    gone = np.isin(part.offsets, erased)
    if not gone.any():
        return part, np.zeros(0, np.int64)
    keep = ~gone
    keys = None if part.keys is None else [k for k, kept in zip(part.keys, keep) if kept]
    tomb = None if part.tombstone is None else part.tombstone[keep]
    return LogPartition(part.offsets[keep], keys, tomb), part.offsets[gone]


def _check(ds: Dataset, layer: str, part: LogPartition, start: int, end: int, tables: dict) -> Coverage:
    if layer == "batch" and ds.kind == "changelog":
        state = tables["state"]
        return check_latest_state(part.offsets, part.keys, part.tombstone, tables["quarantine"],
                                  state["offsets"], state["x"], start, end)
    return check_exactly_once(part.offsets, np.concatenate([tables["rows"], tables["quarantine"]]), start, end)


def newest(config: Config, ds: Dataset) -> DatasetSnapshot:
    """``ds``'s tables and ledger at their newest versions, not the served ones: read in the
    order of ``loglake.ledger.snapshots.pin`` (the speed-side tables, then the ledger, then the batch
    table), the batch part's quarantine at the quarantine table's newest version too."""

    def current(path: str) -> int | None:
        table = open_table(path, store=config.object_store)
        return None if table is None else table.version()

    versions = {layer: current(config.table_path(ds, layer)) for layer in SPEED_SIDE if getattr(ds.tables, layer, None)}
    ledger_version = current(ledger_path(config))
    rows = [] if ledger_version is None else ledger_rows(config, ds, ledger_version)
    versions["batch"] = current(config.table_path(ds, "batch"))
    return DatasetSnapshot(ds.name, versions, versions.get("quarantine"), ledger_version, rows)


# The tables each layer's check reads, as (layer → version of the layer's table, of its quarantine).
def _versions(snap, layer: str) -> tuple[int | None, int | None]:
    if layer == "batch":
        return snap.version("batch"), snap.batch_quarantine_version
    return snap.version("speed"), snap.version("quarantine")


class _TableReads:
    """The offsets each of a dataset's tables holds, per partition, read once per (table, version).
    ``rows(layer, version)``: the layer's own table (a changelog's batch table with its keys);
    ``quarantined(layer, version)``: that layer's part of the quarantine table."""

    def __init__(self, config: Config, ds: Dataset):
        self.config, self.ds = config, ds
        self._read: dict[tuple[str, str, int | None], dict] = {}

    def _offsets(self, path: str, where: str, extra: str, version: int | None) -> dict:
        if (path, where, version) not in self._read:
            self._read[path, where, version] = _table_offsets(self.config, path, self.ds.topic, where, extra, version)
        return self._read[path, where, version]

    def rows(self, layer: str, version: int | None) -> dict:
        keys = key_text_sql(self.ds.keys) if layer == "batch" and self.ds.kind == "changelog" else ""
        return self._offsets(self.config.table_path(self.ds, layer), "", keys, version)

    def quarantined(self, layer: str, version: int | None) -> dict:
        return self._offsets(self.config.table_path(self.ds, "quarantine"), f" AND \"_layer\" = '{layer}'", "",
                             version)


def _coverage_rows(ds: Dataset, snaps: dict, plans: dict, bounds: dict, after: dict, log: dict, tables: _TableReads,
                   sample: int, watermarks: dict, positions: dict, notes: list[str],
                   erased: dict[int, np.ndarray]) -> list[AuditRow]:
    """One row per partition, layer and point (served, newest): its offsets checked against the
    log (without the ``erased`` ones, counted apart); the newest versions only where they differ
    from the served ones. What a row cannot say (retention moved during the audit, no watermark
    or position yet) goes to ``notes``."""
    served = snaps["served"]
    empty = np.zeros(0, np.int64)
    rows = []
    for point, s in snaps.items():
        for p, ranges in plans[point].items():
            lo_now = after.get(p, bounds[p])[0]
            for layer in ("batch", "speed"):
                start, end = ranges[layer]
                versions = _versions(s, layer)
                if point == "newest" and (versions, (start, end)) == (_versions(served, layer),
                                                                     plans["served"][p][layer]):
                    continue  # the newest versions are the served ones: checked once
                if lo_now > start:
                    if point == "served":
                        notes.append(f"[{p}] retention moved the earliest offset to {lo_now} during the audit; "
                                     f"{layer} checked from there")
                    start, end = lo_now, max(lo_now, end)
                own = tables.rows(layer, versions[0]).get(p, {"offsets": empty, "x": []})
                quarantined = tables.quarantined(layer, versions[1]).get(p, {"offsets": empty})["offsets"]
                part, gone = without_erased(log[p], erased.get(p, empty))
                cov = _check(ds, layer, part, start, end,
                             {"rows": own["offsets"], "state": own, "quarantine": quarantined})
                rows.append(row(p, layer, point, getattr(ds.tables, layer), versions, start, end, cov, sample,
                                int(((gone >= start) & (gone < end)).sum())))
            if point == "served" and watermarks.get(p) is None:
                notes.append(f"[{p}] no batch watermark yet: batch part empty, speed checked from the earliest offset")
            if point == "served" and positions.get(p) is None:
                notes.append(f"[{p}] no speed position committed yet: speed part empty")
    return rows


def _foreign_commits(config: Config, ds: Dataset, newest_snap, notes: list[str]) -> dict:
    """Per table, the commits loglake did not make since the version it serves (noted)."""
    foreign = {}
    for layer in ("batch", "quarantine"):
        found = unserved_foreign_commits(config, ds, layer, newest_snap.ledger, newest_snap.version(layer))
        if found and found[1]:
            table = getattr(ds.tables, layer)
            foreign[table] = found[1]
            commits = ", ".join(f"v{c['version']} {c['operation']} by {c['engine']} at {c['timestamp']}"
                                for c in found[1])
            since = "its creation" if found[0] is None else f"the served version {found[0]}"
            notes.append(f"{table}: commits loglake did not make since {since}: {commits}; "
                         f"not served, and the next publish refuses them (loglake history {table})")
    return foreign


def audit_dataset(config: Config, ds: Dataset, run_id: str | None = None, sample: int = 20,
                  record: bool = True) -> AuditResult:
    """Audit every partition of ``ds`` at the versions readers are served and at the tables'
    newest versions (where those differ); store one row per partition, layer and point in
    ``_audit_results`` (unless ``record`` is false) and return the result. ``sample``: how
    many offending offsets to keep per kind. The caller decides whether to fail."""

    started = time.monotonic()
    audited_at = datetime.now(timezone.utc)
    run_id = run_id or f"audit-{audited_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    # Commit order: log, then speed position, then the dataset pinned at one point (speed-side
    # tables, then the ledger's watermarks and serving point, then batch: loglake.ledger.snapshots),
    # then the same at the tables' newest versions: what a publish would serve next.
    bounds = log_bounds(config, ds.topic)
    positions = group_offsets(config, ds.consumer_group, ds.topic, len(bounds))
    earliest = {p: lo for p, (lo, _hi) in bounds.items()}
    snaps = {"served": pin(config, ds)}
    snaps["newest"] = newest(config, ds)
    busy = holders(config, [ds.name]).get(ds.name)
    snap = snaps["served"]
    plans = {point: _plan_ranges(bounds, positions, s.watermarks(earliest)) for point, s in snaps.items()}
    tables = _TableReads(config, ds)
    for s in snaps.values():  # every table read before the log (the commit order above)
        for layer in ("batch", "speed"):
            table_version, quarantine_version = _versions(s, layer)
            tables.rows(layer, table_version)
            tables.quarantined(layer, quarantine_version)
    log_started = time.monotonic()
    log = read_log(config, ds.topic, {p: (min(pl[p]["batch"][0] for pl in plans.values()),
                                          max(pl[p]["speed"][1] for pl in plans.values())) for p in bounds},
                   changes=_changes(config, ds) if ds.kind == "changelog" else None)
    log_seconds = time.monotonic() - log_started
    # The erased positions, read after the tables (a request recorded meanwhile finds its rows
    # still there: an "unexpected" row, noted below while its erasure holds the writer's lease).
    erased = erased_offsets(config, ds.topic).per_partition()
    # Retention may have deleted offsets while we read: check only what is still retained.
    after = log_bounds(config, ds.topic)
    notes: list[str] = []
    rows = _coverage_rows(ds, snaps, plans, bounds, after, log, tables, sample, snap.watermarks(earliest), positions,
                          notes, erased)
    foreign = _foreign_commits(config, ds, snaps["newest"], notes)
    newest_bad = [r for r in rows if r.point == "newest" and not r.ok]
    if newest_bad and busy:
        notes.append(f"{ds.name} was being written while its newest versions were read "
                     f"({busy.get('operation', 'a writer')} run {busy.get('run_id')}): a check of them may have met "
                     "that work half done; audit again once it finished")
    served = AuditTotals.of([r for r in rows if r.point == "served"])
    result = AuditResult(
        dataset=ds.name, topic=ds.topic, kind=ds.kind, run_id=run_id, audited_at=audited_at.isoformat(),
        ok=all(r.ok for r in rows), offsets_checked=served.offsets_checked, missing=served.missing,
        duplicated=served.duplicated, unexpected=served.unexpected,
        versions={point: {layer: s.version(layer) for layer in s.versions} | {
            "batch_quarantine": s.batch_quarantine_version} for point, s in snaps.items()},
        newest=AuditTotals.of([r for r in rows if r.point == "newest"]),
        foreign_commits=foreign,
        log_offsets_read=sum(len(part.offsets) for part in log.values()),
        log_seconds=round(log_seconds, 3), seconds=round(time.monotonic() - started, 3),
        partitions=rows, notes=notes,
        lost=[LostRange(r["partition"], r["start"], r["end"], r["reason"], r["recorded_by"], iso(r["committed_at"]))
              for r in snap.lost],
        erased=served.erased,
    )
    if record:
        write_results(config, result, audited_at)
    return result


