"""The job protocol: what a Spark job is asked to do, and the one summary it answers with.

A loglake Spark job (``spark_jobs/<job>.py`` under spark-submit) takes the arguments of a
``JobRequest`` and ends by reporting one summary as a JSON object: on success its typed
summary (``loglake.jobs.summaries``: records, quarantined, seconds, ...), on failure a
``JobFailure`` (``{"error", "error_type", "transient"}``).
It writes that summary to ``--summary-file`` when given, else prints it as one line on
stdout (``SUMMARY_PREFIX`` + JSON). The CLI (``loglake.jobs.launch.run_job``) and the Airflow
operators (``loglake_airflow.operators``) build requests and read summaries only
through this module.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from loglake.core.errors import JobFailure, ParamError
from loglake.jobs.registry import job as registered
from loglake.jobs.summaries import Outcome
from loglake.ledger.planning import Plan

SUMMARY_PREFIX = "loglake-summary: "


@dataclass(frozen=True)
class JobRequest:
    """One run of a Spark job: which job, on which dataset, with what.

    ``plan``: the offset ranges (batch, quality); ``run_id``: recorded in the ledger and
    the record tables (batch, quality, maintenance, rebuild); ``available_now`` and
    ``progress_file``: the speed job; ``layer``: the rebuild job's table; ``reason_code`` and
    ``dry_run``: the replay job's; ``summary_file``: where the summary goes.
    """

    job: str
    dataset: str
    plan: Plan | None = None
    run_id: str | None = None
    available_now: bool = False
    progress_file: str | None = None
    summary_file: str | None = None
    layer: str | None = None  # rebuild: batch | speed | latest
    reason_code: str | None = None  # replay: only the records quarantined for this reason
    dry_run: bool = False  # replay: count, write nothing
    # The OpenLineage run this job runs under, "namespace/job/run-id" (an Airflow task's, from its
    # OpenLineage provider): the job's events name it as their parent (loglake.observe.lineage).
    lineage_parent: str | None = None

    def __post_init__(self) -> None:
        spec = registered(self.job)  # a ParamError for an unknown job
        if spec.needs_plan and self.plan is None:
            raise ParamError("plan", f"the {self.job} job needs a plan")
        if self.plan is not None and self.plan.dataset != self.dataset:
            raise ParamError("plan", f"the plan is for dataset {self.plan.dataset!r}, not {self.dataset!r}")
        if spec.needs_layer and not self.layer:
            raise ParamError("layer", f"the {self.job} job needs a layer (batch, speed, latest)")
        if spec.needs_run_id and not self.run_id:
            raise ParamError("run_id", f"the {self.job} job needs {spec.run_id_is}")

    def argv(self) -> list[str]:
        """The job's command-line arguments (what spark-submit passes after the application)."""
        out = ["--dataset", self.dataset]
        if self.plan is not None:
            out += ["--plan", self.plan.to_json()]
        if self.run_id:
            out += ["--run-id", self.run_id]
        if self.available_now:
            out.append("--available-now")
        if self.progress_file:
            out += ["--progress-file", str(self.progress_file)]
        if self.summary_file:
            out += ["--summary-file", str(self.summary_file)]
        if self.layer:
            out += ["--layer", self.layer]
        if self.reason_code:
            out += ["--reason-code", self.reason_code]
        if self.dry_run:
            out.append("--dry-run")
        if self.lineage_parent:
            out += ["--lineage-parent", self.lineage_parent]
        return out

    def with_summary_file(self, path: str | Path) -> "JobRequest":
        return replace(self, summary_file=str(path))

    @classmethod
    def parse(cls, job: str, argv: list[str]) -> "JobRequest":
        """The request ``argv`` describes (the inverse of ``argv()``); bad arguments raise ParamError."""
        p = _Parser(prog=job, add_help=False)
        p.add_argument("--dataset", required=True)
        p.add_argument("--plan")
        p.add_argument("--run-id")
        p.add_argument("--available-now", action="store_true")
        p.add_argument("--progress-file")
        p.add_argument("--summary-file")
        p.add_argument("--layer")
        p.add_argument("--reason-code")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--lineage-parent")
        args = p.parse_args(list(argv))
        try:
            plan = Plan.from_json(args.plan) if args.plan else None
        except (ValueError, KeyError, TypeError) as e:
            raise ParamError("plan", f"not a plan (loglake.ledger.planning.Plan.to_json): {e}") from None
        return cls(job, args.dataset, plan, args.run_id, args.available_now, args.progress_file, args.summary_file,
                   args.layer, args.reason_code, args.dry_run, args.lineage_parent)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit
        raise ParamError("arguments", f"{self.prog} job: {message}")


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


def arg_of(argv: list[str], flag: str) -> str | None:
    """``flag``'s value in a job's arguments (``--summary-file``, ``--progress-file``), even
    when the rest is malformed."""
    args = list(argv)
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def summary_file_of(argv: list[str]) -> str | None:
    """``--summary-file``'s value in a job's arguments, even when the rest is malformed."""
    return arg_of(argv, "--summary-file")


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
