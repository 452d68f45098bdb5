"""Spark's Kafka source as loglake reads it: the options both layers share, exact ranges, and
the erased records skipped on every read (``without_erased``)."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from loglake.core.config import Config
from loglake.core.offsets import OffsetRange
from loglake.kafka.admin import log_bounds
from loglake.core.plans import validate_ranges
from loglake.ledger.erasures import ErasedOffsets, erased_offsets


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


def read_ranges(spark: SparkSession, config: Config, ranges: list[OffsetRange], *,
                erased: bool = True) -> DataFrame:
    """Exactly ``ranges`` from Kafka, with Spark's Kafka source in batch mode, without the
    records an erasure erased (``without_erased``; ``erased=False``: with them, for the erasure's
    own search).

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
    return without_erased(spark, out, erased_offsets(config, topic)) if erased else out


_FRAMES: dict[tuple, tuple[DataFrame, ErasedOffsets]] = {}


def without_erased(spark: SparkSession, raw: DataFrame, erased: ErasedOffsets) -> DataFrame:
    """``raw`` (Kafka source rows of one topic) without the erased positions: an anti-join
    with the ledger's positions, broadcast (read once per job or when the ledger moved, never
    per record in Python). No erasure: ``raw`` as it is, no join."""
    if erased.empty:
        return raw
    sc = spark.sparkContext
    key = (id(erased), sc.applicationId, sc.startTime)
    if key not in _FRAMES:
        if len(_FRAMES) >= 16:  # bounded: a topic's older ledger versions go first
            del _FRAMES[next(iter(_FRAMES))]
        frame = spark.createDataFrame(erased.table).withColumnsRenamed({"partition": "_e_partition",
                                                                        "offset": "_e_offset"})
        _FRAMES[key] = (frame, erased)  # kept with it: its id stays its own while it is here
    frame = _FRAMES[key][0]
    cond = (raw["partition"] == F.col("_e_partition")) & (raw["offset"] == F.col("_e_offset"))
    return raw.join(F.broadcast(frame), cond, "left_anti")


def _read_round(spark: SparkSession, config: Config, topic: str, ranges: list[OffsetRange]) -> DataFrame:
    """At most one range per partition."""
    opts = source_options(config, topic)
    opts.pop("subscribe")
    opts["assign"] = json.dumps({topic: [r.partition for r in ranges]})
    opts["startingOffsets"] = json.dumps({topic: {str(r.partition): r.start for r in ranges}})
    opts["endingOffsets"] = json.dumps({topic: {str(r.partition): r.end for r in ranges}})
    return spark.read.format("kafka").options(**opts).load()
