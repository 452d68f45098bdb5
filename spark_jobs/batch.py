"""The batch layer: recompute exact offset ranges from Kafka into Delta, replayably.

Run under spark-submit (``loglake batch|backfill`` and the Airflow DAGs build the
command) or in-process (``run_batch``). For an events dataset it reads exactly the
planned ranges, applies the speed layer's parse/validate/transform, and *replaces* those
offsets in ``batch.<dataset>`` and in the batch part of ``quarantine.<dataset>`` — one
Delta transaction per table (``replaceWhere``) — so running a range twice, or again after
a crash half-way, leaves identical tables. A changelog dataset's latest state is rebuilt
from its whole retained log. Only then is each range recorded in the offsets ledger,
which is what advances the watermark.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from loglake.config import Config, Dataset
from loglake.errors import OffsetError
from loglake.kafka_admin import watermarks as log_state
from loglake.ledger import ledger_path
from loglake.offsets import OffsetRange
from loglake.planning import Plan, validate_ranges
from spark_jobs import delta_io, parse
from spark_jobs.session import job_context, job_parser, run_main
from spark_jobs.speed import kafka_source_options


def check_retained(config: Config, ranges: list[OffsetRange]) -> None:
    """Fail before reading if Kafka no longer holds a range (data loss is never skipped).

    The plan was validated when it was made; the log may have moved since (retention),
    so the same rule is applied again to the log as it is now.
    """
    if ranges:
        validate_ranges(ranges[0].topic, [(r.partition, r.start, r.end) for r in ranges],
                        log_state(config, ranges[0].topic))


def read_ranges(spark: SparkSession, config: Config, ranges: list[OffsetRange]) -> DataFrame:
    """Exactly ``ranges`` from Kafka, with Spark's Kafka source in batch mode."""
    topic = ranges[0].topic
    opts = kafka_source_options(config, topic)
    opts.pop("subscribe")
    opts["assign"] = json.dumps({topic: [r.partition for r in ranges]})
    opts["startingOffsets"] = json.dumps({topic: {str(r.partition): r.start for r in ranges}})
    opts["endingOffsets"] = json.dumps({topic: {str(r.partition): r.end for r in ranges}})
    return spark.read.format("kafka").options(**opts).load()


def recompute_from_log(spark: SparkSession, config: Config, ds: Dataset) -> DataFrame:
    """What the serving view must equal: the whole retained log through the same code.

    Events: every valid record, transformed. Changelog: the latest state by key.
    """
    log = log_state(config, ds.topic)
    ranges = [OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in sorted(log.items())]
    valid = parse.apply_transform(parse.valid_rows(parse.validate(read_ranges(spark, config, ranges), ds), ds), ds)
    if ds.kind == "changelog":
        return delta_io.latest_per_key(valid, ds.key).where(~F.col("_deleted")).drop("_deleted")
    return valid


def range_predicate(ranges: list[OffsetRange]) -> str:
    """SQL predicate selecting exactly the offsets of ``ranges`` (for replaceWhere)."""
    return " OR ".join(f"(_partition = {r.partition} AND _offset >= {r.start} AND _offset < {r.end})"
                       for r in ranges)


def _replace(df: DataFrame, path: str, predicate: str) -> None:
    (df.write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(path))


LEDGER_SCHEMA = ("dataset string, topic string, partition int, start long, end long, records long, "
                 "quarantined long, run_id string, state string")


def append_ledger(spark: SparkSession, config: Config, rows: list[dict]) -> None:
    """Append ranges to the offsets ledger, ``state`` written (by this job) or published
    (by the quality gate); ``mergeSchema`` adds the state column to a ledger made before it."""
    cols = [c.split()[0] for c in LEDGER_SCHEMA.split(", ")]
    (spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], LEDGER_SCHEMA)
     .withColumn("committed_at", F.current_timestamp())
     .write.format("delta").mode("append").option("mergeSchema", "true").save(ledger_path(config)))


def run_batch(spark: SparkSession, config: Config, ds: Dataset, plan: Plan, run_id: str | None = None) -> dict:
    """Recompute ``plan``'s ranges; return a summary (records, quarantined, seconds)."""
    started = time.monotonic()
    run_id = run_id or f"manual-{uuid.uuid4().hex[:12]}"
    ranges = [r for r in plan.ranges if r.size]
    if any(r.topic != ds.topic for r in ranges):
        raise OffsetError(f"plan ranges must be on {ds.topic}: {[str(r) for r in ranges]}", topic=ds.topic)
    summary = {"dataset": ds.name, "run_id": run_id, "ranges": len(ranges), "records": 0, "quarantined": 0}
    if not ranges:
        return {**summary, "seconds": 0.0, "records_per_second": None}
    check_retained(config, ranges)

    raw = read_ranges(spark, config, ranges)
    validated = parse.validate(raw, ds)
    batch_path = config.table_path(ds, "batch")
    quarantine_path = config.table_path(ds, "quarantine")
    if ds.kind == "changelog":
        # The latest state is rebuilt from the whole log, small by nature: cache it once.
        validated = validated.persist()
        try:
            valid = parse.apply_transform(parse.valid_rows(validated, ds), ds)
            state = delta_io.latest_per_key(valid, ds.key).where(~F.col("_deleted")).drop("_deleted")
            state.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(batch_path)
            _replace(parse.quarantine_rows(validated, "batch"), quarantine_path,
                     f"_layer = 'batch' AND _topic = '{ds.topic}'")
            counts = {(r["_partition"], r["bad"]): r["n"] for r in validated.groupBy(
                "_partition", F.col("_reason").isNotNull().alias("bad")).count().withColumnRenamed(
                "count", "n").collect()}
        finally:
            validated.unpersist()
    else:
        # One pass reads, validates and writes the valid rows, counting the rest; the
        # quarantine is rewritten by a second pass, over the bad offsets only, when there are some.
        predicate = range_predicate(ranges)
        observed, observation = parse.counted(validated, sorted({r.partition for r in ranges}))
        _replace(parse.apply_transform(parse.valid_rows(observed, ds), ds), batch_path, predicate)
        n = observation.get
        counts = {(r.partition, bad): n[f"{'quarantined' if bad else 'records'}_{r.partition}"]
                  for r in ranges for bad in (False, True)}
        where = f"_layer = 'batch' AND ({predicate})"
        if n["quarantined"]:
            bad = parse.validate(parse.only_offsets(raw, n["bad"]), ds)
            _replace(parse.quarantine_rows(bad, "batch"), quarantine_path, where)
        elif delta_io.table_exists(spark, quarantine_path):
            DeltaTable.forPath(spark, quarantine_path).delete(where)  # a re-run found none: drop the old ones
        else:
            delta_io.create_if_missing(parse.quarantine_rows(validated, "batch"), quarantine_path)

    append_ledger(spark, config, [
        {"dataset": ds.name, "topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end,
         "records": counts.get((r.partition, False), 0), "quarantined": counts.get((r.partition, True), 0),
         "run_id": run_id, "state": "written"} for r in ranges])
    seconds = time.monotonic() - started
    records = sum(n for (_p, bad), n in counts.items() if not bad)
    quarantined = sum(n for (_p, bad), n in counts.items() if bad)
    total = records + quarantined
    return {**summary, "records": records, "quarantined": quarantined, "seconds": round(seconds, 3),
            "records_per_second": round(total / seconds) if seconds else None}


def main(argv: list[str] | None = None) -> int:
    p = job_parser("batch", __doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="the plan as JSON (loglake.planning.Plan.to_json)")
    p.add_argument("--run-id")
    args = p.parse_args(argv)
    plan = Plan.from_json(args.plan)
    if plan.dataset != args.dataset:
        p.error(f"--plan is for dataset {plan.dataset!r}, not {args.dataset!r}")
    config, ds, spark = job_context(args, "batch")
    summary = run_batch(spark, config, ds, plan, args.run_id)
    print(json.dumps(summary), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
