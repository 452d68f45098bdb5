"""The speed job: the speed layer's stream (``loglake/speed/stream.py``) under spark-submit.

``loglake speed start`` runs it supervised in the background (``loglake.speed.control``),
``loglake speed run --available-now`` once. Offsets Kafka deleted before the stream read
them stop it with a ``DataLossError`` naming them: a one-off run fails with it; the
background stream waits, JVM up, until an operator accepts the loss.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.core.errors import DataLossError
from loglake.jobs.requests import SpeedRequest
from loglake.jobs.summaries import SpeedSummary
from loglake.observe import exporter
from loglake.speed.control import stream_files
from loglake.jobs import entry
from loglake.speed.position import check_gaps, is_data_loss, read_start
from loglake.speed.stream import run_speed, stream_summary

BLOCKED_POLL_SECONDS = 10.0


def blocked_file(config: Config, ds: Dataset) -> Path:
    """Where a stream waiting for an operator to accept a loss says so (``loglake status``)."""
    return stream_files(config.home, ds.name).blocked


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: SpeedRequest,
            stopping: threading.Event | None = None) -> SpeedSummary:
    """The job under spark-submit: run the stream; its summary (records, micro-batches, seconds).

    Offsets Kafka deleted before the stream read them stop it with a ``DataLossError``
    naming them: a one-off (available-now) run fails with it; the background stream waits,
    JVM up, until an operator accepts the loss, then resumes after it by itself, or until
    ``stopping`` is set (the speed application stops this dataset's stream).
    """
    started = time.monotonic()
    last = None
    while True:
        try:
            last = run_speed(spark, config, ds, available_now=request.available_now,
                             progress_file=Path(request.progress_file) if request.progress_file else None)
            break
        except Exception as e:
            if not (isinstance(e, DataLossError) or is_data_loss(e)):
                raise
            try:
                gaps = check_gaps(ds, read_start(spark, config, ds))
            except DataLossError as loss:
                if request.available_now:
                    raise loss from None
                if wait_until_accepted(spark, config, ds, loss, stopping):
                    continue
                break
            if not isinstance(e, DataLossError) and not gaps:
                raise  # Spark saw a loss the tables cannot place: not ours to explain
    return stream_summary(ds, last, time.monotonic() - started)


def wait_until_accepted(spark: SparkSession, config: Config, ds: Dataset, loss: DataLossError,
                        stopping: threading.Event | None = None) -> bool:
    """Block until the loss is recorded as accepted (True) or ``stopping`` is set (False);
    meanwhile ``blocked_file`` says why."""
    path = blocked_file(config, ds)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"error": str(loss), "error_type": "DataLossError",
                                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    print(f"loglake: speed {ds.name} waits: {loss}", file=sys.stderr, flush=True)
    stopping = stopping or threading.Event()
    try:
        while not stopping.wait(BLOCKED_POLL_SECONDS):
            try:
                check_gaps(ds, read_start(spark, config, ds))
                return True
            except DataLossError:
                continue
        return False
    finally:
        path.unlink(missing_ok=True)


class StreamsCollector(Collector):
    """Streams as they run (served on ``metrics.speed_port``): each one's query, last
    micro-batch and restarts. ``running``: dataset → anything with ``session`` and ``starts``
    (the speed application's ``Served``; ``run_alone``'s one stream)."""

    def __init__(self, running: dict):
        self.running = running

    def collect(self):
        active = GaugeMetricFamily("loglake_stream_active", "1 while the dataset's query runs in this driver.",
                                   labels=["dataset"])
        batch = GaugeMetricFamily("loglake_stream_batch_id", "The id of the query's last micro-batch.",
                                  labels=["dataset"])
        rate = GaugeMetricFamily("loglake_stream_input_records_per_second", "Records per second the last "
                                 "micro-batch took in (Spark's progress).", labels=["dataset"])
        starts = CounterMetricFamily("loglake_stream_starts", "Times the dataset's query was started in this "
                                     "application (restarts after a transient failure included).", labels=["dataset"])
        for name, served in sorted(dict(self.running).items()):
            session = served.session
            queries = list(session.streams.active) if session is not None else []
            active.add_metric([name], 1.0 if queries else 0.0)
            starts.add_metric([name], served.starts)
            last = queries[0].lastProgress if queries else None
            progress = json.loads(last.json) if hasattr(last, "json") else last
            if progress:
                batch.add_metric([name], progress.get("batchId", 0))
                rate.add_metric([name], progress.get("inputRowsPerSecond") or 0.0)
        yield from (active, batch, rate, starts)


def run_alone(spark: SparkSession, config: Config, ds: Dataset, request: SpeedRequest) -> SpeedSummary:
    """``run_job`` as a spark-submit of its own (a compose stack's speed container): a background
    stream serves its metrics on ``metrics.speed_port`` while it runs, listed as ``speed-<dataset>``."""
    if request.available_now:
        return run_job(spark, config, ds, request)
    name = f"speed-{ds.name}"
    exporter.serve_process(config, name, config.profile.metrics.speed_port,
                           StreamsCollector({ds.name: SimpleNamespace(session=spark, starts=1)}))
    try:
        return run_job(spark, config, ds, request)
    finally:
        exporter.unregister(config, name)


def main(argv: list[str] | None = None) -> int:
    return entry.run("speed", argv, run_alone)
