"""Where a speed stream reads from: after what the tables hold when its checkpoint is new,
and never past offsets Kafka deleted before the stream read them, unless an operator
accepted their loss.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.core.errors import DataLossError
from loglake.core.offsets import spark_offsets_json
from loglake.kafka.admin import list_topics, log_bounds
from loglake.ledger.ranges import batch_watermarks, compute_watermarks, ledger_rows
from loglake.tables import landed_positions
from loglake.speed.checkpoint import checkpoint_position


def resume_offsets(spark: SparkSession, config: Config, ds: Dataset, topic: str,
                   partitions: int | None = None) -> str:
    """Starting offsets for a *new* checkpoint: after what the tables already hold.

    If the checkpoint was lost but the speed tables survive, starting from the earliest
    offset would duplicate rows; instead resume each partition after its highest landed
    offset (speed or speed-quarantine), and never below its batch watermark: maintenance
    expires the speed rows below it, so a partition may hold none yet be covered up to
    there (an accepted loss counts as covered: the stream resumes after it). Partitions
    with neither start at earliest.
    """
    highest = landed_positions(config, ds, topic)
    covered = batch_watermarks(config, ds) if topic == ds.topic else {}
    if not highest and not covered:
        return "earliest"
    if partitions is None:
        partitions = list_topics(config).get(topic, 0)
    starts = {p: max(highest.get(p, -1), covered.get(p, -1)) for p in range(partitions)}
    # -2 means "earliest" in Spark's offsets JSON.
    return spark_offsets_json(topic, {p: s if s >= 0 else -2 for p, s in starts.items()})


def speed_gaps(spark: SparkSession, config: Config, ds: Dataset,
               bounds: dict[int, tuple[int, int]] | None = None) -> list[tuple[int, int, int, bool]]:
    """``(partition, position, earliest, accepted)`` for each partition whose next offset to
    read is no longer in the log: Kafka deleted it before the speed layer read it.
    ``accepted``: an operator recorded the loss (``loglake accept-loss``).

    The position is where the next run reads from: the checkpoint's, when it has one (Spark
    resumes there, whatever else says otherwise), else one past the highest offset the
    tables landed (``resume_offsets``); never below the batch watermark. Not the consumer
    group's record: it follows the checkpoint asynchronously and may be missing or behind.
    """
    earliest = {p: lo for p, (lo, _hi) in (bounds or log_bounds(config, ds.topic)).items()}
    rows = ledger_rows(config, ds)
    published = compute_watermarks([r for r in rows if r.get("state") != "lost"], earliest)
    with_lost = compute_watermarks(rows, earliest)
    positions = checkpoint_position(spark, config.checkpoint_path(ds), ds.topic)
    if positions is None:
        positions = landed_positions(config, ds, ds.topic)
    out = []
    for p, pos in sorted(positions.items()):
        pos = max(pos, published.get(p, -1))
        if pos < earliest.get(p, 0):
            out.append((p, pos, earliest[p], with_lost.get(p, -1) >= earliest[p]))
    return out


def check_gaps(spark: SparkSession, config: Config, ds: Dataset,
               bounds: dict[int, tuple[int, int]] | None = None) -> list[tuple[int, int, int, bool]]:
    """Refuse to read past offsets Kafka lost unless the loss was accepted. Returns the
    accepted gaps (``speed_gaps``'): any means a new checkpoint (Spark's would still point
    into the gap). ``bounds``: ``log_bounds`` of the topic, if the caller just read them."""
    gaps = speed_gaps(spark, config, ds, bounds)
    unaccepted = [g for g in gaps if not g[3]]
    if unaccepted:
        p, pos, lo, _ = unaccepted[0]
        others = "".join(f", {ds.topic}[{q}] offsets [{a}, {b})" for q, a, b, _ in unaccepted[1:])
        partition = f"--partition {p} " if len(unaccepted) == 1 else ""
        raise DataLossError(ds.topic, p, pos, lo, f"{others.lstrip(', ') + ' too; ' if others else ''}retention "
                            "deleted them before the speed layer read them; the stream waits until an operator "
                            f"records the loss: loglake accept-loss {ds.name} {partition}--reason TEXT "
                            "(or the loglake_accept_loss DAG)")
    return gaps


def is_data_loss(error: BaseException) -> bool:
    """Spark's Kafka source failed because offsets it must read were deleted."""
    text = " ".join(str(x) for x in (error, getattr(error, "_stackTrace", ""), error.__cause__) if x)
    return ("KAFKA_DATA_LOSS" in text or "Some data may have been lost" in text or "OffsetOutOfRange" in text
            or "KafkaIllegalStateException" in text)
