"""Every Spark job loglake runs, declared once.

A job's work is a module of its component (``module``: ``loglake.batch.job`` ...), whose
``run_job`` the shared Spark application calls and whose ``main`` spark-submit runs through
a few lines under ``spark_jobs/`` (``application``). What the rest of loglake needs to know
of a job is here: its module, whether it writes a dataset's batch-side tables (it then takes
the dataset's writer lease, ``loglake.leases``), whether the shared application runs
it, whether it runs one at a time there, its request's type (``loglake.jobs.requests``) and
its summary's. ``loglake.jobs.launch`` and ``loglake.jobs.shared_app`` send jobs by it,
``loglake.jobs.entry`` and ``loglake.jobs.server`` run them by it, and the layer test
reads it. The two long-lived applications (every stream in one driver; the shared
application) are declared here too (``APPLICATIONS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loglake.core import paths
from loglake.core.errors import JobFailure, ParamError
from loglake.jobs.requests import REQUESTS, JobRequest
from loglake.jobs.summaries import (BatchSummary, JobSummary, MaintenanceSummary, Outcome, QualitySummary,
                                    RebuildSummary, ReplaySummary, SpeedSummary)


@dataclass(frozen=True)
class Job:
    """One Spark job.

    ``module``: where its work is (``run_job``, and ``main`` for spark-submit);
    ``summary``: the type of what it answers with when it succeeds; ``writes``: takes the
    dataset's writer lease while it runs (the speed stream appends beside the writers under a
    stream lease of its own); ``shared``: the shared Spark application runs it (a long-lived
    stream does not); ``gated``: in the shared application, one at a time behind its quality
    gate (Great Expectations keeps one file project under the state directory for every
    dataset). Its request's type is ``request`` (``loglake.jobs.requests``).
    """

    name: str
    module: str
    summary: type[JobSummary]
    writes: bool
    shared: bool
    gated: bool = False
    about: str = ""

    @property
    def request(self) -> type[JobRequest]:
        return REQUESTS[self.name]

    @property
    def application(self) -> Path:
        """The file spark-submit runs."""
        return paths.REPO_ROOT / "spark_jobs" / f"{self.name}.py"

    def parse(self, value: dict[str, Any] | None) -> Outcome | None:
        """The typed answer a JSON object holds: a ``JobFailure`` when it reports an error,
        else this job's summary. None stays None (the job said nothing)."""
        if value is None:
            return None
        return JobFailure.reported(value) or self.summary.from_dict(value)


JOBS: dict[str, Job] = {j.name: j for j in (
    Job("speed", "loglake.speed.job", SpeedSummary, writes=False, shared=False,
        about="the speed layer's stream (or one available-now run)"),
    Job("batch", "loglake.batch.job", BatchSummary, writes=True, shared=True,
        about="recompute exact offset ranges"),
    Job("quality", "loglake.quality.job", QualitySummary, writes=True, shared=True, gated=True,
        about="validate a written range and publish it"),
    Job("maintenance", "loglake.maintenance.job", MaintenanceSummary, writes=True, shared=True,
        about="expire, optimize and vacuum a dataset's tables"),
    Job("rebuild", "loglake.lifecycle.rebuild_job", RebuildSummary, writes=True, shared=True,
        about="rebuild a table from the log"),
    Job("replay", "loglake.lifecycle.replay_job", ReplaySummary, writes=True, shared=True,
        about="re-admit quarantined records the current config accepts"),
)}


def job(name: str) -> Job:
    """The job named ``name``; a ParamError naming the known ones otherwise."""
    try:
        return JOBS[name]
    except KeyError:
        raise ParamError("job", f"{name!r} is not one of {', '.join(JOBS)}") from None


def served() -> tuple[str, ...]:
    """The jobs the shared Spark application runs."""
    return tuple(name for name, j in JOBS.items() if j.shared)


@dataclass(frozen=True)
class Application:
    """A long-lived Spark application: ``spark_jobs/<name>.py`` runs ``module``'s ``main``."""

    name: str
    module: str
    about: str

    @property
    def path(self) -> Path:
        """The file spark-submit runs."""
        return paths.REPO_ROOT / "spark_jobs" / f"{self.name}.py"


APPLICATIONS: dict[str, Application] = {a.name: a for a in (
    Application("speed_app", "loglake.speed.app", "every wanted dataset's speed stream in one driver"),
    Application("server", "loglake.jobs.server", "the shared application: batch-side jobs on request"),
)}
