"""The speed layer: Kafka → parse/validate/transform → Delta, exactly once, per micro-batch.

The stream itself, shared by the speed job (``spark_jobs/speed.py``, under spark-submit:
``loglake speed start|run``), the rebuild job and in-process callers (``run_speed``). Each micro-batch writes valid rows to ``speed.<dataset>`` and the rest to
``quarantine.<dataset>``, both as Delta appends tied to (stream id, batch id): a batch
replayed after a crash is skipped by Delta instead of written twice. Only after the batch
is committed does the stream record its position in the dataset's Kafka consumer group.

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
from loglake.core.errors import DataLossError, StreamRunningError
from loglake.core.offsets import parse_spark_offsets, spark_offsets_json
from loglake.jobs.summaries import SpeedSummary
from loglake.kafka.admin import PositionCommitter, dataset_bounds, list_topics, log_bounds
from loglake.ledger.leases import StreamLease, stream_lease, wait_while_paused
from loglake.ledger.ranges import batch_watermarks, compute_watermarks, ledger_rows
from loglake.ledger.snapshots import speed_txn_app
from loglake.ledger.tables import landed_positions
from loglake.observe import series
from loglake.schemaregistry.resolve import Follower
from loglake.speed.sizing import Sizing, size_micro_batches
from spark_jobs import delta_io, evolution, parse
from spark_jobs.kafka_source import source_options


def process_batch(spark: SparkSession, config: Config, ds: Dataset, batch: DataFrame, app_id: str,
                  batch_id: int, schema_version: int | None = None, topic: str | None = None,
                  replay_possible: bool = True, small: bool = False, max_offsets: int | None = None,
                  lease: StreamLease | None = None) -> dict | None:
    """Write one micro-batch: valid rows, quarantined rows, and (changelog) the latest state.
    Returns what it wrote (``records`` valid, ``quarantined`` per reason code), None for a
    replayed micro-batch whose rows had landed (its first run counted them).

    Events: one pass reads the batch, validates it and appends the valid rows while
    counting the quarantined ones and carrying them to the driver while they are few
    (``parse.counted``); those are then appended to quarantine by delta-rs (a Spark commit
    costs a few hundred milliseconds more). Only beyond that bound does a
    second pass (which re-reads the batch but validates only the quarantined offsets the
    first one noted) append them. No cache: a micro-batch never sits in memory twice. Changelogs
    use the valid rows twice (append, MERGE), so they cache them. A batch replayed after
    a crash whose valid rows had landed skips the count (the append would be skipped, so
    nothing would be counted) and appends its quarantine unless that landed too. Only a
    query's first micro-batch can be such a replay (``replay_possible``; Spark runs each later
    one once, in order, and one query runs per checkpoint: ``run_speed`` holds the dataset's
    ``stream_lease``): the others neither read the tables' logs for it nor ask Delta to check
    their transaction id, which costs a reconstruction of the table's state per commit
    (``delta_io.append_idempotent``) — except on an object store, where the lease is no fence
    and every micro-batch is checked (``leases.StreamLease.checked``; the module's docstring
    says why that is exact). Each commit records (stream, batch) and
    ``schema_version`` (the version of the dataset's schema it validated under). ``lease``: the
    stream's, renewed (or found lost: ``StreamRunningError``) once the batch may commit.
    """
    # A writer whose next commit would fail on any append (a DELETE, a replaceWhere) asks the
    # stream to hold its appends meanwhile (loglake.ledger.leases.appends_paused): hold this batch.
    waited, request = wait_while_paused(config, ds.name)
    if request is not None:
        print(f"loglake: speed {ds.name}: batch {batch_id} held its appends {waited:.1f}s for {request['what']}",
              file=sys.stderr, flush=True)
    if lease is not None:
        lease.check()  # after a wait of any length: a stream whose lease was taken meanwhile stops here
    speed_path, quarantine_path = config.table_path(ds, "speed"), config.table_path(ds, "quarantine")
    # One Spark partition per Kafka partition: more write tasks (and files) than cores, each
    # paying its fixed part, for a ``small`` micro-batch. Coalesced to the cores (no shuffle),
    # it writes fewer files sooner (a big one keeps a task per Kafka partition: there the
    # tasks' fetches overlap the others' work).
    if small:
        batch = batch.coalesce(max(1, spark.sparkContext.defaultParallelism))
    validated = parse.validate(batch, ds)
    meta = None if schema_version is None else {"loglake_schema_version": schema_version}
    if ds.kind == "changelog":
        validated = validated.persist()
    # Delta checks (app_id, batch_id) only where a replay is possible: at a cost (delta_io).
    checked = replay_possible
    wrote = None
    try:
        landed = delta_io.committed_version(speed_path, app_id) if replay_possible else None
        if landed is not None and landed >= batch_id:
            in_quarantine = delta_io.committed_version(quarantine_path, app_id)
            if in_quarantine is None or in_quarantine < batch_id:
                delta_io.append_idempotent(parse.quarantine_rows(validated, "speed"), quarantine_path, app_id,
                                           batch_id, meta, ds.stats_columns)
        else:
            # A micro-batch holds at most ``max_offsets`` offsets (the stream's cap, sized at its
            # start; else speed.max_offsets_per_trigger): note bad ones one by one below the
            # limit, else a window per partition (bounded either way).
            cap = max_offsets if max_offsets is not None else config.profile.speed.max_offsets_per_trigger
            exact = cap <= parse.EXACT_BAD_LIMIT
            observed, observation = parse.counted(validated, partitions=range(ds.partitions), exact=exact)
            delta_io.append_idempotent(parse.apply_transform(parse.valid_rows(observed, ds), ds), speed_path,
                                       app_id, batch_id, meta, ds.stats_columns, checked=checked)
            counts = observation.get
            wrote = {"records": counts["records"], "quarantined": {}}
            if counts["quarantined"]:
                # The few carried rows go in by delta-rs (no Spark job: this commit is a micro-batch's
                # second); more, or no table yet, by Spark.
                carried = parse.carried_arrow(counts, "speed")
                wrote["quarantined"] = parse.reason_counts(counts)
                if carried is None or not delta_io.append_arrow(carried, quarantine_path, app_id, batch_id, meta,
                                                                checked=checked):
                    bad = parse.quarantined(batch, counts, ds, "speed", config, topic or ds.topic)
                    bad, reasons = parse.observe_reasons(bad, counts["codes"])
                    delta_io.append_idempotent(bad, quarantine_path, app_id, batch_id, meta, ds.stats_columns,
                                               checked=checked)
                    if wrote["quarantined"] is None:
                        wrote["quarantined"] = reasons()
        if ds.kind == "changelog":  # from the cache, not through the observation (one action reports it)
            changes = parse.apply_transform(parse.valid_rows(validated, ds), ds)
            delta_io.merge_latest(spark, changes, config.table_path(ds, "latest"), ds.key, app_id, batch_id,
                                  ds.stats_columns, checked=checked)
    finally:
        if ds.kind == "changelog":
            validated.unpersist()
    return wrote


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


# A micro-batch of at most this many records is coalesced to the cores (``process_batch``).
SMALL_BATCH_RECORDS = 10_000


class _PositionRecorder(StreamingQueryListener):
    """After each committed batch: record the position in Kafka (from a thread of its own,
    so that a broker outage delays the record, never the stream) and keep a progress file."""
    def __init__(self, config: Config, ds: Dataset, topic: str, progress_file: Path | None, sizing: Sizing):
        self.config, self.ds, self.topic, self.progress_file = config, ds, topic, progress_file
        self.query_id: str | None = None
        self.positions = PositionCommitter(config, ds.consumer_group, topic)
        self.last_records: int | None = None  # records of the newest micro-batch reported
        self.sizing = sizing  # the micro-batch cap the stream started with
        # The listener's thread and the main thread (the final progress) both keep the file.
        self._file_lock = threading.Lock()

    def record(self, progress_json: str) -> None:
        progress = json.loads(progress_json)
        if self.query_id is not None and progress.get("id") != self.query_id:
            return
        self.last_records = batch_records(progress, self.topic)
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
    # The log's bounds, read once for the checks, the starting offsets and the sizing below.
    bounds = None
    if topic == ds.topic:
        bounds = dataset_bounds(config, ds)
        if check_gaps(spark, config, ds, bounds) and _checkpoint_has_offsets(spark, checkpoint):
            _set_aside(spark, checkpoint)  # its position lies in the accepted gap: resume after it
    # A registry format's subject is followed while data flows: its fields read now, and again
    # before each micro-batch when the subject gained a version (loglake.schemaregistry.resolve).
    follower = Follower(config, ds) if ds.in_registry else None
    if follower is not None:
        ds, _ = follower.current()
        _say_refused(ds)
    # The schema version in force (a new one recorded when the conf gained a field since) and
    # the stream's own tables evolved to it, before the first micro-batch.
    schema_version = evolution.prepare(spark, config, ds, ("speed", "latest"))
    now = {"ds": ds, "schema_version": schema_version}
    speed = config.profile.speed
    fresh = not _checkpoint_has_offsets(spark, checkpoint)
    # Quarantine rows are appended only by batches that have some: the table exists from
    # the start all the same, for queries, the audit and the status page.
    delta_io.create_if_missing(parse.empty_quarantine(spark), config.table_path(ds, "quarantine"), ds.stats_columns,
                               delta_io.APPENDED_BY_DELTA_RS)
    reader = spark.readStream.format("kafka").options(**source_options(config, topic))
    reader = reader.option("startingOffsets", resume_offsets(spark, config, ds, topic, bounds and len(bounds))
                           if fresh else "earliest")
    # The records cap of a micro-batch, from the byte budget and the topic's record size now.
    sizing = size_micro_batches(config, topic, bounds)
    print(f"loglake: speed {ds.name}: {sizing.describe()}", file=sys.stderr, flush=True)
    reader = reader.option("maxOffsetsPerTrigger", str(sizing.max_offsets))
    source = reader.load()

    stream_id: dict[str, str] = {}  # the checkpoint's own id, read at the query's first micro-batch
    recorder = _PositionRecorder(config, ds, topic, progress_file, sizing)
    if not fresh:
        # The position the checkpoint holds, recorded now: the last run may have stopped between
        # a commit and its record, and with nothing new in the log no progress would record it.
        held = checkpoint_position(spark, checkpoint, topic)
        if held:
            recorder.positions.submit(held)

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        first = "id" not in stream_id  # only a query's first micro-batch can replay one that landed
        if first:
            # The checkpoint's own id: a new checkpoint is a new stream with new txn ids.
            meta = spark.read.text(f"{checkpoint}/metadata").first()[0]
            stream_id["id"] = json.loads(meta)["id"]
        if follower is not None:
            resolved, changed = follower.current()
            if changed:  # a new version of the subject: its fields taken (or refused) before this batch
                _say_refused(resolved)
                now["schema_version"] = evolution.prepare(spark, config, resolved, ("speed", "latest"))
                now["ds"] = resolved
        # Small: the previous micro-batch was (the next one is much like it at a steady rate).
        small = recorder.last_records is not None and recorder.last_records <= SMALL_BATCH_RECORDS
        # Unchecked only under a lease no second stream can take while this one lives: a filesystem's
        # flock (leases.StreamLease.checked).
        unchecked = lease is not None and not lease.checked
        # The first micro-batch may be one a previous run planned under another cap: its own
        # span, from the offset log, bounds it; the later ones are planned under this run's cap.
        most = sizing.max_offsets
        if first and not fresh:
            most = planned_span(spark, checkpoint, topic, batch_id) or most
        t0 = time.monotonic()
        wrote = process_batch(spark, config, now["ds"], batch, speed_txn_app(ds, stream_id["id"]), batch_id,
                              now["schema_version"], topic, replay_possible=first or not unchecked, small=small,
                              max_offsets=most, lease=lease)
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


def _say_refused(ds: Dataset) -> None:
    if ds.registry.refused:
        print(f"loglake: speed {ds.name}: {ds.registry.refused}; records written with it are quarantined as "
              "incompatible_schema", file=sys.stderr, flush=True)


def _set_aside(spark: SparkSession, checkpoint: str) -> None:
    """Rename a checkpoint to ``<checkpoint>.before-loss-<time>`` (kept for inspection)."""
    fs, path = _fs(spark, checkpoint)
    target = path(f"{checkpoint}.before-loss-{time.strftime('%Y%m%dT%H%M%S')}")
    fs.rename(path(checkpoint), target)
    print(f"loglake: speed {checkpoint}: position in an accepted loss; checkpoint set aside as {target}; "
          f"resuming after the loss", file=sys.stderr, flush=True)


def _checkpoint_has_offsets(spark: SparkSession, checkpoint: str) -> bool:
    fs, path = _fs(spark, checkpoint)
    return bool(_numbered(fs, path(f"{checkpoint}/offsets")))


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
