"""Rebuild a dataset's table from the log: ``loglake rebuild DATASET --layer batch|speed|latest``.

The damaged table is set aside first (renamed to ``<path>.before-rebuild-<time>``, kept
for inspection: a table whose files are gone cannot even be overwritten), then made
again from Kafka through the same code that made it (``loglake.lifecycle.rebuild`` says which
offsets and refuses, before anything moves, when the log no longer holds them):

- batch: one recompute of every published range through the quality gate (the
  dataset's writer lease held by ``loglake.jobs.entry``); the gate publishes it again and
  records the new serving point. Readers meanwhile serve the speed side only.
- speed: the speed table and the stream's checkpoint set aside, the speed layer's
  quarantine rows deleted, then the stream runs (available-now) on a new checkpoint
  from the batch watermark. The caller stops the background stream first and starts it
  again after (``loglake.cli``).
- latest: the batch layer's state (at its serving point) written as the new table, the
  changes at or above the watermark folded on top (the stream folds the newer ones
  again: newest per key wins, so twice is once).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.jobs.requests import RebuildRequest
from loglake.jobs.summaries import BatchSummary, RebuildSummary
from loglake.leases import check_lease
from loglake.ledger.snapshots import pin
from loglake.lifecycle.rebuild import batch_plan, check_layer, from_watermark
from loglake.lake import delta_io
from loglake.jobs import entry
from loglake.records import validation
from loglake.records.kafka_source import check_retained, read_ranges
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed


def set_aside(spark: SparkSession, path: str) -> str | None:
    """Rename ``path`` to ``<path>.before-rebuild-<time>``; the new name (None: nothing there)."""
    jvm = spark._jvm
    src = jvm.org.apache.hadoop.fs.Path(path)
    fs = src.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(src):
        return None
    target = f"{path}.before-rebuild-{time.strftime('%Y%m%dT%H%M%S')}"
    if not fs.rename(src, jvm.org.apache.hadoop.fs.Path(target)):
        raise OSError(f"could not rename {path} to {target}")
    print(f"loglake: rebuild: {path} set aside as {target}", file=sys.stderr, flush=True)
    return target


def rebuild_batch(spark: SparkSession, config: Config, ds: Dataset, run_id: str) -> RebuildSummary:
    plan = batch_plan(config, ds)  # a data-loss error here: nothing was moved
    aside = set_aside(spark, config.table_path(ds, "batch"))
    summary = recompute_and_publish(spark, config, ds, plan, run_id) if plan.ranges else BatchSummary(dataset=ds.name)
    return RebuildSummary(dataset=ds.name, run_id=run_id, layer="batch", set_aside=aside, ranges=len(plan.ranges),
                          offsets=plan.offsets, records=summary.records, quarantined=summary.quarantined)


def rebuild_speed(spark: SparkSession, config: Config, ds: Dataset, run_id: str) -> RebuildSummary:
    ranges = from_watermark(config, ds)  # a data-loss error here: nothing was moved
    aside = set_aside(spark, config.table_path(ds, "speed"))
    checkpoint = set_aside(spark, config.checkpoint_path(ds))
    quarantine = config.table_path(ds, "quarantine")
    if delta_io.table_exists(spark, quarantine):  # re-quarantined by the stream from W_p
        delta_io.delete_rows(spark, quarantine, "_layer = 'speed'")
    run_speed(spark, config, ds, available_now=True)
    records = spark.read.format("delta").load(config.table_path(ds, "speed")).count()
    bad = spark.read.format("delta").load(quarantine).where("_layer = 'speed'").count()
    return RebuildSummary(dataset=ds.name, run_id=run_id, layer="speed", set_aside=aside,
                          checkpoint_set_aside=checkpoint, offsets=sum(r.size for r in ranges), records=records,
                          quarantined=bad)


def rebuild_latest(spark: SparkSession, config: Config, ds: Dataset, run_id: str) -> RebuildSummary:
    ranges = [r for r in from_watermark(config, ds) if r.size]
    check_retained(config, ranges)
    snap = pin(config, ds)
    path = config.table_path(ds, "latest")
    aside = set_aside(spark, path)
    batch_version = snap.version("batch")
    if batch_version is not None:
        state = spark.read.format("delta").option("versionAsOf", batch_version).load(config.table_path(ds, "batch"))
        with delta_io.commit_metadata(spark, {"loglake_job": "rebuild", "loglake_run_id": run_id,
                                              "loglake_from_batch_version": batch_version}):
            check_lease(f"rebuild {path}")
            delta_io.to_delta(state, "overwrite", ds.stats_columns).save(path)
    changes = None
    if ranges:
        changes = validation.apply_transform(validation.valid_rows(validation.validate(read_ranges(spark, config, ranges), ds), ds), ds)
        delta_io.merge_latest(spark, changes, path, ds.keys, f"loglake-rebuild-{ds.name}-{run_id}", 0,
                              ds.stats_columns, store=config.object_store)
    rows = spark.read.format("delta").load(path).count() if delta_io.table_exists(spark, path) else 0
    return RebuildSummary(dataset=ds.name, run_id=run_id, layer="latest", set_aside=aside,
                          from_batch_version=batch_version, offsets=sum(r.size for r in ranges), records=rows)


REBUILD = {"batch": rebuild_batch, "speed": rebuild_speed, "latest": rebuild_latest}


def rebuild(spark: SparkSession, config: Config, ds: Dataset, layer: str, run_id: str) -> RebuildSummary:
    started = time.monotonic()
    out = REBUILD[check_layer(ds, layer)](spark, config, ds, run_id)
    return replace(out, seconds=round(time.monotonic() - started, 3))


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: RebuildRequest) -> RebuildSummary:
    return rebuild(spark, config, ds, request.layer, request.run_id)


def main(argv: list[str] | None = None) -> int:
    return entry.run("rebuild", argv, run_job)
