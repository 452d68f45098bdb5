"""Spark's Kafka source as loglake reads it: the options both layers share, exact ranges."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession

from loglake.core.config import Config
from loglake.core.offsets import OffsetRange
from loglake.kafka.admin import log_bounds
from loglake.core.plans import validate_ranges


def source_options(config: Config, topic: str) -> dict[str, str]:
    """Options of Spark's Kafka source shared by the speed and batch layers."""
    opts = {
        "kafka.bootstrap.servers": config.kafka.bootstrap_servers,
        "subscribe": topic,
        # A gap in the log is data loss: fail loudly rather than skip.
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        # What a read_committed consumer sees: records of aborted transactions are in no
        # table (exactly-once producers: Kafka Streams, Flink, any transactional producer).
        # Spark tells the offsets aborted records and markers take from data loss
        # (it checks the consumer's position after each poll), so failOnDataLoss still holds.
        "kafka.isolation.level": "read_committed",
    }
    # Security (kafka.security) and kafka.spark: built here, in the driver, from the job's own
    # environment; no password is on spark-submit's command line.
    opts.update({f"kafka.{k}": v for k, v in config.kafka_java_conf().items()})
    return opts


def check_retained(config: Config, ranges: list[OffsetRange]) -> None:
    """Fail before reading if Kafka no longer holds a range (data loss is never skipped).

    A plan is validated when it is made; the log may have moved since (retention), so the
    same rule is applied again to the log as it is now.
    """
    if ranges:
        validate_ranges(ranges[0].topic, [(r.partition, r.start, r.end) for r in ranges],
                        log_bounds(config, ranges[0].topic))


def read_ranges(spark: SparkSession, config: Config, ranges: list[OffsetRange]) -> DataFrame:
    """Exactly ``ranges`` from Kafka, with Spark's Kafka source in batch mode.

    The source takes one [start, end) per partition: several ranges of one partition are
    read in rounds (the n-th range of each partition in round n), unioned.
    """
    topic = ranges[0].topic
    rounds: list[list[OffsetRange]] = []
    for r in sorted(ranges, key=lambda r: (r.partition, r.start)):
        for round_ in rounds:
            if all(o.partition != r.partition for o in round_):
                round_.append(r)
                break
        else:
            rounds.append([r])
    frames = [_read_round(spark, config, topic, round_) for round_ in rounds]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _read_round(spark: SparkSession, config: Config, topic: str, ranges: list[OffsetRange]) -> DataFrame:
    """At most one range per partition."""
    opts = source_options(config, topic)
    opts.pop("subscribe")
    opts["assign"] = json.dumps({topic: [r.partition for r in ranges]})
    opts["startingOffsets"] = json.dumps({topic: {str(r.partition): r.start for r in ranges}})
    opts["endingOffsets"] = json.dumps({topic: {str(r.partition): r.end for r in ranges}})
    return spark.read.format("kafka").options(**opts).load()
