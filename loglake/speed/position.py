"""Where a speed stream reads from: after what the tables hold when its checkpoint is new,
and never past offsets Kafka deleted before the stream read them, unless an operator
accepted their loss.

What that takes is read once, when the stream starts (``read_start``): the log's bounds, the
batch ledger, the checkpoint's position and, without one, the offsets the tables landed. The
checks and the starting offsets below are worked out from those values.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.core.errors import DataLossError
from loglake.core.offsets import spark_offsets_json
from loglake.kafka.admin import dataset_bounds, log_bounds
from loglake.ledger.ranges import compute_watermarks, ledger_rows
from loglake.tables import landed_positions
from loglake.speed.checkpoint import checkpoint_position, has_offsets


@dataclass(frozen=True)
class Start:
    """What a speed stream of ``topic`` starts from, read once (``read_start``)."""
    topic: str
    bounds: dict[int, tuple[int, int]]  # the log's (earliest, end) per partition
    ledger: list[dict]                  # the batch ledger's rows (none for another topic than the dataset's)
    fresh: bool                         # the checkpoint planned no micro-batch yet
    held: dict[int, int] | None         # the checkpoint's position (``checkpoint_position``)
    landed: dict[int, int] | None       # one past the highest offset the tables landed; read when fresh or held is None

    @property
    def earliest(self) -> dict[int, int]:
        return {p: lo for p, (lo, _hi) in self.bounds.items()}

    @property
    def covered(self) -> dict[int, int]:
        """Per partition, the batch watermark, accepted losses counted as covered."""
        return compute_watermarks(self.ledger, self.earliest) if self.ledger else {}


def read_start(spark: SparkSession, config: Config, ds: Dataset, topic: str | None = None) -> Start:
    """Read what a stream of ``ds`` on ``topic`` (the dataset's own by default) starts from; the
    dataset's own topic has its partition count checked (``dataset_bounds``)."""
    topic = topic or ds.topic
    own = topic == ds.topic
    checkpoint = config.checkpoint_path(ds)
    fresh = not has_offsets(spark, checkpoint)
    held = checkpoint_position(spark, checkpoint, topic)
    return Start(topic=topic, bounds=dataset_bounds(config, ds) if own else log_bounds(config, topic),
                 ledger=ledger_rows(config, ds) if own else [], fresh=fresh, held=held,
                 landed=landed_positions(config, ds, topic) if fresh or held is None else None)


def resume_offsets(start: Start) -> str:
    """Starting offsets for a *new* checkpoint: after what the tables already hold.

    If the checkpoint was lost but the speed tables survive, starting from the earliest
    offset would duplicate rows; instead resume each partition after its highest landed
    offset (speed or speed-quarantine), and never below its batch watermark: maintenance
    expires the speed rows below it, so a partition may hold none yet be covered up to
    there (an accepted loss counts as covered: the stream resumes after it). Partitions
    with neither start at earliest.
    """
    highest, covered = start.landed or {}, start.covered
    if not highest and not covered:
        return "earliest"
    starts = {p: max(highest.get(p, -1), covered.get(p, -1)) for p in range(len(start.bounds))}
    # -2 means "earliest" in Spark's offsets JSON.
    return spark_offsets_json(start.topic, {p: s if s >= 0 else -2 for p, s in starts.items()})


def speed_gaps(start: Start) -> list[tuple[int, int, int, bool]]:
    """``(partition, position, earliest, accepted)`` for each partition whose next offset to
    read is no longer in the log: Kafka deleted it before the speed layer read it.
    ``accepted``: an operator recorded the loss (``loglake accept-loss``).

    The position is where the next run reads from: the checkpoint's, when it has one (Spark
    resumes there, whatever else says otherwise), else one past the highest offset the
    tables landed (``resume_offsets``); never below the batch watermark. Not the consumer
    group's record: it follows the checkpoint asynchronously and may be missing or behind.
    """
    earliest = start.earliest
    published = compute_watermarks([r for r in start.ledger if r.get("state") != "lost"], earliest)
    with_lost = start.covered
    positions = start.held if start.held is not None else start.landed or {}
    out = []
    for p, pos in sorted(positions.items()):
        pos = max(pos, published.get(p, -1))
        if pos < earliest.get(p, 0):
            out.append((p, pos, earliest[p], with_lost.get(p, -1) >= earliest[p]))
    return out


def check_gaps(ds: Dataset, start: Start) -> list[tuple[int, int, int, bool]]:
    """Refuse to read past offsets Kafka lost unless the loss was accepted. Returns the
    accepted gaps (``speed_gaps``'): any means a new checkpoint (Spark's would still point
    into the gap)."""
    gaps = speed_gaps(start)
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
