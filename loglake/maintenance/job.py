"""Delta maintenance of one dataset's tables while the speed layer keeps writing.

Run under spark-submit (``loglake maintain`` and the ``loglake_maintenance`` DAG build the
command) or in-process (``run_maintenance``). For each of the dataset's tables that exist
(speed, batch, quarantine, a changelog's latest state), in this order:

1. **expire** (speed and quarantine, if ``maintenance.expire_speed``): delete the speed
   rows below the batch watermark W_p, and the speed layer's quarantine rows there
   (the batch layer's own quarantine rows cover those offsets now). The serving view
   never reads speed rows below W_p, so it returns the same rows before and after. The
   stream holds its appends while the DELETE runs (``loglake.leases.appends_paused``):
   any append landing meanwhile would fail it.
2. **optimize**: bin-packing compaction, or Z-order by ``maintenance.zorder_by`` on the
   tables that have those columns.
3. **vacuum** with ``maintenance.vacuum_retention_hours`` (at least 168 unless the config
   lowers it explicitly, which is logged loudly).

Each operation retries Delta commit conflicts with backoff (the stream appends and
MERGEs meanwhile) and is recorded in ``_maintenance_log`` (see ``loglake.ledger.results``).
"""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from loglake.core.config import MIN_VACUUM_RETENTION_HOURS, Config, Dataset, Maintenance
from loglake.core.contracts import MAINTENANCE_LOG
from loglake.core.predicates import below_watermark
from loglake.jobs.requests import MaintenanceRequest
from loglake.jobs.summaries import MaintenanceSummary
from loglake.leases import appends_paused
from loglake.ledger.ranges import batch_watermarks
from loglake.tables import Snapshot, TableRef, dataset_tables, snapshot
from loglake.maintenance.runs import EXPIRED_LAYERS
from loglake.lake import delta_io
from loglake.jobs import entry
from loglake.lake.system_tables import append, append_ledger, serving_versions

_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]):
    """Set Spark settings for the block only; restore what was there before."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def storage_files(spark: SparkSession, path: str) -> tuple[int, int]:
    """Data files under the table's directory, referenced or not (what VACUUM can delete):
    (count, bytes). The Delta log and hidden files are left out.

    Directories are walked with ``listStatus``, never into ``_delta_log``: a recursive
    ``listFiles`` there meets the commit temp files a concurrent writer (the stream)
    creates and renames, and fails on one that vanished between listing and stat.
    """
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    files = size = 0
    pending = [root]
    while pending:
        for status in fs.listStatus(pending.pop()):
            name = status.getPath().getName()
            if name == "_delta_log" or name.startswith("."):
                continue
            if status.isDirectory():
                pending.append(status.getPath())
            else:
                files += 1
                size += status.getLen()
    return files, size


def _operate(spark: SparkSession, t: TableRef, operation: str, fn: Callable[[], int | None],
             storage: bool = False) -> dict:
    """Run one operation (conflicts retried) and measure the table before and after.

    Files and bytes are the snapshot's data files, or for VACUUM (``storage``) every data
    file in the directory, since VACUUM deletes files no snapshot references any more.
    """
    def measure() -> tuple[Snapshot, tuple[int, int]]:
        snap = snapshot(t.path, t.store)
        return snap, storage_files(spark, t.path) if storage else (snap.files, snap.bytes)

    started_at = datetime.now(timezone.utc)
    t0 = time.monotonic()
    snap0, (files0, bytes0) = measure()
    result, attempts = delta_io.retry_conflicts(fn, f"{operation} {t.name}")
    snap1, (files1, bytes1) = measure()
    return {"table": t.name, "path": t.path, "operation": operation,
            "files_before": files0, "bytes_before": bytes0, "files_after": files1, "bytes_after": bytes1,
            "version_before": snap0.version, "version_after": snap1.version,
            "rows_deleted": result if operation == "expire" else None, "attempts": attempts,
            "seconds": round(time.monotonic() - t0, 3), "started_at": started_at}


def expire_predicate(layer: str, marks: dict[int, int]) -> str:
    """Rows of ``layer`` that the batch layer covers: exactly what the serving view leaves out."""
    below = below_watermark(marks)
    return f"_layer = 'speed' AND ({below})" if layer == "quarantine" else below


def expire(spark: SparkSession, t: TableRef, marks: dict[int, int]) -> dict:
    """DELETE the speed rows (or speed quarantine rows) below each partition's watermark."""
    sql = f"DELETE FROM delta.`{t.path}` WHERE {expire_predicate(t.layer, marks)}"
    # DELETE returns num_affected_rows; a DELETE that matches nothing commits nothing.
    return _operate(spark, t, "expire", lambda: int(spark.sql(sql).first()[0]))


def optimize(spark: SparkSession, t: TableRef, zorder_by: list[str]) -> dict:
    """Bin-packing compaction, or Z-order when the table has every ``zorder_by`` column."""
    columns = set(spark.read.format("delta").load(t.path).columns)
    zorder = list(zorder_by) if zorder_by and set(zorder_by) <= columns else []

    def run() -> None:
        builder = DeltaTable.forPath(spark, t.path).optimize()
        (builder.executeZOrderBy(zorder) if zorder else builder.executeCompaction()).collect()

    return _operate(spark, t, "optimize", run)


def vacuum(spark: SparkSession, config: Config, t: TableRef, policy: Maintenance) -> dict:
    """VACUUM with the dataset's retention; Delta's own guard is lifted only for a retention
    the config lowered explicitly (``allow_short_vacuum_retention``), and only for this call."""
    hours = policy.vacuum_retention_hours
    settings = {"spark.databricks.delta.vacuum.logging.enabled": "true"}  # VACUUM START/END in history
    if _LISTING_PARALLELISM not in config.profile.spark.conf:
        # VACUUM lists the directory with this many tasks (10,000 by default): minutes of
        # pure scheduling on a small machine for a table of a few hundred files.
        settings[_LISTING_PARALLELISM] = str(max(1, spark.sparkContext.defaultParallelism))
    if hours < MIN_VACUUM_RETENTION_HOURS:
        print(f"loglake: WARNING: VACUUM {t.name} with a SHORT retention of {hours:g} hours (below the "
              f"{MIN_VACUUM_RETENTION_HOURS:g}-hour guard; allow_short_vacuum_retention is set): time travel "
              f"and readers of versions older than that lose their files", file=sys.stderr, flush=True)
        settings[_RETENTION_CHECK] = "false"

    def run() -> None:
        with session_conf(spark, settings):
            DeltaTable.forPath(spark, t.path).vacuum(hours)

    return _operate(spark, t, "vacuum", run, storage=True)


def record(spark: SparkSession, config: Config, ds: Dataset, rows: list[dict], run_id: str) -> None:
    """Append the run's rows to ``_maintenance_log`` (``loglake.core.contracts.MAINTENANCE_LOG``)."""
    append(spark, config, MAINTENANCE_LOG, [{**r, "dataset": ds.name, "run_id": run_id} for r in rows])


def _maintain(spark: SparkSession, config: Config, ds: Dataset, t: TableRef, marks: dict[int, int],
              run_id: str) -> list[dict]:
    """Expire (speed-side tables), optimize and vacuum one table; a record per operation."""
    policy = ds.maintenance
    rows = []
    if policy.expire_speed and t.layer in EXPIRED_LAYERS:
        # A DELETE on a table the stream appends to: the stream holds its appends meanwhile
        # (loglake.leases: any append landing during the DELETE would fail it).
        with appends_paused(config, ds.name, f"maintenance {run_id}: expire {t.name}") if marks else nullcontext():
            rows.append(expire(spark, t, marks))
    rows.append(optimize(spark, t, policy.zorder_by))
    rows.append(vacuum(spark, config, t, policy))
    return rows


def run_maintenance(spark: SparkSession, config: Config, ds: Dataset, run_id: str | None = None) -> MaintenanceSummary:
    """Expire, optimize and vacuum the dataset's tables; record and return what was done."""
    started = time.monotonic()
    run_id = run_id or f"manual-{uuid.uuid4().hex[:12]}"
    policy = ds.maintenance
    tables = [t for t in dataset_tables(config, ds) if delta_io.table_exists(spark, t.path)]
    marks = batch_watermarks(config, ds) if policy.expire_speed else {}
    rows = []
    for t in tables:
        with delta_io.commit_metadata(spark, {"loglake_job": "maintenance", "loglake_run_id": run_id}):
            rows += _maintain(spark, config, ds, t, marks, run_id)
    record(spark, config, ds, rows, run_id)
    if any(r["version_after"] != r["version_before"] for r in rows if r["table"] in (ds.tables.batch, ds.tables.quarantine)):
        # Readers serve the batch side at the last recorded versions: move them to the compacted
        # ones, so VACUUM never removes the files of a version still served.
        append_ledger(spark, config, [{"dataset": ds.name, "topic": ds.topic, "partition": -1, "start": 0, "end": 0,
                                       "records": 0, "quarantined": 0, "run_id": run_id, "state": "compacted",
                                       **serving_versions(config, ds)}])
    return MaintenanceSummary(dataset=ds.name, run_id=run_id, tables=len(tables), watermarks=marks,
                              rows_expired=sum(r["rows_deleted"] or 0 for r in rows),
                              vacuum_retention_hours=policy.vacuum_retention_hours,
                              seconds=round(time.monotonic() - started, 3),
                              operations=[{**r, "started_at": r["started_at"].isoformat()} for r in rows])


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: MaintenanceRequest) -> MaintenanceSummary:
    """The job under spark-submit: maintain the request's dataset."""
    return run_maintenance(spark, config, ds, request.run_id)


def main(argv: list[str] | None = None) -> int:
    return entry.run("maintenance", argv, run_job)
