"""A job kept alive: ``python -m loglake.jobs.supervisor ARGV...`` runs ``ARGV`` and restarts it
when it dies, with backoff, until SIGTERM (the speed streams, the shared Spark application)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from loglake.jobs.protocol import read_failure
from loglake.jobs.requests import file_of


class Backoff:
    """The wait before a failed run is started again: 1 s, doubling up to 60 s while runs fail
    without doing anything; 1 s again after a run that made progress (``progress_file`` written
    after it started: a committed micro-batch) or lived a minute."""

    def __init__(self, progress_file: str | Path | None):
        self.progress_file = progress_file
        self.next = 1.0
        self._started = self._started_wall = 0.0

    def run_started(self) -> None:
        self._started, self._started_wall = time.monotonic(), time.time()

    def after_failure(self) -> float:
        """The seconds to wait now that the run started last failed."""
        if time.monotonic() - self._started > 60 or self._progressed():
            self.next = 1.0
        wait, self.next = self.next, min(self.next * 2, 60.0)
        return wait

    def _progressed(self) -> bool:
        try:
            return self.progress_file is not None and os.stat(self.progress_file).st_mtime >= self._started_wall
        except OSError:
            return False


def supervise(argv: list[str]) -> int:
    """Run ``argv`` and restart it when it dies, with backoff, until SIGTERM.

    Used for the background speed stream: a crash (OOM, broker restart) costs a restart,
    never data, because the stream resumes from its checkpoint. A job that reported a
    permanent error in its request's ``summary_file`` (a bad pattern, data loss: a restart would
    fail the same way) is not restarted; the summary stays for ``loglake status``.

    The backoff doubles from 1 s to 60 s while the job crashes without doing anything; it
    starts at 1 s again once a run made progress (its ``progress_file`` was written after
    it started: a committed micro-batch) or lived a minute. SIGTERM ends a wait at once.
    """
    summary_file = file_of(argv, "summary_file")
    progress_file = file_of(argv, "progress_file")
    stopping = threading.Event()
    child: subprocess.Popen | None = None

    def on_term(signum, frame):
        stopping.set()
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    backoff = Backoff(progress_file)
    while not stopping.is_set():
        backoff.run_started()
        child = subprocess.Popen(argv)
        code = child.wait()
        if stopping.is_set() or code == 0:
            return 0 if stopping.is_set() else code
        failed = read_failure(summary_file) if summary_file else None
        if failed is not None and not failed.transient:
            print(f"loglake supervisor: stopped by a permanent error, not restarting: {failed}", flush=True)
            return code
        wait = backoff.after_failure()
        print(f"loglake supervisor: {argv[0]} exited with {code}; restarting in {wait:.0f}s", flush=True)
        stopping.wait(wait)
    return 0


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))
