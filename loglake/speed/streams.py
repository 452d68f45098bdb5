"""The speed layer's streams as background processes: start, stop, state, one-off runs.

Each dataset's stream is ``spark_jobs/speed.py`` under spark-submit, kept alive by
``loglake.jobs.supervisor.supervise`` (restarts with backoff; the checkpoint makes a restart
cost time, never data), with its pid and log under the state directory and its latest
progress in ``run/speed-<dataset>.progress.json``. Used by ``loglake speed``, ``loglake
up|down|status`` and the demo.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from loglake.core.errors import JobFailure
from loglake.core.config import Config, Dataset
from loglake.core.processes import Managed, wait_for
from loglake.jobs.launch import JobOutcome, job_env, run_job, spark_submit
from loglake.jobs.protocol import JobRequest, read_failure


@dataclass(frozen=True)
class SpeedStream:
    """The background speed stream of one dataset."""

    config: Config
    ds: Dataset

    @property
    def process(self) -> Managed:
        return Managed(self.config.home, f"speed-{self.ds.name}")

    @property
    def progress_file(self) -> Path:
        return self.config.home / "run" / f"speed-{self.ds.name}.progress.json"

    @property
    def summary_file(self) -> Path:
        """Where the background stream's job reports how it ended (see ``failure``)."""
        return self.config.home / "run" / f"speed-{self.ds.name}.summary"

    def request(self, available_now: bool) -> JobRequest:
        return JobRequest("speed", self.ds.name, available_now=available_now, progress_file=str(self.progress_file))

    def blocked(self) -> dict | None:
        """Why the running stream waits (offsets Kafka lost, not yet accepted), or None."""
        try:
            return json.loads((self.config.home / "run" / f"speed-{self.ds.name}.blocked.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def failure(self) -> JobFailure | None:
        """How the stream stopped when a permanent error stopped it (the supervisor does not
        restart those: a bad pattern, data loss); else None."""
        if self.pid():
            return None
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
        return self.process.pid()

    def start(self) -> tuple[int, bool]:
        """Start the supervised stream unless it runs; (pid, whether it was started now)."""
        running = self.pid()
        if running:
            return running, False
        self.progress_file.parent.mkdir(parents=True, exist_ok=True)
        self.summary_file.unlink(missing_ok=True)
        request = self.request(False).with_summary_file(self.summary_file)
        cmd = [sys.executable, "-m", "loglake.jobs.supervisor", *spark_submit(self.config, request)]
        return self.process.start(cmd, env=job_env(self.config)), True

    def stop(self) -> bool:
        """Stop the stream's whole process group; whether it was running."""
        return self.process.stop()

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


def orphans(config: Config) -> list[Managed]:
    """Speed streams still running for datasets no longer in conf/ (their file was removed)."""
    known = {f"speed-{n}" for n in config.datasets}
    found = [Managed(config.home, f.stem) for f in sorted((config.home / "run").glob("speed-*.pid"))]
    return [m for m in found if m.name not in known and m.pid()]
