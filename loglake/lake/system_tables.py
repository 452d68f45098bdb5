"""Appends to loglake's own tables from Spark, by their contracts (``loglake.core.contracts``).

The offsets ledger (batch job, quality gate), ``_quality_results`` (quality gate) and
``_maintenance_log`` (maintenance) are written here; ``_audit_results`` is written
without a JVM by ``loglake.ops.audit`` from the same contract.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loglake.core.config import Config
from loglake.core.contracts import LEDGER, SystemTable
from loglake.core.errors import ForeignCommitError
from loglake.ledger.history import unserved_foreign_commits
from loglake.ledger.ranges import ledger_rows
from loglake.tables import open_table
from loglake.lake.delta_io import retry_conflicts, table_exists


def append(spark: SparkSession, config: Config, table: SystemTable, rows: list[dict], *,
           stamp: str | None = None, txn: tuple[str, int] | None = None) -> None:
    """Append ``rows`` (dicts keyed by the contract's columns) to ``table``.

    ``stamp`` names a timestamp column set to now for every row (``committed_at``, ...).
    Concurrent appends (mapped tasks of several datasets; the first two may both create
    the table) are retried. ``mergeSchema``: a table made by an older loglake gains the
    columns its contract has since added. ``txn``: (application id, version) — the append
    is skipped when that version (or a newer one) of the application already landed.
    """
    if not rows:
        return
    now = datetime.now(timezone.utc)
    doubles = {c.name for c in table.contract.columns if c.type == "double"}

    def value(row: dict, column: str):
        v = now if column == stamp else row.get(column)
        return float(v) if column in doubles and isinstance(v, int) else v  # Spark refuses an int there

    data = [tuple(value(r, c) for c in table.contract.names) for r in rows]
    df = spark.createDataFrame(data, table.contract.ddl)
    path = config.system_table_path(table)
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
    retry_conflicts(lambda: writer.save(path), f"append to {table.name}")


# States a run records once per range: a retry of its task repeats what the first try recorded.
ONCE_PER_RUN = ("written", "published")


def append_ledger(spark: SparkSession, config: Config, rows: list[dict]) -> None:
    """Append ranges to the offsets ledger: ``state`` written (batch job) or published (quality gate).

    A written or published range the same run already recorded is not appended again. A
    task can be run again after its job committed — killed before it reported success, as
    when Airflow resets the task instances of a scheduler that died — and the next try of
    the same run replaces the same offsets with the same rows; the ledger says once that
    the run wrote (and published) them. Another run of the range is another record.
    """
    append(spark, config, LEDGER, _not_recorded(spark, config, rows), stamp="committed_at")


def _not_recorded(spark: SparkSession, config: Config, rows: list[dict]) -> list[dict]:
    def key(r) -> tuple:
        return tuple(r.get(c) for c in ("dataset", "topic", "partition", "start", "end", "run_id", "state"))

    runs = sorted({r["run_id"] for r in rows if r.get("run_id") and r.get("state") in ONCE_PER_RUN})
    path = config.system_table_path(LEDGER)
    if not runs or not table_exists(spark, path):
        return rows
    recorded = {key(r.asDict()) for r in spark.read.format("delta").load(path)
                .where(F.col("run_id").isin(runs) & F.col("state").isin(*ONCE_PER_RUN))
                .select("dataset", "topic", "partition", "start", "end", "run_id", "state").collect()}
    return [r for r in rows if r.get("state") not in ONCE_PER_RUN or key(r) not in recorded]


def serving_versions(config: Config, ds) -> dict:
    """The batch and quarantine tables' current versions: what readers serve from now on
    (recorded by a publish or a compaction, both under the dataset's single writer).

    Served data is validated data: readers are never moved onto a commit loglake did not
    make (a notebook's or another tool's write, ``loglake.ledger.history.foreign_commits``). When
    one lies between the versions served now and these, ``ForeignCommitError`` (permanent),
    naming it; readers stay where they are.
    """
    rows = ledger_rows(config, ds)
    out = {}
    for layer, column in (("batch", "batch_version"), ("quarantine", "quarantine_version")):
        path = config.table_path(ds, layer)
        table = open_table(path, store=config.object_store)
        out[column] = None if table is None else table.version()
        found = None if out[column] is None else unserved_foreign_commits(config, ds, layer, rows, out[column])
        if found and found[1]:
            raise ForeignCommitError(ds.name, getattr(ds.tables, layer), path, found[0], found[1])
    return out
