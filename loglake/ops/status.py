"""One place that computes each dataset's state (CLI, Airflow UI page, tests).

Per partition: retained range, log end offset, speed position, batch watermark, lag in
records and in seconds, and how long until retention may delete the oldest offset a
layer has not processed. Per dataset: the topic's retention, the last quality and audit
results, and each table's Delta version and file count. ``loglake status``, ``loglake
speed status`` and the loglake page in the Airflow UI all print what ``dataset_status``
returns; nothing here is computed twice.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone

from loglake.core.config import Config, Dataset
from loglake.core.errors import describe_holder
from loglake.kafka.admin import dataset_state, record_timestamps, topic_configs
from loglake.leases import holders
from loglake.ledger.erasures import erasures
from loglake.ledger.losses import speed_positions
from loglake.ledger.ranges import batch_watermarks, ledger_rows, lost_ranges
from loglake.ledger.results import AuditRecord, QualityRecord, last_audit, last_quality
from loglake.schema_versions import format_text
from loglake.schema_versions import schema_text as text
from loglake.tables import dataset_tables, snapshot
from loglake.schemaregistry.resolve import schema_status


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    earliest: int
    end: int
    speed_position: int | None
    watermark: int | None
    # Age of the oldest record the speed layer has not processed (now − its Kafka
    # timestamp); 0 when caught up, None without a speed position.
    lag_seconds: float | None = None
    # min(speed position, batch watermark or earliest): the oldest offset some layer still needs.
    oldest_unprocessed: int | None = None
    # Age of the oldest record the batch layer has not published (the one at the watermark, or
    # at the earliest offset before the first publish); 0 when published to the log end.
    batch_lag_seconds: float | None = None
    # Seconds until retention may delete ``oldest_unprocessed`` (its timestamp +
    # retention.ms − now; negative: overdue). None: nothing unprocessed, or retention
    # never deletes (retention.ms = -1, or a compact-only topic).
    retention_seconds: float | None = None

    @property
    def speed_lag(self) -> int | None:
        return None if self.speed_position is None else self.end - self.speed_position

    @property
    def batch_lag(self) -> int:
        return self.end - (self.watermark if self.watermark is not None else self.earliest)

    def to_dict(self) -> dict:
        return {**asdict(self), "speed_lag": self.speed_lag, "batch_lag": self.batch_lag}


@dataclass(frozen=True)
class TableStatus:
    layer: str  # speed, batch, quarantine, latest
    name: str
    path: str
    version: int | None  # None: the table does not exist yet
    files: int | None


@dataclass(frozen=True)
class DatasetStatus:
    name: str
    topic: str
    kind: str
    partitions: list[PartitionStatus]
    retention_ms: int | None  # None: never deleted by time (-1, or compact only)
    cleanup_policy: str | None
    quality: QualityRecord | None
    audit: AuditRecord | None
    tables: list[TableStatus] = field(default_factory=list)
    at: float = 0.0  # when it was read (epoch seconds): the "now" of every age above
    writer: dict | None = None  # the holder of the dataset's lease (loglake.leases), None: free
    lost: list[dict] = field(default_factory=list)  # ranges accepted as lost (loglake.ledger.losses), oldest first
    schema: dict = field(default_factory=dict)  # loglake.schema_versions.schema_status
    erasures: dict = field(default_factory=dict)  # erasure_summary: recorded, applied, purged, pending purge

    def to_dict(self) -> dict:
        """JSON-ready (timestamps as ISO strings)."""
        return _jsonable({**asdict(self), "partitions": [p.to_dict() for p in self.partitions]})


def dataset_status(config: Config, ds: Dataset, now: float | None = None) -> DatasetStatus:
    """Everything ``loglake status`` and the UI show about ``ds``, read once.

    Kafka: end offsets and positions, one consumer for the record timestamps, one admin
    call for the topic's retention; Delta (no JVM): the ledger, the record tables and
    each table's log.
    """

    parts = dataset_state(config, ds)
    if any(s.speed_position is None and s.end > s.earliest for s in parts):
        # The group's record follows the micro-batches asynchronously (and a run may end before it is
        # made): where it has none for a partition holding records, the position the stream's tables
        # record (reading them costs a scan, so only then).
        landed = speed_positions(config, ds, {s.partition: s.speed_position for s in parts})
        parts = [replace(s, speed_position=landed.get(s.partition)) for s in parts]
    marks = batch_watermarks(config, ds, {s.partition: s.earliest for s in parts})
    settings = topic_configs(config, ds.topic)
    policy = settings.get("cleanup.policy")
    retention = int(settings.get("retention.ms", "-1"))
    if retention < 0 or (policy is not None and "delete" not in policy.split(",")):
        retention = None

    oldest = {}
    for s in parts:
        needed = [s.speed_position if s.speed_position is not None else s.earliest,
                  marks.get(s.partition, s.earliest)]
        oldest[s.partition] = max(min(needed), s.earliest)
    # The ages come from the record at an offset: the speed position's, the oldest unprocessed
    # one's and the oldest unpublished one's (often the same offsets). One consumer reads them all.
    unpublished = {s.partition: max(marks.get(s.partition, s.earliest), s.earliest) for s in parts}
    wanted = {s.partition: [o for o in (s.speed_position, oldest[s.partition], unpublished[s.partition])
                            if o is not None and o < s.end] for s in parts}
    stamps = record_timestamps(config, ds.topic, wanted)
    now = time.time() if now is None else now

    def age(p: int, offset: int | None, end: int) -> float | None:
        if offset is None:
            return None
        ts = stamps.get((p, offset))
        return 0.0 if offset >= end or ts is None else max(0.0, now - ts / 1000)

    result = []
    for s in parts:
        old = oldest[s.partition] if oldest[s.partition] < s.end else None
        ts = stamps.get((s.partition, old)) if old is not None else None
        left = None if retention is None or ts is None else (ts + retention) / 1000 - now
        result.append(PartitionStatus(s.partition, s.earliest, s.end, s.speed_position, marks.get(s.partition),
                                      lag_seconds=age(s.partition, s.speed_position, s.end),
                                      batch_lag_seconds=age(s.partition, unpublished[s.partition], s.end),
                                      oldest_unprocessed=old, retention_seconds=left))

    lost = [{k: r[k] for k in ("partition", "start", "end", "reason", "recorded_by", "committed_at")}
            for r in lost_ranges(ledger_rows(config, ds))]

    return DatasetStatus(ds.name, ds.topic, ds.kind, result, retention, policy,
                         last_quality(config, ds), last_audit(config, ds), table_status(config, ds), now,
                         holders(config, [ds.name]).get(ds.name), lost, schema_status(config, ds),
                         erasure_summary(config, ds))


def erasure_summary(config: Config, ds: Dataset) -> dict:
    """The dataset's erasures (``loglake erase``): how many were recorded, applied and purged,
    how many records they erased, and when the next purge is due (none: empty)."""
    from datetime import timedelta

    found = erasures(config, ds.name)
    if not found:
        return {}
    wait = timedelta(seconds=config.profile.erasure.purge_after_seconds)
    pending = [e for e in found if e.applied_at is not None and e.purged_at is None]
    return {"recorded": len(found), "applied": sum(e.applied_at is not None for e in found),
            "purged": sum(e.purged_at is not None for e in found), "pending_purge": len(pending),
            "not_applied": sum(e.applied_at is None for e in found),
            "records": sum(e.offsets for e in found), "last": found[-1].requested_at,
            "next_purge": min((e.applied_at + wait for e in pending), default=None)}


def table_status(config: Config, ds: Dataset) -> list[TableStatus]:
    """Delta version and file count of each of the dataset's tables (delta-rs, no JVM)."""

    out = []
    for t in dataset_tables(config, ds):
        try:
            snap = snapshot(t.path, t.store)
        except FileNotFoundError:  # not created yet
            snap = None
        out.append(TableStatus(t.layer, t.name, t.path, snap and snap.version, snap and snap.files))
    return out


def format_duration(seconds: float | None) -> str:
    """``3d 4h``, ``5h 12m``, ``7m 3s``, ``4.2s``; ``-`` for None; negative: ``overdue 5m``."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "overdue " + format_duration(-seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit} {(s % size) // subsize}{sub}"
    return f"{s}s"


def retention_text(retention_ms: int | None, cleanup_policy: str | None) -> str:
    if retention_ms is not None:
        return f"retention {format_duration(retention_ms / 1000)}"
    if cleanup_policy and "delete" not in cleanup_policy.split(","):
        return f"cleanup.policy {cleanup_policy}: nothing is deleted by age"
    return "retention.ms -1: nothing is deleted by age"


def quality_text(q: QualityRecord | None) -> str:
    if q is None:
        return "no validation yet"
    verdict = "published" if q.published else "FAILED"
    text = f"{verdict} ({q.expectations} expectations) at {_iso(q.validated_at)}, run {q.run_id}"
    if q.failed:
        text += "; failed: " + ", ".join(q.failed)
    if q.warned:
        text += "; warned: " + ", ".join(q.warned)
    return text


def audit_text(a: AuditRecord | None) -> str:
    if a is None:
        return "no audit yet"
    verdict = "ok" if a.ok else "FAILED"
    return (f"{verdict}: {a.offsets_checked} offsets checked, {a.missing} missing, {a.duplicated} duplicated, "
            f"{a.unexpected} unexpected at {_iso(a.audited_at)}, run {a.run_id}")


def table_text(t: TableStatus) -> str:
    return f"{t.name} no table yet" if t.version is None else f"{t.name} v{t.version} ({t.files} files)"


def format_status(ds: Dataset, st: DatasetStatus) -> list[str]:
    """Lines for ``loglake status``: a header, one line per partition, then the dataset's
    retention, last quality and audit results and tables."""
    lines = [f"{ds.name} ({ds.topic}):"]
    for s in st.partitions:
        pos = "-" if s.speed_position is None else s.speed_position
        wm = "-" if s.watermark is None else s.watermark
        lag = "-" if s.speed_lag is None else s.speed_lag
        if s.lag_seconds is not None:
            lag = f"{lag}, {format_duration(s.lag_seconds)}"
        lines.append(f"  [{s.partition}] end {s.end}  speed position {pos} (lag {lag})  batch watermark {wm} "
                     f"(behind {s.batch_lag})  retention deletes the oldest unprocessed offset in "
                     f"{format_duration(s.retention_seconds)}")
    lines.append(f"  {retention_text(st.retention_ms, st.cleanup_policy)}")
    lines.append(f"  quality: {quality_text(st.quality)}")
    lines.append(f"  audit: {audit_text(st.audit)}")
    lines.append("  tables: " + ", ".join(table_text(t) for t in st.tables))
    lines.append(f"  writer: {writer_text(st.writer)}")
    if st.schema:
        lines.append(f"  format: {format_text(st.schema)}")
        lines.append(f"  schema: {schema_text(st.schema)}")
    lines += [f"  accepted loss: {lost_text(r)}" for r in st.lost]
    if st.erasures:
        lines.append(f"  erasures: {erasure_text(st.erasures)}")
    return lines


def erasure_text(e: dict) -> str:
    """``erasure_summary`` in one line (no key: none is kept)."""
    out = (f"{e['recorded']} recorded ({e['records']:,} records), {e['applied']} applied, {e['purged']} purged, "
           f"{e['pending_purge']} pending purge")
    if e.get("not_applied"):
        out += f", {e['not_applied']} not applied yet (an erase that stopped: run it again)"
    if e.get("next_purge") is not None:
        out += f"; next purge due {_iso(e['next_purge'])}"
    return out + f"; last request {_iso(e['last'])}"


def counted_text(totals: dict) -> str:
    """The metrics' counters (``loglake.observe.series.totals``) in one line."""
    parts = []
    for layer in ("speed", "batch"):
        reasons = totals["quarantined"][layer]
        detail = f" ({', '.join(f'{r} {n:,}' for r, n in sorted(reasons.items()))})" if reasons else ""
        parts.append(f"{layer} {totals['records'][layer]:,} records + {sum(reasons.values()):,} quarantined{detail}")
    parts.append(f"{totals['micro_batches']:,} micro-batches")
    jobs = ", ".join(f"{job} {j['runs']}" + (f" ({j['failed']} failed)" if j["failed"] else "")
                     for job, j in sorted(totals["jobs"].items()))
    parts.append(f"job runs: {jobs or 'none'}")
    if totals.get("last_publish"):
        published = datetime.fromtimestamp(totals["last_publish"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        parts.append(f"last publish {published}")
    return "; ".join(parts)


def schema_text(schema: dict) -> str:
    return text(schema)


def lost_text(r: dict) -> str:
    return (f"[{r['partition']}] offsets [{r['start']}, {r['end']}) ({r['end'] - r['start']:,} offsets) accepted by "
            f"{r['recorded_by']} at {_iso(r['committed_at'])}: {r['reason']}")


def writer_text(holder: dict | None) -> str:
    return "none (free)" if holder is None else f"{describe_holder(holder)}, lease until {holder.get('expires_at')}"


def _iso(value) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
