"""Delta writes that are idempotent per (application id, version).

Delta records a SetTransaction (appId, version) in the commit; a write whose version is
not newer than the table's recorded one for that appId is skipped. Tying the version to
the micro-batch id makes a replayed batch (after a crash) a no-op. Delta answers that check
by reconstructing the table's state (a Spark job) at every such commit, a large part of a
small append's cost (bench/results), so a stream asks for it only where a replay can happen
(its query's first micro-batch, and every commit on an object store); its other commits name
(appId, version) in their ``userMetadata`` (``loglake.ledger.snapshots.stream_commits`` reads
them back).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Mapping, Sequence, TypeVar

# The translation of Delta's JVM conflict exceptions into these Python types is installed by
# importing ``delta.exceptions.captured`` (delta-spark 4.0 no longer does it when
# ``delta.exceptions`` is imported); without it a conflict arrives as a plain Py4JJavaError,
# which ``retry_conflicts`` would not retry and ``loglake.core.errors`` would not call transient.
import delta.exceptions.captured  # noqa: F401  (installs the translation)
from delta.exceptions import (
    ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException,
    ConcurrentTransactionException, ConcurrentWriteException, DeltaConcurrentModificationException,
    MetadataChangedException, ProtocolChangedException
)
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F

from loglake.core.objectstore import delta_location
from loglake.core.retrying import attempts_made
from loglake.leases import check_lease
from loglake.ledger.snapshots import BATCH_KEY, STREAM_KEY, stream_batch
from loglake.tables import open_table

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"

# Optimistic-concurrency conflicts: another writer committed first. The losing commit
# wrote nothing, so running the same operation again is safe.
CONFLICTS = (ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException,
             ConcurrentTransactionException, ConcurrentWriteException, MetadataChangedException,
             ProtocolChangedException, DeltaConcurrentModificationException)
RETRY_ATTEMPTS = 6
T = TypeVar("T")


def retry_conflicts(fn: Callable[[], T], what: str, *, attempts: int = RETRY_ATTEMPTS, base_delay: float = 0.5,
                    max_delay: float = 8.0) -> tuple[T, int]:
    """Run ``fn`` again after a Delta commit conflict, with exponential backoff; bounded.

    Returns ``(fn's result, attempts made)``. After ``attempts`` conflicts the last one
    is raised (transient, ``loglake.core.errors.is_transient``: a task-level retry may still
    succeed later); any other error at once. ``what`` names the operation in the log lines.
    Each attempt of a dataset's writer first checks that its lease is still its own
    (``check_lease``: a writer that lost it commits nothing more).
    """
    def say(attempt: int, error: BaseException, delay: float) -> None:
        print(f"loglake: {what}: Delta conflict ({type(error).__name__}) on attempt {attempt}/{attempts}; "
              f"retrying in {delay:.1f}s", file=sys.stderr, flush=True)

    def attempt() -> T:
        check_lease(what)
        return fn()

    return attempts_made(attempt, attempts=attempts, base_delay=base_delay, max_delay=max_delay, only=CONFLICTS,
                         on_retry=say)


# The table property naming the columns Delta collects per-file statistics (min, max, nulls) of.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def table_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds a Delta table (Spark's view of it)."""
    return DeltaTable.isDeltaTable(spark, path)


def to_delta(df: DataFrame, mode: str, stats: Sequence[str] | None = None) -> DataFrameWriter:
    """``df.write`` to Delta in ``mode``. A table the write creates keeps statistics of those
    of the ``stats`` columns ``df`` has (``Dataset.stats_columns``), not of every column: they
    cost ~30 % of a write, and only the filtered-on columns use them. Delta takes a ``delta.*``
    option as a table property when the write creates the table and ignores it otherwise; each
    table names only columns it has, so an added column (``ALTER TABLE ... ADD COLUMNS``)
    never meets a property naming a column the table lacks."""
    writer = df.write.format("delta").mode(mode)
    keep = [c for c in stats or () if c in df.columns]
    return writer.option(STATS_COLUMNS, ",".join(keep)) if keep else writer


def committed_version(path: str, app_id: str, store=None) -> int | None:
    """The newest version that ``app_id`` committed to the table at ``path`` (None if none, or
    no table yet): its commits' metadata or its SetTransaction, read from the Delta log (all of
    it, if need be) without a Spark job. ``store``, here and below: the object store the table
    is on (the config's ``object_store``), which delta-rs reads it with."""
    return stream_batch(path, app_id, store=store)


def stream_metadata(app_id: str, version: int, metadata: dict | None = None) -> dict:
    """A stream commit's ``userMetadata``: ``metadata`` and which (app id, version) it is."""
    return {**(metadata or {}), STREAM_KEY: app_id, BATCH_KEY: version}


def _holds(spark: SparkSession, path: str, predicate: str) -> bool:
    """Whether the Delta table at ``path`` exists and holds a row matching ``predicate``."""
    return table_exists(spark, path) and bool(spark.read.format("delta").load(path).where(predicate).limit(1).count())


def replace_rows(spark: SparkSession, df: DataFrame, path: str, predicate: str,
                 pause: Callable[[], ContextManager] | None = None, stats: Sequence[str] | None = None) -> int:
    """Replace the rows of the table at ``path`` matching ``predicate`` with ``df``, in one
    commit; returns the attempts made.

    The speed stream appends to the quarantine table at any moment. The tables are not
    partitioned and Delta's isolation is Serializable, so a commit that read the table (a
    ``replaceWhere`` overwrite, a DELETE) fails with ``ConcurrentAppendException`` whenever
    an append landed while it ran, whatever rows either touched. Hence: when the table holds
    no matching row (a range recomputed for the first time, the common case) a plain append
    does the same, and a blind append never conflicts with another; otherwise the overwrite
    runs inside ``pause`` (``loglake.leases.appends_paused``: the stream holds its appends),
    retried on conflicts. Only the single writer of the dataset (``loglake.leases``) writes
    rows matching ``predicate``, so none can appear between the check and the append.
    ``stats``: ``to_delta``'s (the table's statistics columns if this creates it).
    """
    if not _holds(spark, path, predicate):
        with named(spark, "append rows"):
            check_lease(f"append rows to {path}")
            to_delta(df, "append", stats).option("mergeSchema", "true").save(path)
        return 1
    with (pause or nullcontext)(), named(spark, "replace rows"):
        _result, attempts = retry_conflicts(
            lambda: to_delta(df, "overwrite", stats).option("replaceWhere", predicate)
            .option("mergeSchema", "true").save(path),
            f"replace the rows of {path} where {predicate[:120]}")
    return attempts


def delete_rows(spark: SparkSession, path: str, predicate: str,
                pause: Callable[[], ContextManager] | None = None) -> int:
    """DELETE the rows matching ``predicate`` (none: no commit at all) inside ``pause``,
    retried on conflicts (see ``replace_rows``); returns the attempts made."""
    if not _holds(spark, path, predicate):
        return 0
    with (pause or nullcontext)(), named(spark, "delete rows"):
        _result, attempts = retry_conflicts(lambda: DeltaTable.forPath(spark, path).delete(predicate),
                                            f"delete the rows of {path} where {predicate[:120]}")
    return attempts


def add_missing_columns(spark: SparkSession, path: str, columns: dict[str, str], what: str = "",
                        store=None) -> list[str]:
    """Add the ``columns`` (name → Spark SQL type) the Delta table at ``path`` lacks, as
    nullable columns (``ALTER TABLE ... ADD COLUMNS``): rows written before read them as
    null. A column it has already is left as it is (a type that differs is refused earlier,
    at config load: ``loglake.schema_versions``). Returns the columns added; no table: none."""
    table = open_table(path, store=store)
    if table is None:
        return []
    have = {f.name.lower() for f in table.schema().fields}
    missing = {n: t for n, t in columns.items() if n.lower() not in have}
    if not missing:
        return []
    ddl = ", ".join(f"`{n}` {t}" for n, t in missing.items())
    with named(spark, f"add columns {', '.join(missing)}"):
        retry_conflicts(lambda: spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({ddl})"),
                        f"add columns {', '.join(missing)} to {path}{f' ({what})' if what else ''}")
    return list(missing)


def columns_of(df: DataFrame, names: list[str] | None = None) -> dict[str, str]:
    """``{name: Spark SQL type}`` of ``df``'s columns (``names`` only, when given)."""
    return {f.name: f.dataType.simpleString() for f in df.schema.fields if names is None or f.name in names}


# The table properties of a table delta-rs appends to (``append_arrow``; the speed layer sets them
# on its quarantine table as it starts): a checkpoint every 10th version, as Spark writes one by
# default. Unset, delta-rs' own default is every 100th, and each Spark reader of a table appended
# to every micro-batch replayed up to 100 JSON commits.
APPENDED_BY_DELTA_RS = {"delta.checkpointInterval": "10"}


def create_if_missing(df: DataFrame, path: str, stats: Sequence[str] | None = None,
                      properties: Mapping[str, str] | None = None, store=None) -> None:
    """Create the Delta table at ``path`` with ``df``'s schema and no rows, unless it exists
    (``stats``: ``to_delta``'s); with ``properties`` as its table properties, set now on a table
    that exists without them."""
    writer = to_delta(df.limit(0), "ignore", stats).options(**(properties or {}))
    with named(df.sparkSession, "create the table"):
        check_lease(f"create {path}")
        writer.save(path)
    if properties:
        ensure_properties(df.sparkSession, path, properties, store)


def ensure_properties(spark: SparkSession, path: str, props: Mapping[str, str], store=None) -> dict[str, str]:
    """Set the table properties of ``props`` that the Delta table at ``path`` lacks or holds with
    another value (one ``ALTER TABLE ... SET TBLPROPERTIES`` commit); those set."""
    table = open_table(path, store=store)
    if table is None:
        return {}
    have = table.metadata().configuration
    changed = {k: str(v) for k, v in props.items() if have.get(k) != str(v)}
    if changed:
        text = ", ".join(f"'{k}' = '{v}'" for k, v in changed.items())
        with named(spark, f"set {', '.join(changed)}"):
            retry_conflicts(lambda: spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({text})"),
                            f"set {text} on {path}")
    return changed


def append_idempotent(df: DataFrame, path: str, app_id: str, version: int, metadata: dict | None = None,
                      stats: Sequence[str] | None = None, *, checked: bool = True) -> None:
    """Append ``df`` to the Delta table at ``path`` unless (app_id, version) already landed.

    ``checked``: Delta checks that against the table's SetTransaction and records it (the
    state reconstruction above); not checked: the caller knows it did not land (a stream's
    micro-batch after its query's first: Spark runs each once, in order, and one query runs
    per checkpoint, ``loglake.leases.stream_lease``). Either way the commit's ``userMetadata``
    (JSON) names (app_id, version) beside ``metadata`` (e.g. the schema version).
    ``mergeSchema``: a column the dataset's schema added since (``loglake.schema_versions``: only
    additive changes get this far) is added to the table; older rows read it as null.
    ``stats``: ``to_delta``'s (the table's statistics columns if this creates it).
    """
    writer = (to_delta(df, "append", stats).option("mergeSchema", "true")
              .option("userMetadata", json.dumps(stream_metadata(app_id, version, metadata), sort_keys=True)))
    if not checked:
        writer.save(path)
        return
    # Checked, the commit is a compare-and-swap on the app id's version: one that raced another
    # commit of the same app id fails its conflict check (ConcurrentTransactionException); made
    # again, it reads that commit's version and is skipped if (app_id, version) landed.
    writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    retry_conflicts(lambda: writer.save(path), f"append batch {version} of {app_id} to {path}")


# The tables delta-rs refused to append to in this process (said once): Spark appends to them.
_NOT_BY_DELTA_RS: set[str] = set()


def append_arrow(rows, path: str, app_id: str, version: int, metadata: dict | None = None, *,
                 checked: bool = True, store=None) -> bool:
    """``append_idempotent`` for a few rows the driver holds (a pyarrow Table of the table's
    columns): the same commit — its ``userMetadata``, its SetTransaction (app_id, version) —
    made by delta-rs, with no Spark job (for a few rows, a fraction of a Spark commit's cost:
    bench/results). False when delta-rs writes nothing: there is no table at ``path`` yet, or
    the table is one delta-rs does not write (a writer feature it lacks, another tool's) or the
    rows do not fit its schema as they are (said on stderr): the caller appends with Spark,
    which creates the table, or takes the rows by its own rules. The rows never change the
    table's schema (``schema_mode`` unset): a column a table lacks is Spark's to refuse.

    ``checked``: skipped when (app_id, version) already landed, as Spark's check does: the
    version is read from the snapshot the commit is made on (delta-rs writes on the table
    object it is given, without reading the log again), and delta-rs counts the app ids of a
    commit's own SetTransaction as read, so a commit of the same app id landing after that
    snapshot fails this one ("Concurrent transaction failed"); read again, it is skipped. (Read
    from one snapshot and committed on a newer one, a batch another stream committed in between
    would land twice.)"""
    if path in _NOT_BY_DELTA_RS:
        return False
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # deferred: the speed layer only
    from deltalake.exceptions import CommitFailedError, DeltaProtocolError, SchemaMismatchError, TableNotFoundError

    uri, options = delta_location(path, store)
    props = CommitProperties(custom_metadata={"userMetadata": json.dumps(stream_metadata(app_id, version, metadata),
                                                                         sort_keys=True)},
                             app_transactions=[Transaction(app_id=app_id, version=version)])

    def commit() -> None:
        table = DeltaTable(uri, storage_options=options)
        if checked:
            landed = table.transaction_version(app_id)
            if landed is not None and landed >= version:
                return
        write_deltalake(table, rows, mode="append", commit_properties=props)

    try:
        attempts_made(commit, attempts=RETRY_ATTEMPTS, base_delay=0.1, max_delay=2.0, only=(CommitFailedError,),
                      on_retry=lambda attempt, e, delay: print(
                          f"loglake: append batch {version} of {app_id} to {path}: {e} (attempt {attempt}/"
                          f"{RETRY_ATTEMPTS}); retrying in {delay:.1f}s", file=sys.stderr, flush=True))
    except TableNotFoundError:
        return False
    except (DeltaProtocolError, SchemaMismatchError) as e:
        _NOT_BY_DELTA_RS.add(path)
        print(f"loglake: {path}: delta-rs does not append to it ({e}); Spark does, from batch {version} of "
              f"{app_id} on", file=sys.stderr, flush=True)
        return False
    return True


_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@contextmanager
def commit_metadata(spark: SparkSession, meta: dict):
    """Every Delta commit inside the block records ``meta`` (JSON) as its ``userMetadata``:
    which loglake job made it and for what (``loglake history`` reads it back). A write
    that passes its own ``userMetadata`` option (a speed micro-batch) keeps that."""
    before = spark.conf.get(_USER_METADATA, None)
    spark.conf.set(_USER_METADATA, json.dumps(meta, sort_keys=True, default=str))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_USER_METADATA)
        else:
            spark.conf.set(_USER_METADATA, before)


def _session_metadata(spark: SparkSession) -> dict:
    """What ``commit_metadata`` records at the moment (an enclosing job's), as a dict."""
    try:
        meta = json.loads(spark.conf.get(_USER_METADATA, None) or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


@contextmanager
def named(spark: SparkSession, step: str):
    """Commits inside the block name loglake as their maker (``{"loglake_step": step}``) unless
    an enclosing ``commit_metadata`` named the job already: a publish serves no commit that
    does not (``loglake.lake.system_tables.serving_versions``)."""
    if _session_metadata(spark):
        yield
    else:
        with commit_metadata(spark, {"loglake_step": step}):
            yield


def ranges_text(ranges) -> str:
    """``0:0-100 3:50-70``: offset ranges as commit metadata names them."""
    return " ".join(f"{r.partition}:{r.start}-{r.end}" for r in ranges)


@contextmanager
def idempotent_dml(spark: SparkSession, app_id: str, version: int):
    """Make the DML (MERGE, DELETE, UPDATE) inside the block idempotent for (app_id, version)."""
    spark.conf.set(_TXN_APP, app_id)
    spark.conf.set(_TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP)
        spark.conf.unset(_TXN_VERSION)


def latest_per_key(changes: DataFrame, key: str | Sequence[str]) -> DataFrame:
    """The newest change per key (``key``: its field, or its fields).

    Offsets order changes only within a partition: a key's newest change in each partition
    is its highest offset there. A key's changes live in one partition (the producer hashes
    the key; a changed partition count is refused, ``loglake.kafka.admin.check_partitions``);
    should a custom partitioner still spread one key over several, the newest of those is
    the one with the newest Kafka timestamp (then the higher partition), never a
    comparison of offsets of different partitions.
    """
    keys = [key] if isinstance(key, str) else list(key)
    in_partition = F.max_by(F.struct(*changes.columns), F.col("_offset"))
    per_partition = changes.groupBy(*keys, "_partition").agg(in_partition.alias("_row")).select("_row.*")
    across = F.max_by(F.struct(*changes.columns), F.struct("_kafka_timestamp", "_partition"))
    return per_partition.groupBy(*keys).agg(across.alias("_row")).select("_row.*")


def key_match(key: str | Sequence[str], left: str = "t", right: str = "s") -> str:
    """The SQL condition that rows ``left`` and ``right`` have the same key (its field or fields)."""
    keys = [key] if isinstance(key, str) else list(key)
    return " AND ".join(f"{left}.`{k}` = {right}.`{k}`" for k in keys)


_known_columns: dict[str, tuple[str, ...]] = {}  # latest-state tables whose columns were checked, by path

# Whether change ``s`` is newer than state row ``t`` of the same key (the rule of ``latest_per_key``).
NEWER = ("(s._partition = t._partition AND s._offset > t._offset) OR (s._partition <> t._partition AND "
         "(s._kafka_timestamp > t._kafka_timestamp OR (s._kafka_timestamp = t._kafka_timestamp AND "
         "s._partition > t._partition)))")


def merge_latest(spark: SparkSession, changes: DataFrame, path: str, key: str | Sequence[str], app_id: str,
                 version: int,
                 stats: Sequence[str] | None = None, *, checked: bool = True, store=None) -> int:
    """Fold a batch of changes into the latest-state table at ``path``; returns the attempts made.

    Newest offset per key wins within the batch and across batches (an older change
    never overwrites a newer one); a tombstone (``_deleted``) deletes the key. A commit
    conflict (maintenance compacting the table meanwhile) is retried: the MERGE is
    idempotent per (app_id, version), so a retry cannot apply the batch twice (``checked``, as
    ``append_idempotent``'s; applying a batch again changes nothing either way: its changes are
    not newer than themselves). ``stats``: ``to_delta``'s, when this creates the table.
    """
    state_cols = [c for c in changes.columns if c != "_deleted"]
    if not table_exists(spark, path):
        create_if_missing(changes.select(*state_cols), path, stats)
    elif _known_columns.get(path) != tuple(state_cols):
        # A field the schema added since (an additive change): the state table gains it first.
        add_missing_columns(spark, path, columns_of(changes, state_cols), "latest state", store)
        _known_columns[path] = tuple(state_cols)
    newest = latest_per_key(changes, key)
    newer = NEWER

    def merge() -> None:
        with (idempotent_dml(spark, app_id, version) if checked else nullcontext()), \
                commit_metadata(spark, stream_metadata(app_id, version, _session_metadata(spark))):
            (DeltaTable.forPath(spark, path).alias("t")
             .merge(newest.alias("s"), key_match(key))
             .whenMatchedDelete(condition=f"s._deleted AND ({newer})")
             .whenMatchedUpdate(condition=f"NOT s._deleted AND ({newer})",
                                set={c: f"s.`{c}`" for c in state_cols})
             .whenNotMatchedInsert(condition="NOT s._deleted", values={c: f"s.`{c}`" for c in state_cols})
             .execute())

    _result, attempts = retry_conflicts(merge, f"MERGE into {path} (batch {version})")
    return attempts
