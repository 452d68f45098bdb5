"""Appends to loglake's own tables, by their contracts (``loglake.core.contracts``).

The offsets ledger (batch job, quality gate), ``_schemas``, ``_quality_results`` (quality
gate) and ``_maintenance_log`` (maintenance) are written here by the Spark jobs, each append
a few rows the driver holds: delta-rs commits them (no Spark job: a Spark append of a few
rows took a batch job's ledger phase 0.5 s warm and 2.9 s in a fresh application's first run,
bench/results/levers-2026-11-30), Spark only for a table delta-rs does not write. ``_audit_results`` and the ledger's *lost* rows are written by
delta-rs too (``loglake.ops.audit``, ``loglake.ledger.losses``).
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from loglake.core.config import Config
from loglake.core.contracts import LEDGER, SystemTable
from loglake.core.errors import ForeignCommitError
from loglake.core.objectstore import delta_location
from loglake.core.retrying import attempts_made
from loglake.leases import check_lease
from loglake.ledger.history import unserved_foreign_commits
from loglake.ledger.ranges import ledger_rows
from loglake.tables import open_table, query
from loglake.lake.delta_io import APPENDED_BY_DELTA_RS, RETRY_ATTEMPTS, retry_conflicts


def append(spark: SparkSession, config: Config, table: SystemTable, rows: list[dict], *,
           stamp: str | None = None, txn: tuple[str, int] | None = None) -> None:
    """Append ``rows`` (dicts keyed by the contract's columns) to ``table``.

    ``stamp`` names a timestamp column set to now for every row (``committed_at``, ...).
    Concurrent appends (mapped tasks of several datasets; the first two may both create
    the table) are retried. A table made by an older loglake gains the columns its contract
    has since added. ``txn``: (application id, version) — the append is skipped when that
    version (or a newer one) of the application already landed, and recorded in the commit.
    """
    if not rows:
        return
    now = datetime.now(timezone.utc)
    data = [{c: now if c == stamp else r.get(c) for c in table.contract.names} for r in rows]
    path = config.system_table_path(table)
    if path not in _NOT_BY_DELTA_RS and _append_by_delta_rs(config, table, path, data, txn):
        return
    doubles = {c.name for c in table.contract.columns if c.type == "double"}

    def value(row: dict, column: str):
        v = row[column]
        return float(v) if column in doubles and isinstance(v, int) else v  # Spark refuses an int there

    df = spark.createDataFrame([tuple(value(r, c) for c in table.contract.names) for r in data], table.contract.ddl)
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
    retry_conflicts(lambda: writer.save(path), f"append to {table.name}")


# The system tables delta-rs refused to append to in this process (said once): Spark appends.
_NOT_BY_DELTA_RS: set[str] = set()


def _append_by_delta_rs(config: Config, table: SystemTable, path: str, data: list[dict],
                        txn: tuple[str, int] | None) -> bool:
    """The append committed by delta-rs (creating the table when there is none); False when
    delta-rs does not write that table (a writer feature it lacks), said once on stderr.
    With ``txn``, its version is read from the snapshot the commit is made on, and the commit
    records it (a concurrent commit of the same app id fails this one, which reads again)."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # deferred: off the CLI's start
    from deltalake.exceptions import CommitFailedError, DeltaProtocolError, TableNotFoundError

    uri, options = delta_location(path, config.object_store)
    arrow = pa.Table.from_pylist(data, schema=table.contract.arrow_schema())
    props = None if txn is None else CommitProperties(app_transactions=[Transaction(app_id=txn[0], version=txn[1])])

    def commit() -> None:
        check_lease(f"append to {table.name}")  # a dataset's writer that lost its lease commits nothing more
        try:
            target = DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            target = None
        if target is not None and txn is not None:
            landed = target.transaction_version(txn[0])
            if landed is not None and landed >= txn[1]:
                return
        if target is not None and any(target.metadata().configuration.get(k) != v
                                      for k, v in APPENDED_BY_DELTA_RS.items()):
            # A table Spark made: its checkpoints every 10th version as Spark wrote them
            # (delta-rs' default is every 100th: each reader replays up to 100 JSON commits).
            target.alter.set_table_properties(APPENDED_BY_DELTA_RS)
            target = DeltaTable(uri, storage_options=options)
        # merge: a table an older loglake made gains the columns the contract added since.
        write_deltalake(uri if target is None else target, arrow, mode="append", schema_mode="merge",
                        configuration=APPENDED_BY_DELTA_RS if target is None else None,
                        storage_options=options if target is None else None, commit_properties=props)

    try:
        attempts_made(commit, attempts=RETRY_ATTEMPTS, base_delay=0.1, max_delay=2.0, only=(CommitFailedError,))
    except DeltaProtocolError as e:
        _NOT_BY_DELTA_RS.add(path)
        print(f"loglake: {path}: delta-rs does not append to it ({e}); Spark does", file=sys.stderr, flush=True)
        return False
    return True


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
    ledger = open_table(config.system_table_path(LEDGER), store=config.object_store) if runs else None
    if ledger is None:
        return rows
    quoted = ", ".join("'" + r.replace("'", "''") + "'" for r in runs)
    recorded = {key(r) for r in query(ledger, 'SELECT dataset, topic, "partition", start, "end", run_id, state '
                                              f"FROM t WHERE run_id IN ({quoted}) AND state IN "
                                              f"({', '.join(repr(s) for s in ONCE_PER_RUN)})")}
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
