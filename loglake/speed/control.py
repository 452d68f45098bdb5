"""The speed layer's streams as background processes: start, stop, state, one-off runs.

The background streams of every dataset run in one Spark application, ``spark_jobs/speed_app.py``
(one driver JVM for them all), kept alive by ``loglake.jobs.supervisor.supervise`` (restarts with
backoff; the checkpoints make a restart cost time, never data) as the managed process ``speed``.
Which datasets it streams is ``run/speed.wanted.json``: ``start`` adds a dataset (and starts the
application if it does not run), ``stop`` takes it out (and stops the application with the
last). Each dataset keeps files of its own under ``run/``: its latest progress
(``speed-<dataset>.progress.json``), how its query last ended (``.summary``), why it waits
(``.blocked.json``), and while its query runs, ``.serving``. Used by ``loglake speed``,
``loglake up|down|status`` and the demo. ``run_available_now`` runs one dataset's speed job alone
under spark-submit (``spark_jobs/speed.py``), as a compose stack's speed container does.
"""

from __future__ import annotations

import fcntl
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from loglake.core.config import Config, Dataset
from loglake.core.errors import JobFailure
from loglake.core.processes import Managed, wait_for
from loglake.jobs.launch import JobOutcome, job_env, run_job, submit_command
from loglake.jobs.protocol import read_failure
from loglake.jobs.registry import APPLICATIONS
from loglake.jobs.requests import SpeedRequest

APPLICATION = "speed"  # the managed process of the speed application
STOP_WAIT_SECONDS = 60.0  # how long `stop` waits for one dataset's query to end in the running application


@dataclass(frozen=True)
class StreamFiles:
    """A dataset's stream's files under the state directory's ``run/``."""

    progress: Path
    summary: Path
    blocked: Path
    serving: Path


def stream_files(home: Path, name: str) -> StreamFiles:
    run = Path(home) / "run"
    return StreamFiles(run / f"speed-{name}.progress.json", run / f"speed-{name}.summary",
                       run / f"speed-{name}.blocked.json", run / f"speed-{name}.serving")


def application(config: Config) -> Managed:
    """The speed application's managed process (``speed``: its pid, its log)."""
    return Managed(config.home, APPLICATION)


def wanted_file(home: Path) -> Path:
    return Path(home) / "run" / "speed.wanted.json"


def read_wanted(path: Path) -> list[str]:
    """The datasets the speed application should stream (none when the file is missing or torn)."""
    try:
        names = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


@contextmanager
def wanted_datasets(home: Path, write: bool = True):
    """The wanted list, under a lock (a file beside it) for the block; changed in place inside
    the block, and written back when it ends (``write``)."""
    path = wanted_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        names = read_wanted(path)
        yield names
        if write:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(sorted(set(names))))
            tmp.replace(path)


def start_application(config: Config) -> int:
    """Start the speed application unless it runs; its pid."""
    app = application(config)
    pid = app.pid()
    if pid:
        return pid
    cmd = [sys.executable, "-m", "loglake.jobs.supervisor",
           *submit_command(config, str(APPLICATIONS["speed_app"].path), [], "loglake-speed")]
    return app.start(cmd, env=job_env(config))


@dataclass(frozen=True)
class SpeedStream:
    """The background speed stream of one dataset."""

    config: Config
    ds: Dataset

    @property
    def process(self) -> Managed:
        """The speed application, which runs this stream (and the other datasets')."""
        return application(self.config)

    @property
    def files(self) -> StreamFiles:
        return stream_files(self.config.home, self.ds.name)

    @property
    def progress_file(self) -> Path:
        return self.files.progress

    @property
    def summary_file(self) -> Path:
        """Where the stream reports how it ended (see ``failure``)."""
        return self.files.summary

    def request(self, available_now: bool) -> SpeedRequest:
        self.progress_file.parent.mkdir(parents=True, exist_ok=True)
        return SpeedRequest(self.ds.name, available_now=available_now, progress_file=str(self.progress_file))

    def blocked(self) -> dict | None:
        """Why the running stream waits (offsets Kafka lost, not yet accepted), or None."""
        try:
            return json.loads(self.files.blocked.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def failure(self) -> JobFailure | None:
        """How the stream stopped when a permanent error stopped it (the application does not
        restart those: a bad pattern, a refused schema change); else None."""
        failed = read_failure(self.summary_file)
        return failed if failed is not None and not failed.transient else None

    def state(self) -> str:
        """``running (pid N)``, ``stopped``, or ``stopped by a permanent error: ...``."""
        pid = self.pid()
        if pid:
            blocked = self.blocked()
            return f"running (pid {pid})" + (f", WAITING: {blocked['error']}" if blocked else "")
        failed = self.failure()
        if failed:
            return (f"stopped by a permanent error (not restarted): {failed.error_type}: "
                    f"{failed.error.splitlines()[0]}")
        return "stopped"

    def pid(self) -> int | None:
        """The speed application's pid while it streams this dataset: it runs, the dataset is
        wanted, and no permanent error stopped it."""
        pid = self.process.pid()
        if not pid or self.ds.name not in read_wanted(wanted_file(self.config.home)):
            return None
        return None if self.failure() else pid

    def start(self) -> tuple[int, bool]:
        """Stream this dataset in the speed application (started now if it does not run) unless
        it streams it; (the application's pid, whether this stream was started now)."""
        running = self.pid()
        if running:
            return running, False
        self.progress_file.parent.mkdir(parents=True, exist_ok=True)
        self.summary_file.unlink(missing_ok=True)
        with wanted_datasets(self.config.home) as names:
            names.append(self.ds.name)
        return start_application(self.config), True

    def stop(self) -> bool:
        """Stop this dataset's stream (the application too, when it was its last); whether it ran."""
        was = self.pid() is not None
        if not forget(self.config, [self.ds.name]) and self.process.pid():
            # Marked serving (before the application read the list without it): wait for its query to end.
            serving = self.files.serving
            wait_for(lambda: not serving.exists() or not self.process.pid(), STOP_WAIT_SECONDS,
                     f"speed {self.ds.name} to stop in the speed application", log=self.process)
        return was

    def wait_first_batch(self, timeout: float) -> None:
        """Wait until the stream reported a micro-batch (its progress file exists)."""
        wait_for(self.progress_file.exists, timeout, f"speed {self.ds.name} first batch", log=self.process)

    def progress(self) -> dict | None:
        """The stream's latest micro-batch progress (Spark's StreamingQueryProgress as JSON)."""
        try:
            return json.loads(self.progress_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def run_available_now(self) -> JobOutcome:
        """Process what the topic holds now under spark-submit, then return (the stream's own checkpoint)."""
        return run_job(self.config, self.request(True))


def streams(config: Config, name: str | None = None) -> list[SpeedStream]:
    """The stream of dataset ``name``, or of every dataset."""
    datasets = [config.dataset(name)] if name else list(config.datasets.values())
    return [SpeedStream(config, ds) for ds in datasets]


def orphans(config: Config) -> list[str]:
    """Datasets the speed application is asked to stream that are no longer in conf/ (their
    file was removed)."""
    return [n for n in read_wanted(wanted_file(config.home)) if n not in config.datasets]


def forget(config: Config, names: list[str]) -> bool:
    """Take ``names`` out of the wanted list; the application stops when nothing else is wanted
    (whether it did)."""
    with wanted_datasets(config.home) as wanted:
        wanted[:] = [n for n in wanted if n not in names]
        last = not wanted
    if last:
        application(config).stop()
    return last
