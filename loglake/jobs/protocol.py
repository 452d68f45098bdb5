"""The job protocol: what a Spark job is asked to do, and the one summary it answers with.

A loglake Spark job (``spark_jobs/<job>.py`` under spark-submit) is asked by its typed
request (``loglake.jobs.requests``) and ends by reporting one summary as a JSON object: on
success its typed summary (``loglake.jobs.summaries``: records, quarantined, seconds, ...),
on failure a ``JobFailure`` (``{"error", "error_type", "transient"}``).
It writes that summary to the request's ``summary_file`` when given, else prints it as one
line on stdout (``SUMMARY_PREFIX`` + JSON). The CLI (``loglake.jobs.launch.run_job``) and the
Airflow operators (``loglake_airflow.operators``) read summaries only through this module.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from loglake.core.errors import JobFailure
from loglake.jobs.summaries import Outcome

SUMMARY_PREFIX = "loglake-summary: "


def summary_line(outcome: Outcome) -> str:
    return SUMMARY_PREFIX + json.dumps(outcome.to_dict(), default=str, sort_keys=True)


def report(outcome: Outcome, summary_file: str | None) -> None:
    """Hand the summary (or the failure) over: to ``summary_file`` (the request's), else as
    one line on stdout."""
    line = summary_line(outcome)
    if summary_file:
        path = Path(summary_file)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(path)
    else:
        print(line, flush=True)


def read_summary(text: str | None) -> dict | None:
    """The summary in ``text`` (a summary file's content or a job's output), or None.

    Only a line that starts with ``SUMMARY_PREFIX`` and holds a JSON object counts; the
    last one wins.
    """
    found = None
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith(SUMMARY_PREFIX):
            continue
        try:
            value = json.loads(line[len(SUMMARY_PREFIX):])
        except ValueError:
            continue
        if isinstance(value, dict):
            found = value
    return found


def read_summary_file(path: str | Path) -> dict | None:
    try:
        return read_summary(Path(path).read_text())
    except FileNotFoundError:
        return None


def read_failure(path: str | Path) -> JobFailure | None:
    """The failure a job reported in its summary file, if it reported one."""
    return JobFailure.reported(read_summary_file(path))


class Phases:
    """Seconds per named phase of a job, for its summary (``phases``): ``with phases("write"):``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - t0, 3)
