"""The speed layer: Kafka → parse/validate/transform → Delta, exactly once, per micro-batch.

The stream itself, shared by the speed job (``spark_jobs/speed.py``, under spark-submit: ``loglake
speed start|run``), the rebuild job and in-process callers (``run_speed``). Each micro-batch writes
valid rows to ``speed.<dataset>`` and the rest to ``quarantine.<dataset>``, both as Delta appends
tied to (stream id, batch id): a batch replayed after a crash is skipped by Delta instead of written
twice. Only after the batch is committed does the stream record its position in the dataset's Kafka
consumer group.

Exactly once with more than one stream of a dataset on an object store (a stream paused past
its lease's life while another took over, a host whose clock runs ahead, two replicas of one
service): the lease decides which stream should run, but nothing here depends on it, nor on a
clock. Two facts make every offset land once, whoever commits:

1. *A micro-batch id names one offset range, for ever.* Spark plans batch N by creating
   ``offsets/N`` in the checkpoint, and on the store every checkpoint file is created by one
   conditional put (``If-None-Match: *``, ``io.loglake.storage.S3ConditionalCheckpointFileManager``;
   S3A's own check-then-rename lets a stream that paused between its check and its rename
   replace another's plan). Of two streams planning batch N, the second fails; a stream that
   takes over replays the planned batch, the same range. The checkpoint's ``metadata`` (its id,
   the stream's transaction app id) is created the same way.
2. *A micro-batch's rows are committed at most once per table.* Each commit of batch N carries
   Delta's transaction id (checkpoint id, N) and is checked: Delta (and delta-rs, from the same
   snapshot it commits on) reads the table's recorded version for that app id and skips a batch
   already there; a commit racing one of the same app id fails its conflict check
   (``ConcurrentTransactionException``), is retried, and then skips. A skipped stale stream then
   fails creating ``commits/N``, which the other created, and stops.

So a batch lands once with the range it was planned with, and the next batch starts where it
ended: no offset twice, none skipped. On a filesystem lake the ``flock`` of one machine keeps a
second stream from running at all while the first lives, paused or not, and only a query's first
micro-batch is checked (the cost: a reconstruction of the table's state per checked commit).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from loglake.core.config import Config, Dataset
from loglake.core.errors import StreamRunningError
from loglake.core.offsets import parse_spark_offsets
from loglake.jobs.summaries import SpeedSummary
from loglake.kafka.admin import PositionCommitter
from loglake.leases import StreamLease, stream_lease
from loglake.ledger.snapshots import speed_txn_app
from loglake.observe import series
from loglake.schemaregistry.resolve import Follower
from loglake.lake import delta_io, evolution
from loglake.records import validation
from loglake.records.kafka_source import source_options
from loglake.speed.checkpoint import planned_span, set_aside
from loglake.speed.position import check_gaps, read_start, resume_offsets
from loglake.speed.sizing import Sizing, size_micro_batches
from loglake.speed.writer import process_batch


# A micro-batch of at most this many records, and of at most SMALL_BATCH_BYTES by the stream's
# mean record size, is coalesced to the cores and, for an events dataset, its valid rows are
# collected to the driver and appended by delta-rs (``loglake.speed.writer``): a Spark append's
# fixed cost (~1 s) is what a mid-size micro-batch's time was made of at a steady rate
# (bench/results/levers-2026-11-30/mid-batch: P3's micro-batch median 1.94 -> 1.01 s at 23,610 records/s).
SMALL_BATCH_RECORDS = 100_000
SMALL_BATCH_BYTES = 128 << 20


def _small(records: int | None, mean_bytes: float | None) -> bool:
    return records is not None and records <= SMALL_BATCH_RECORDS and records * (mean_bytes or 0) <= SMALL_BATCH_BYTES


class _PositionRecorder(StreamingQueryListener):
    """After each committed batch: record the position in Kafka (from a thread of its own,
    so that a broker outage delays the record, never the stream) and keep a progress file."""
    def __init__(self, positions: PositionCommitter, progress_file: Path | None, sizing: Sizing):
        self.positions, self.topic, self.progress_file = positions, positions.topic, progress_file
        self.query_id: str | None = None
        self.sizing = sizing  # the micro-batch cap the stream started with
        # The listener's thread and the main thread (the final progress) both keep the file.
        self._file_lock = threading.Lock()

    def record(self, progress_json: str) -> None:
        progress = json.loads(progress_json)
        if self.query_id is not None and progress.get("id") != self.query_id:
            return
        for source in progress.get("sources", []):
            ends = parse_spark_offsets(source.get("endOffset") or "{}").get(self.topic)
            if ends:
                self.positions.submit(ends)
        if self.progress_file is not None:
            self._keep_progress(progress_json)

    def _keep_progress(self, progress_json: str) -> None:
        """Replace the progress file atomically; a failure is reported, never raised: the file
        is a view for ``loglake status``, and the stream must not fail for it."""
        # One writer at a time in this process, with a temporary name of the process's own
        # (another process writing the same file cannot rename this one's away).
        tmp = self.progress_file.with_name(f"{self.progress_file.name}.{os.getpid()}.tmp")
        with self._file_lock:
            try:
                tmp.write_text(progress_json)
                tmp.replace(self.progress_file)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                print(f"loglake: could not keep the progress file {self.progress_file}: {e}", file=sys.stderr,
                      flush=True)

    def onQueryStarted(self, event) -> None:
        # When the stream (re)started: how long a restart took, for status and the soak.
        if self.progress_file is not None:
            try:
                self.progress_file.with_suffix(".started").write_text(str(event.id))
            except OSError:
                pass

    def onQueryProgress(self, event) -> None:
        try:
            self.record(event.progress.json)
        except Exception as e:  # the stream must not die because a lag tool's view failed
            print(f"loglake: could not record speed position: {e}", file=sys.stderr)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def start_stream(spark: SparkSession, config: Config, ds: Dataset, *, available_now: bool = False,
                 topic: str | None = None, progress_file: Path | None = None,
                 lease: StreamLease | None = None) -> tuple[StreamingQuery, _PositionRecorder]:
    """Start the speed stream of ``ds``; returns the query and its position recorder. ``lease``:
    the stream's (``run_speed``); without one every micro-batch asks Delta to check its transaction."""
    topic = topic or ds.topic
    checkpoint = config.checkpoint_path(ds)
    # Where the stream starts, read once: the log's bounds (also the sizing's below), the ledger,
    # the checkpoint's position and, without one, what the tables landed.
    start = read_start(spark, config, ds, topic)
    if topic == ds.topic and check_gaps(ds, start) and not start.fresh:
        set_aside(spark, checkpoint)  # its position lies in the accepted gap: resume after it
        start = read_start(spark, config, ds, topic)
    # A registry format's subject is followed while data flows: its fields read now, and again
    # before each micro-batch when the subject gained a version (loglake.schemaregistry.resolve).
    follower = Follower(config, ds) if ds.in_registry else None
    if follower is not None:
        ds, _ = follower.current()  # a version refused as the tables' schema is said
    # The schema version in force (a new one recorded when the conf gained a field since) and
    # the stream's own tables evolved to it, before the first micro-batch.
    schema_version = evolution.prepare(spark, config, ds, ("speed", "latest"))
    now = {"ds": ds, "schema_version": schema_version, "last": None}  # last: the previous micro-batch's records
    speed = config.profile.speed
    # Quarantine rows are appended only by batches that have some: the table exists from
    # the start all the same, for queries, the audit and the status page.
    delta_io.create_if_missing(validation.empty_quarantine(spark), config.table_path(ds, "quarantine"), ds.stats_columns,
                               delta_io.APPENDED_BY_DELTA_RS, config.object_store)
    reader = spark.readStream.format("kafka").options(**source_options(config, topic))
    reader = reader.option("startingOffsets", resume_offsets(start) if start.fresh else "earliest")
    # The records cap of a micro-batch, from the byte budget and the topic's record size now.
    sizing = size_micro_batches(config, topic, start.bounds)
    print(f"loglake: speed {ds.name}: {sizing.describe()}", file=sys.stderr, flush=True)
    reader = reader.option("maxOffsetsPerTrigger", str(sizing.max_offsets))
    source = reader.load()
    if ds.kind == "events":
        # A small micro-batch's valid rows are appended by delta-rs (loglake.speed.writer): the
        # speed table is made now, as for the quarantine, with Spark's checkpoint interval.
        empty = validation.valid_frame(spark.createDataFrame([], source.schema), ds)
        delta_io.create_if_missing(empty, config.table_path(ds, "speed"), ds.stats_columns,
                                   delta_io.APPENDED_BY_DELTA_RS, config.object_store)

    stream_id: dict[str, str] = {}  # the checkpoint's own id, read at the query's first micro-batch
    recorder = _PositionRecorder(PositionCommitter(config, ds.consumer_group, topic), progress_file, sizing)
    if not start.fresh and start.held:
        # The position the checkpoint holds, recorded now: the last run may have stopped between
        # a commit and its record, and with nothing new in the log no progress would record it.
        recorder.positions.submit(start.held)

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        first = "id" not in stream_id  # only a query's first micro-batch can replay one that landed
        if first:
            # The checkpoint's own id: a new checkpoint is a new stream with new txn ids.
            meta = spark.read.text(f"{checkpoint}/metadata").first()[0]
            stream_id["id"] = json.loads(meta)["id"]
        if follower is not None:
            resolved, changed = follower.current()
            if changed:  # a new version of the subject: its fields taken (or refused) before this batch
                now["schema_version"] = evolution.prepare(spark, config, resolved, ("speed", "latest"))
                now["ds"] = resolved
        # Unchecked only under a lease no second stream can take while this one lives: a filesystem's
        # flock (leases.StreamLease.checked).
        unchecked = lease is not None and not lease.checked
        # The first micro-batch may be one a previous run planned under another cap: its own
        # span, from the offset log, bounds it; the later ones are planned under this run's cap.
        most = sizing.max_offsets
        if first and not start.fresh:
            most = planned_span(spark, checkpoint, topic, batch_id) or most
        # Small: it cannot be larger (the cap), or the previous micro-batch was (the next one is
        # much like it at a steady rate).
        small = _small(most, sizing.mean_bytes) or _small(now["last"], sizing.mean_bytes)
        t0 = time.monotonic()
        wrote = process_batch(spark, config, now["ds"], batch, speed_txn_app(ds, stream_id["id"]), batch_id,
                              now["schema_version"], topic, replay_possible=first or not unchecked, small=small,
                              max_offsets=most, lease=lease, first=first)
        now["last"] = None if wrote is None else wrote["records"] + sum((wrote["quarantined"] or {}).values())
        if wrote is not None and topic == ds.topic:  # the metrics' series (loglake.observe.series)
            series.record(config, ds.name, "micro_batch", batch=batch_id, seconds=round(time.monotonic() - t0, 3),
                          **wrote)

    writer = source.writeStream.queryName(f"speed_{ds.name}").option("checkpointLocation", checkpoint)
    writer = writer.foreachBatch(on_batch)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=f"{speed.trigger_seconds} seconds")
    spark.streams.addListener(recorder)
    query = writer.start()
    recorder.query_id = str(query.id)
    return query, recorder


def batch_records(progress: dict, topic: str) -> int:
    """Records of a micro-batch, from its offset range (``numInputRows`` counts a record
    once per pass over it, and a batch with quarantined records makes a second pass)."""
    total = 0
    for source in progress.get("sources", []):
        start = parse_spark_offsets(source.get("startOffset") or "{}").get(topic, {})
        end = parse_spark_offsets(source.get("endOffset") or "{}").get(topic, {})
        total += sum(e - start.get(p, 0) for p, e in end.items())
    return total


def stream_summary(ds: Dataset, last: dict | None, seconds: float) -> SpeedSummary:
    """Records and processing time of the batches this run made (JVM start excluded)."""
    batches = (last or {}).get("_batches", {})
    rows = sum(r for r, _ms in batches.values())
    secs = sum(ms for _r, ms in batches.values()) / 1000
    return SpeedSummary(dataset=ds.name, seconds=round(seconds, 3), batches=len(batches), records=rows,
                        processing_seconds=round(secs, 3), records_per_second=round(rows / secs) if secs else None)


def run_speed(spark: SparkSession, config: Config, ds: Dataset, *, available_now: bool = False,
              topic: str | None = None, progress_file: Path | None = None) -> dict | None:
    """Run the speed stream until it ends (available-now) or is stopped; return last progress.
    Holds the dataset's ``stream_lease`` meanwhile (another stream of it: ``StreamRunningError``)."""
    with stream_lease(config, ds.name) as lease:
        try:
            return _run_speed(spark, config, ds, available_now=available_now, topic=topic,
                              progress_file=progress_file, lease=lease)
        except Exception as e:
            fenced = fenced_off(ds, lease, e)
            if fenced is None:
                raise
            raise fenced from None


# Spark's words when a file of the checkpoint that this query was about to create was created by
# another query first (offsets/N, commits/N; on the store: S3ConditionalCheckpointFileManager).
_CHECKPOINT_TAKEN = ("CONCURRENT_STREAM_LOG_UPDATE", "Multiple streaming queries are concurrently using")


def fenced_off(ds: Dataset, lease: StreamLease, error: BaseException) -> StreamRunningError | None:
    """The query stopped because another stream of the dataset took over: its lease was found
    taken before a micro-batch committed (``StreamLease.check``, raised inside the micro-batch
    and so wrapped by Spark), or another stream created a file of the checkpoint first (it planned
    or finished that micro-batch). Said as loglake's own error (transient: the supervisor's next
    start waits for the lease); None for any other failure."""
    if lease.lost is not None:
        return StreamRunningError(ds.name, lease.lost)
    text = str(error)
    if any(marker in text for marker in _CHECKPOINT_TAKEN):
        return StreamRunningError(ds.name, "another stream planned or finished this stream's next micro-batch first "
                                           "(a file of its checkpoint was there before it)")
    return None


def _run_speed(spark: SparkSession, config: Config, ds: Dataset, *, available_now: bool, topic: str | None,
               progress_file: Path | None, lease: StreamLease) -> dict | None:
    run = dict(available_now=available_now, topic=topic, progress_file=progress_file, lease=lease)
    try:
        return _run_query(spark, config, ds, **run)
    except Exception as e:
        if not is_replay_metrics_failure(e):
            raise
    # The query replayed a micro-batch left unrecorded by a crash, committed it, then failed
    # building its progress report: started again, it goes on from the next micro-batch.
    print(f"loglake: speed {ds.name}: the micro-batch replayed after a crash is committed; Spark's Kafka source "
          f"failed to report it (SPARK-55271), starting the stream again", file=sys.stderr, flush=True)
    return _run_query(spark, config, ds, **run)


def is_replay_metrics_failure(e: BaseException) -> bool:
    """Spark 4.1.1's Kafka source (SPARK-55271, docs/stack.md): a query's first micro-batch,
    when it replays one its checkpoint had planned (no ``latestOffset`` call before it), fails
    in ``KafkaMicroBatchStream.metrics`` after its commit was recorded."""
    text = str(e)
    return "Option.get()\" is null" in text and "IterableOps.map" in text


def _run_query(spark: SparkSession, config: Config, ds: Dataset, *, available_now: bool, topic: str | None,
               progress_file: Path | None, lease: StreamLease) -> dict | None:
    query, recorder = start_stream(spark, config, ds, available_now=available_now, topic=topic,
                                   progress_file=progress_file, lease=lease)

    def stop(signum, frame):
        # Not query.stop() here: the handler runs on the main thread, which is inside a Py4J
        # call (awaitTermination); a second call on it fails ("reentrant call").
        threading.Thread(target=query.stop, name="loglake-speed-stop", daemon=True).start()

    if not available_now and threading.current_thread() is threading.main_thread():
        # (The speed application runs each dataset's query on a thread of its own and stops them itself.)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    try:
        try:
            query.awaitTermination()
        finally:
            spark.streams.removeListener(recorder)
        last = query.lastProgress
        if last is None:
            return None
        # Listener events are asynchronous: make sure the final position is recorded.
        last_json = last.json if hasattr(last, "json") else json.dumps(last, default=str)
        recorder.record(last_json)
    finally:
        if not recorder.positions.close():
            print(f"loglake: speed {ds.name}: the final position is not recorded in Kafka yet (it is in the "
                  f"checkpoint; the next run records it)", file=sys.stderr, flush=True)
    return {**json.loads(last_json), "_batches": query_batches(query, topic or ds.topic), "_sizing": recorder.sizing}


def query_batches(query: StreamingQuery, topic: str) -> dict[int, tuple[int, int]]:
    """Batch id → (records of ``topic``, trigger ms) of a query's recent micro-batches that read
    any, from the query's own record."""
    batches = {}
    for p in query.recentProgress:
        p = json.loads(p.json) if hasattr(p, "json") else p
        records = batch_records(p, topic)
        if records:
            batches[p["batchId"]] = (records, p.get("durationMs", {}).get("triggerExecution", 0))
    return batches
