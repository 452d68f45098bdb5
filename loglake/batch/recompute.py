"""The batch layer's work: recompute exact offset ranges from Kafka into Delta, replayably.

``run_batch`` is what the batch job (``spark_jobs/batch.py``) runs, and what the rebuild
and replay jobs run through ``loglake.quality.pipeline``. For an events dataset it reads exactly the
planned ranges, applies the speed layer's parse/validate/transform, and *replaces* those
offsets in ``batch.<dataset>`` and in the batch part of ``quarantine.<dataset>`` — one
Delta transaction per table (``replaceWhere``, or a plain append for a range no row holds yet,
which the speed stream's appends to the quarantine table never conflict with:
``delta_io.replace_rows``) — so running a range twice, or again after
a crash half-way, leaves identical tables. A changelog dataset's latest state is rebuilt
from its whole retained log. Only then is each range recorded in the offsets ledger,
which is what advances the watermark.
"""

from __future__ import annotations

import time
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from loglake.core.config import Config, Dataset
from loglake.core.errors import OffsetError
from loglake.core.offsets import OffsetRange
from loglake.core.predicates import range_predicate
from loglake.jobs.protocol import Phases
from loglake.jobs.summaries import BatchSummary
from loglake.kafka.admin import dataset_bounds
from loglake.leases import appends_paused, check_lease
from loglake.core.plans import Plan
from loglake.ledger.ranges import batch_watermarks, fresh_from, ledger_rows, published_spans
from loglake.tables import staging_path
from loglake.lake import delta_io
from loglake.lake import evolution
from loglake.records import counting, validation
from loglake.records.kafka_source import check_retained, read_ranges
from loglake.lake.system_tables import append_ledger
from loglake.serving import history


def recompute_from_log(spark: SparkSession, config: Config, ds: Dataset) -> DataFrame:
    """What the serving view must equal: the whole retained log through the same code.

    Events: every valid record, transformed. Changelog: the latest state by key.
    """
    log = dataset_bounds(config, ds)
    ranges = [OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in sorted(log.items())]
    valid = validation.apply_transform(validation.valid_rows(validation.validate(read_ranges(spark, config, ranges), ds), ds), ds)
    if ds.kind == "changelog":
        return delta_io.latest_per_key(valid, ds.keys).where(~F.col("_deleted")).drop("_deleted")
    return valid


def history_of(spark: SparkSession, config: Config, ds: Dataset, changes: DataFrame, read: DataFrame) -> DataFrame:
    """The dataset's history (``loglake.serving.history``) from the log's valid ``changes`` (every
    retained offset read: ``read``) and the versions the history table holds whose changes the
    log no longer retains (expired or compacted away)."""
    events = changes.withColumn("_time", F.coalesce(F.col(history.time_column(ds)), F.col("_kafka_timestamp")))
    columns = [c for c in changes.columns if c != "_deleted"]
    path = config.table_path(ds, "history")
    if delta_io.table_exists(spark, path):
        held = spark.read.format("delta").load(path)
        name = f"_loglake_history_{uuid.uuid4().hex[:8]}"
        held.createOrReplaceTempView(name)
        kept = [c for c in held.columns if c not in history.COLUMNS]
        gone = (spark.sql(history.versions_sql(name, kept))
                .join(read.select("_partition", "_offset"), ["_partition", "_offset"], "left_anti"))
        events = events.unionByName(gone, allowMissingColumns=True)
        columns += [c for c in kept if c not in columns]
    name = f"_loglake_changes_{uuid.uuid4().hex[:8]}"
    events.createOrReplaceTempView(name)
    return spark.sql(history.history_sql(name, ds.keys, columns))


def must_stage(config: Config, ds: Dataset, ranges: list[OffsetRange]) -> bool:
    """Whether rows written for ``ranges`` would be served before their quality gate ran:
    a changelog's rebuilt state (it replaces the whole table), or an events range below its
    partition's watermark (a backfill). Ranges at or above the watermark are written in
    place: the serving view reads batch rows only below it, and only the gate moves it."""
    if ds.kind == "changelog":
        return True
    marks = batch_watermarks(config, ds)
    return any(r.partition in marks and r.start < marks[r.partition] for r in ranges)


def _replace(df: DataFrame, ds: Dataset, path: str, predicate: str, pause=None) -> None:
    delta_io.replace_rows(df.sparkSession, df, path, predicate, pause, ds.stats_columns)


def _write(spark: SparkSession, config: Config, ds: Dataset, ranges: list[OffsetRange], raw: DataFrame,
           validated: DataFrame, batch_path: str, quarantine_path: str, pause,
           phases: Phases, fresh: list[int | None], history_path: str | None = None) -> tuple[dict, dict[str, int]]:
    """The batch run's writes: valid rows, then its quarantine; the observed counts, and the
    quarantined records per reason code."""
    # The first write reads, validates and counts (per partition, for the ledger).
    exact = sum(r.size for r in ranges) <= counting.EXACT_BAD_LIMIT
    observed, observation = counting.counted(validated, ranges, partitions=sorted({r.partition for r in ranges}),
                                          exact=exact, fresh_from=fresh)
    valid = validation.apply_transform(validation.valid_rows(observed, ds), ds)
    if ds.kind == "changelog":
        state = delta_io.latest_per_key(valid, ds.keys).where(~F.col("_deleted")).drop("_deleted")
        with phases("read_validate_write"):
            check_lease(f"write {batch_path}")
            delta_io.to_delta(state, "overwrite", ds.stats_columns).option("mergeSchema", "true").save(batch_path)
        if ds.history == "scd2":
            with phases("history"):
                versions = history_of(spark, config, ds, valid, validated)
                check_lease(f"write {history_path}")
                (delta_io.to_delta(versions, "overwrite", ds.stats_columns).option("mergeSchema", "true")
                 .save(history_path))
        with phases("quarantine"):
            _replace(validation.quarantine_rows(validated, "batch"), ds, quarantine_path,
                     f"_layer = 'batch' AND _topic = '{ds.topic}'", pause)
        n = observation.get
        reasons = counting.reason_counts(n)
        if reasons is None:  # from the cache: the latest state's rows are few by nature
            reasons = {r[0]: r[1] for r in validated.where(F.col("_reason").isNotNull())
                       .groupBy(F.col("_reason.code")).count().collect()}
    else:
        # The quarantine is rewritten from the rows the first pass carried (a few), else by a
        # second pass over the bad offsets only, when there are some.
        predicate = range_predicate(ranges)
        with phases("read_validate_write"):
            _replace(valid, ds, batch_path, predicate)
            n = observation.get
        where = f"_layer = 'batch' AND ({predicate})"
        with phases("quarantine"):
            reasons = counting.reason_counts(n) or {}
            if n["quarantined"]:
                bad = counting.quarantined(raw, n, ds, "batch", config, ds.topic)
                bad, counted_reasons = counting.observe_reasons(bad, n["codes"])
                _replace(bad, ds, quarantine_path, where, pause)
                reasons = counting.reason_counts(n) or counted_reasons()
            elif delta_io.table_exists(spark, quarantine_path):
                delta_io.delete_rows(spark, quarantine_path, where, pause)  # a re-run found none: drop the old ones
            else:
                delta_io.create_if_missing(validation.quarantine_rows(validated, "batch"), quarantine_path, ds.stats_columns)
    return n, reasons


def run_batch(spark: SparkSession, config: Config, ds: Dataset, plan: Plan,
              run_id: str | None = None) -> BatchSummary:
    """Recompute ``plan``'s ranges; what it wrote (records, quarantined, seconds)."""
    started = time.monotonic()
    run_id = run_id or f"manual-{uuid.uuid4().hex[:12]}"
    ranges = [r for r in plan.ranges if r.size]
    if any(r.topic != ds.topic for r in ranges):
        raise OffsetError(f"plan ranges must be on {ds.topic}: {[str(r) for r in ranges]}", topic=ds.topic)
    if not ranges:
        return BatchSummary(dataset=ds.name, run_id=run_id)
    phases = Phases()
    with phases("prepare"):
        check_retained(config, ranges)
        schema_version = evolution.prepare(spark, config, ds, ("batch",))
        raw = read_ranges(spark, config, ranges)
        validated = validation.validate(raw, ds)
        staged = must_stage(config, ds, ranges)
        # Per range, where the offsets no published range covers begin: the publish counts the
        # valid records from there on as the batch layer's new ones (each offset once).
        spans = published_spans(ledger_rows(config, ds), exclude_run=run_id)
        fresh = [fresh_from(spans.get(r.partition, ()), r.start, r.end) for r in ranges]
    if staged:  # written aside: the quality gate swaps it in when it passes
        batch_path, quarantine_path = (staging_path(config, ds, run_id, layer) for layer in ("batch", "quarantine"))
    else:
        batch_path, quarantine_path = config.table_path(ds, "batch"), config.table_path(ds, "quarantine")
    # The live quarantine table is appended to by the speed stream: a commit that must read it
    # first pauses the stream's appends (loglake.leases.appends_paused); a staged one is ours alone.
    pause = None if staged else (lambda: appends_paused(config, ds.name, f"batch {run_id}: {ds.tables.quarantine}"))
    if ds.kind == "changelog":
        # The latest state is rebuilt from the whole log, small by nature: cache it once.
        validated = validated.persist()
    meta = {"loglake_job": "batch", "loglake_run_id": run_id, "loglake_ranges": delta_io.ranges_text(ranges),
            "loglake_schema_version": schema_version, "loglake_staged": staged}
    try:
        with delta_io.commit_metadata(spark, meta):
            n, reasons = _write(spark, config, ds, ranges, raw, validated, batch_path, quarantine_path, pause,
                                phases, fresh, staging_path(config, ds, run_id, "history") if staged else None)
    finally:
        if ds.kind == "changelog":
            validated.unpersist()
    with phases("ledger"):
        append_ledger(spark, config, [
            {"dataset": ds.name, "topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end,
             "records": n[f"records_{i}"], "quarantined": n[f"quarantined_{i}"],
             "run_id": run_id, "state": "written", "schema_version": schema_version, "fresh_from": fresh[i],
             "fresh_records": None if fresh[i] is None else n.get(f"fresh_{i}", 0)} for i, r in enumerate(ranges)])
    seconds = time.monotonic() - started
    records = sum(n[f"records_{i}"] for i in range(len(ranges)))
    quarantined = sum(n[f"quarantined_{i}"] for i in range(len(ranges)))
    total = records + quarantined
    return BatchSummary(dataset=ds.name, run_id=run_id, ranges=len(ranges), records=records, quarantined=quarantined,
                        quarantined_by_reason=reasons, staged=staged, schema_version=schema_version,
                        seconds=round(seconds, 3), phases=phases.seconds,
                        records_per_second=round(total / seconds) if seconds else None)
