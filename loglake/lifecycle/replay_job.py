"""Re-admit quarantined records the current config accepts: ``loglake replay DATASET``.

A record is quarantined under the rules in force when its layer validated it. After a rule
was loosened (an enum value added, a wider min/max, a field made optional: the additive
schema changes of ``loglake.schema_versions``) some quarantined records are valid now. A replay
re-validates each layer's quarantine under the current config, through the same
parse/validate/transform code, and moves the records now valid into their layer:

- **speed** (the provisional side): from the bytes the quarantine row kept (key, value,
  topic, partition, offset, Kafka timestamp: what the stream read). The rows now valid
  are appended to the speed table — offsets it already holds left out, so a replay cut
  short is finished, never doubled — a changelog's latest state is corrected for their
  keys (to what the serving view says), then they are deleted from the quarantine table.
  Between the append and the delete a row is in both for a moment (never in neither);
  the next replay ends that: running it twice changes nothing.
- **batch** (the exact side): a batch table is always the recompute of its ranges under
  the config in force, so the ranges holding now-valid records are recomputed from the log
  (a backfill: written aside, swapped in with their quarantine rows by the quality gate,
  recorded in the ledger); a changelog's state is rebuilt from the full log, as every
  batch run does. A range is recomputed whole: with ``reason_code``, a record of another
  reason in it that the config now accepts moves too.

``reason_code`` limits both to the quarantined records of that reason (the batch ranges are
those holding such records); ``dry_run`` counts and writes nothing. The dataset's writer
lease is held throughout (``loglake.jobs.entry``).
"""

from __future__ import annotations

import time
from dataclasses import replace

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from loglake.core.config import Config, Dataset
from loglake.core.offsets import OffsetRange
from loglake.jobs.requests import ReplayRequest
from loglake.jobs.summaries import ReplaySummary
from loglake.leases import appends_paused, check_lease
from loglake.core.plans import Plan
from loglake.batch.planning import plan_batch
from loglake.serving.spark import serving_view
from loglake.lake import delta_io
from loglake.jobs import entry
from loglake.lake import evolution
from loglake.records import validation
from loglake.records.kafka_source import check_retained
from loglake.quality.pipeline import recompute_and_publish

# Now-valid batch offsets further apart than this are recomputed as separate ranges.
RANGE_GAP = 10_000
POSITION = ["_topic", "_partition", "_offset"]


def _quarantined(spark: SparkSession, config: Config, ds: Dataset, layer: str,
                 reason_code: str | None) -> DataFrame | None:
    path = config.table_path(ds, "quarantine")
    if not delta_io.table_exists(spark, path):
        return None
    q = spark.read.format("delta").load(path).where((F.col("_layer") == layer) & (F.col("_topic") == ds.topic))
    return q.where(F.col("reason_code") == reason_code) if reason_code else q


def revalidated(spark: SparkSession, config: Config, ds: Dataset, layer: str,
                reason_code: str | None) -> DataFrame | None:
    """The layer's quarantined records validated again under the current config, each with
    the reason it was quarantined for (``_was``); materialised: the replay reads it several times."""
    q = _quarantined(spark, config, ds, layer, reason_code)
    if q is None:
        return None
    kafka = q.select("key", "value", F.col("_topic").alias("topic"), F.col("_partition").alias("partition"),
                     F.col("_offset").alias("offset"), F.col("_kafka_timestamp").alias("timestamp"))
    was = q.select(*POSITION, F.col("reason_code").alias("_was"))
    return validation.validate(kafka, ds).join(was, POSITION).localCheckpoint(eager=True)


def by_reason(checked: DataFrame | None) -> dict[str, dict[str, int]]:
    """``{"valid": {reason: n}, "invalid": {reason: n}}`` by the reason each was quarantined for."""
    out: dict[str, dict[str, int]] = {"valid": {}, "invalid": {}}
    if checked is not None:
        for r in checked.groupBy("_was", F.col("_reason").isNull().alias("ok")).count().collect():
            out["valid" if r["ok"] else "invalid"][r["_was"]] = r["count"]
    return out


def _ranges(valid: DataFrame, topic: str) -> list[OffsetRange]:
    """The offsets of ``valid`` as ranges per partition, a new one where two are ``RANGE_GAP``
    apart; computed in Spark, so a flood of them never reaches the driver one by one."""
    w = Window.partitionBy("_partition").orderBy("_offset")
    gap = F.coalesce(F.col("_offset") - F.lag("_offset").over(w) >= RANGE_GAP, F.lit(True)).cast("int")
    cluster = F.sum("_new").over(w.rowsBetween(Window.unboundedPreceding, 0))
    rows = (valid.select("_partition", "_offset").withColumn("_new", gap).withColumn("_c", cluster)
            .groupBy("_partition", "_c").agg(F.min("_offset").alias("lo"), F.max("_offset").alias("hi"))
            .orderBy("_partition", "lo").collect())
    return [OffsetRange(topic, r["_partition"], r["lo"], r["hi"] + 1) for r in rows]


def replay_speed(spark: SparkSession, config: Config, ds: Dataset, checked: DataFrame, run_id: str) -> None:
    """Move the now-valid speed-quarantined rows into the speed table (and a changelog's latest state)."""
    moved = checked.where(F.col("_reason").isNull())
    version = evolution.prepare(spark, config, ds, ("speed",))
    speed_path = config.table_path(ds, "speed")
    rows = validation.apply_transform(validation.valid_rows(moved, ds), ds)
    if delta_io.table_exists(spark, speed_path):  # a replay cut short after its append: not twice
        held = spark.read.format("delta").load(speed_path).select(*POSITION)
        rows = rows.join(held, POSITION, "left_anti")
    meta = {"loglake_job": "replay", "loglake_run_id": run_id, "loglake_schema_version": version}
    with delta_io.commit_metadata(spark, meta):
        check_lease(f"append the replayed rows to {speed_path}")
        delta_io.to_delta(rows, "append", ds.stats_columns).option("mergeSchema", "true").save(speed_path)
        quarantine = config.table_path(ds, "quarantine")
        with appends_paused(config, ds.name, f"replay {run_id}: {ds.tables.quarantine}"):
            if ds.tables.latest is not None:
                _correct_latest(spark, config, ds, moved)
            gone = moved.select(*POSITION)
            delta_io.retry_conflicts(lambda: DeltaTable.forPath(spark, quarantine).alias("t").merge(
                gone.alias("s"), "t._layer = 'speed' AND t._topic = s._topic AND t._partition = s._partition "
                                 "AND t._offset = s._offset").whenMatchedDelete().execute(),
                f"DELETE the replayed rows from {quarantine}")


def _correct_latest(spark: SparkSession, config: Config, ds: Dataset, moved: DataFrame) -> None:
    """Set the latest state of the replayed changes' keys to what the serving view says
    (batch state as of W_p with the speed changes at or above W_p, the replayed ones among
    them, newest per key): an older replayed change never overwrites a newer one, and one
    whose key a later tombstone deleted does not bring it back."""
    path, key = config.table_path(ds, "latest"), ds.keys
    keys = moved.select(*key).distinct()
    if not delta_io.table_exists(spark, path):
        delta_io.create_if_missing(serving_view(spark, config, ds).limit(0), path, ds.stats_columns)

    def merge() -> None:
        view = serving_view(spark, config, ds)
        cols = view.columns
        source = keys.join(view.withColumn("_present", F.lit(True)), key, "left")
        (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), delta_io.key_match(key))
         .whenMatchedDelete(condition="s._present IS NULL")
         .whenMatchedUpdate(condition="s._present", set={c: f"s.`{c}`" for c in cols})
         .whenNotMatchedInsert(condition="s._present", values={c: f"s.`{c}`" for c in cols})
         .execute())

    delta_io.retry_conflicts(merge, f"MERGE the replayed keys into {path}")


def batch_plan(ds: Dataset, config: Config, checked: DataFrame | None) -> Plan | None:
    """The recompute that moves the now-valid batch-quarantined records (None: none are)."""
    if checked is None:
        return None
    valid = checked.where(F.col("_reason").isNull())
    if ds.kind == "changelog":
        return plan_batch(config, ds) if valid.limit(1).count() else None
    ranges = _ranges(valid, ds.topic)
    if not ranges:
        return None
    return Plan(ds.name, tuple(ranges), "backfill",
                ("replay: the ranges holding quarantined records the current config accepts",))


def replay(spark: SparkSession, config: Config, ds: Dataset, run_id: str, reason_code: str | None = None,
           dry_run: bool = False) -> ReplaySummary:
    started = time.monotonic()
    speed = revalidated(spark, config, ds, "speed", reason_code)
    batch = revalidated(spark, config, ds, "batch", reason_code)
    plan = batch_plan(ds, config, batch)
    if plan is not None:
        check_retained(config, list(plan.ranges))  # a data-loss error here: nothing was moved
    out = ReplaySummary(dataset=ds.name, run_id=run_id, reason_code=reason_code, dry_run=dry_run,
                        speed=by_reason(speed), batch=by_reason(batch),
                        batch_ranges=[] if plan is None else [str(r) for r in plan.ranges])
    if not dry_run:
        if any(out.speed["valid"].values()):
            replay_speed(spark, config, ds, speed, run_id)
        if plan is not None:
            quality = recompute_and_publish(spark, config, ds, plan, run_id).quality
            out = replace(out, batch_published=quality.published, quality=quality)
    return replace(out, seconds=round(time.monotonic() - started, 3))


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: ReplayRequest) -> ReplaySummary:
    return replay(spark, config, ds, request.run_id, request.reason_code, request.dry_run)


def main(argv: list[str] | None = None) -> int:
    return entry.run("replay", argv, run_job)
