"""What a speed stream's Spark checkpoint says, read from Spark's own files.

Spark keeps a streaming query's progress in its checkpoint directory: ``offsets/N`` (the
offsets micro-batch N was planned to read: a version line, a metadata line, then one JSON line
per source), ``commits/N`` (micro-batch N committed) and ``sources/0/0`` (the Kafka source's
initial offsets). These files are Spark's, not an API: this module is the one place loglake
reads them, written for the format of ``SPARK_VERSION`` (a unit test fails when pyspark is
another, so an upgrade checks it again), through the checkpoint's own Hadoop file system
(local, HDFS or an object store).
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

from loglake.core.offsets import parse_spark_offsets

# The Spark version whose checkpoint layout this module reads (tests/unit/test_checkpoint_format.py).
SPARK_VERSION = "4.1"


def checkpoint_position(spark: SparkSession, checkpoint: str, topic: str) -> dict[int, int] | None:
    """Per partition, the offset a query on ``checkpoint`` reads next: the end of its last
    committed micro-batch, or (none committed yet) the offsets it started from; None when
    the checkpoint holds neither."""
    fs, path = _fs(spark, checkpoint)
    commits = _numbered(fs, path(f"{checkpoint}/commits"))
    if commits:
        return _planned_ends(spark, fs, path, checkpoint, topic, commits[-1])
    return _initial_offsets(spark, fs, path, checkpoint, topic)


def planned_span(spark: SparkSession, checkpoint: str, topic: str, batch_id: int) -> int | None:
    """How many offsets micro-batch ``batch_id`` of the query on ``checkpoint`` spans, from
    Spark's offset log: its planned ends less the previous micro-batch's (or, the first, the
    query's initial offsets). None when the log does not say."""
    fs, path = _fs(spark, checkpoint)
    ends = _planned_ends(spark, fs, path, checkpoint, topic, batch_id)
    starts = (_planned_ends(spark, fs, path, checkpoint, topic, batch_id - 1) if batch_id > 0
              else _initial_offsets(spark, fs, path, checkpoint, topic))
    if ends is None or starts is None:
        return None
    return sum(max(0, e - starts.get(p, 0)) for p, e in ends.items())


def _planned_ends(spark: SparkSession, fs, path, checkpoint: str, topic: str, batch_id: int) -> dict[int, int] | None:
    return _topic_offsets(_read_text(spark, fs, path(f"{checkpoint}/offsets/{batch_id}")), topic)


def _initial_offsets(spark: SparkSession, fs, path, checkpoint: str, topic: str) -> dict[int, int] | None:
    """The Kafka source's initial offsets (its first micro-batch starts there)."""
    initial = _numbered(fs, path(f"{checkpoint}/sources/0"))
    return _topic_offsets(_read_text(spark, fs, path(f"{checkpoint}/sources/0/{initial[0]}")) if initial else None,
                          topic)


def _topic_offsets(text: str | None, topic: str) -> dict[int, int] | None:
    """``topic``'s offsets in an offset-log file ("v1", then metadata, then one line per source)."""
    if text is None:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and f'"{topic}"' in line:
            found = parse_spark_offsets(line).get(topic, {})
            # -2/-1 stand for earliest/latest: nothing read yet, no position.
            return {p: o for p, o in found.items() if o >= 0}
    return None


def _fs(spark: SparkSession, location: str):
    """The Hadoop file system of ``location`` (a checkpoint: local, HDFS or an object store),
    and the constructor of its paths."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(location).getFileSystem(spark._jsc.hadoopConfiguration())
    return fs, jvm.org.apache.hadoop.fs.Path


def _numbered(fs, directory) -> list[int]:
    """The numbered files of a checkpoint directory (micro-batch ids), ascending."""
    if not fs.exists(directory):
        return []
    names = [status.getPath().getName() for status in fs.listStatus(directory)]
    return sorted(int(n) for n in names if n.isdigit())


def _read_text(spark: SparkSession, fs, path) -> str | None:
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def set_aside(spark: SparkSession, checkpoint: str) -> None:
    """Rename a checkpoint to ``<checkpoint>.before-loss-<time>`` (kept for inspection)."""
    fs, path = _fs(spark, checkpoint)
    target = path(f"{checkpoint}.before-loss-{time.strftime('%Y%m%dT%H%M%S')}")
    fs.rename(path(checkpoint), target)
    print(f"loglake: speed {checkpoint}: position in an accepted loss; checkpoint set aside as {target}; "
          f"resuming after the loss", file=sys.stderr, flush=True)


def has_offsets(spark: SparkSession, checkpoint: str) -> bool:
    """Whether the checkpoint planned any micro-batch."""
    fs, path = _fs(spark, checkpoint)
    return bool(_numbered(fs, path(f"{checkpoint}/offsets")))
