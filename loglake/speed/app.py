"""The speed application: the speed streams of every dataset ``loglake speed start`` asked for,
in one Spark application (one driver JVM and one Python process for them all, not one each).

``loglake.speed.control`` keeps the names of the datasets that should stream in a file
(``wanted_datasets``); the application reads it every second and starts or stops each
dataset's query to match. Each dataset runs the speed job's own code (``loglake.speed.job.run_job``,
through ``loglake.jobs.entry.execute``: its configuration and schema checked as the job checks
them) on a thread of its own, with a Spark session of its own (``SparkSession.newSession``:
its SQL settings, its listeners and its Delta commit metadata stay its own; the SparkContext,
the JVM and Delta's caches are shared, as in the shared Spark application of the batch side).
A dataset's error stops only that dataset:

- a permanent one (a bad pattern, a schema change refused) is written to the dataset's summary
  file, and the dataset stays stopped until it is started again (``loglake status`` says why);
- a transient one restarts that dataset's query after a backoff, 1 s doubling to 60 s while it
  fails without committing a micro-batch (``loglake.jobs.supervisor.Backoff``, as the supervisor restarts a job).

The application itself runs under ``loglake.jobs.supervisor``: when its JVM dies, every query
starts again from its checkpoint. While a dataset's query runs, ``serving_file`` holds the
application's pid. SIGTERM stops every query, then the session.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from loglake.core.config import load_config
from loglake.jobs.protocol import read_failure, report
from loglake.jobs.requests import SpeedRequest
from loglake.jobs.session import get_spark
from loglake.jobs.supervisor import Backoff
from loglake.observe import exporter
from loglake.speed.control import stream_files, wanted_datasets
from loglake.jobs import entry
from loglake.speed import job as speed

POLL_SECONDS = 1.0


class Served:
    """One dataset's stream in the application: a thread running the speed job until it is
    stopped or fails permanently."""

    def __init__(self, spark: SparkSession, home: Path, name: str):
        self.spark, self.name = spark, name
        self.files = stream_files(home, name)
        self.stopping = threading.Event()
        self.session: SparkSession | None = None
        self.starts = 0
        self.thread = threading.Thread(target=self._serve, name=f"loglake-speed-{name}", daemon=True)

    def start(self) -> None:
        """Mark the dataset serving (``SpeedStream.stop`` waits for the mark to go), then run it."""
        self.files.serving.write_text(str(os.getpid()))
        self.thread.start()

    def stop(self) -> None:
        """Ask the query to stop (again: it may have started since the last call)."""
        self.stopping.set()
        session = self.session
        if session is not None:
            for query in session.streams.active:
                query.stop()

    def _run_job(self, spark, config, ds, request):
        return speed.run_job(spark, config, ds, request, stopping=self.stopping)

    @contextmanager
    def _own_session(self, config, name: str):
        self.session = self.spark.newSession()
        yield self.session, 0.0, False

    def _serve(self) -> None:
        files = self.files
        request = SpeedRequest(self.name, progress_file=str(files.progress))
        backoff = Backoff(files.progress)
        try:
            while not self.stopping.is_set():
                backoff.run_started()
                self.starts += 1
                try:
                    report(entry.execute(request, self._run_job, self._own_session), str(files.summary))
                    return
                except Exception as e:
                    failure, understood = entry.as_failure(e)  # said on stderr (a traceback if not understood)
                    if not understood:
                        traceback.print_exc()
                    report(failure, str(files.summary))
                if self.stopping.is_set():
                    return
                if not failure.transient:
                    print(f"loglake: speed {self.name}: stopped by that permanent error, not restarting",
                          file=sys.stderr, flush=True)
                    return
                wait = backoff.after_failure()
                print(f"loglake: speed {self.name}: failed ({failure.error_type}); restarting in {wait:.0f}s",
                      file=sys.stderr, flush=True)
                self.stopping.wait(wait)
        finally:
            files.serving.unlink(missing_ok=True)


def serve(spark: SparkSession, home: Path, config=None) -> int:
    """Keep the running streams those ``wanted_datasets`` names, until SIGTERM or until nothing
    is wanted and nothing runs; ``config``: serve their metrics (``metrics.speed_port``)."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.set())
    for stale in (home / "run").glob("speed-*.serving"):  # a killed application's
        stale.unlink(missing_ok=True)
    running: dict[str, Served] = {}
    if config is not None:
        exporter.serve_process(config, "speed", config.profile.metrics.speed_port, speed.StreamsCollector(running))
    while not stopping.is_set():
        # Under the list's lock: `SpeedStream.stop` then either sees a dataset's query marked
        # serving (and waits for it to end) or this reads the list without it.
        with wanted_datasets(home, write=False) as names:
            wanted = set(names)
            for name, served in list(running.items()):
                if not served.thread.is_alive():
                    del running[name]
            for name in sorted(wanted - set(running)):
                failed = read_failure(stream_files(home, name).summary)
                if failed is None or failed.transient:  # a permanent error waits for `loglake speed start`
                    running[name] = Served(spark, home, name)
                    running[name].start()
        if not wanted and not running:
            return 0
        for name in set(running) - wanted:
            running[name].stop()  # again each round: its query may have started since
        stopping.wait(POLL_SECONDS)
    for served in running.values():
        served.stop()
    for served in running.values():
        served.thread.join(60)
    return 0


def main() -> int:
    config = load_config()
    spark = get_spark(config, "loglake-speed")
    try:
        return serve(spark, config.home, config)
    finally:
        exporter.unregister(config, "speed")
        spark.stop()
