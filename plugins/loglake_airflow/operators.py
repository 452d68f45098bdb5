"""Operators: loglake's Spark jobs under spark-submit, set up exactly as the CLI sets them up."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from loglake_airflow.datasets import table_asset
from loglake_airflow.errors import loglake_errors, summary_error
from loglake_airflow.hooks import LoglakeHook


def with_lineage_parent(config, request, context):
    """``request`` naming this task's OpenLineage run as its parent (the provider's own id of
    it, ``lineage_parent_id``), when the profile emits lineage."""
    if config.profile.lineage is None:
        return request
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id

        return replace(request, lineage_parent=lineage_parent_id(context["ti"]))
    except Exception:  # no provider, or no task instance: the job's events stand alone
        return request


class LoglakeSparkSubmitOperator(SparkSubmitOperator):
    """Run ``spark_jobs/<job>.py``: in the shared Spark application when it runs
    (``loglake.jobs.shared_app``: no JVM to start), else under spark-submit with the application,
    jars, Spark settings and environment that ``loglake.jobs.launch.submit_spec`` gives for the
    current configuration.

    They are resolved when the task runs, not when the DAG file is parsed (the jar list
    is read from the jar cache and the settings from ``conf/``). Settings given to the
    operator win over the spec. ``job_request`` is what the job is asked (a request of
    ``loglake.jobs.requests`` as JSON, as a planning task's XCom holds it): ``job`` runs
    on its options (the quality job on the batch job's request: the same plan and run); it
    reaches spark-submit as ``--request JSON``.

    The job's summary (``loglake.jobs.protocol``: the shared application's answer, or written to a
    summary file this operator names in the request) is the task's return value (XCom), with
    ``submit_seconds``, the wall time of the submission (the job's own ``seconds``, its
    session's ``start_seconds`` and whether it ran in the ``shared_application`` are in
    the summary). For each ``AssetAlias`` outlet, an event is emitted for the batch and
    quarantine tables of the job's dataset. A job whose failure summary says it is not
    transient (its input is invalid, data was lost, the quality gate failed) fails the
    task without retries; a transient one (the broker was unavailable, a Delta conflict
    outlasted the job's own retries, the job died) gets the retries the DAG declares.

    :param job: the job under ``spark_jobs/`` (``batch``)
    :param job_request: its request's options, a JSON object (templated)
    """

    template_fields = (*SparkSubmitOperator.template_fields, "job_request")

    def __init__(self, *, job: str, job_request: Any = None, conn_id: str = "loglake_spark", **kwargs: Any) -> None:
        kwargs.setdefault("name", f"loglake-{job}")
        super().__init__(conn_id=conn_id, **kwargs)
        self.job = job
        self.job_request = job_request

    @loglake_errors
    def execute(self, context) -> dict:
        from loglake.jobs.requests import JobRequest

        config = LoglakeHook().config
        asked = self.job_request
        if isinstance(asked, dict):
            asked = {**asked, "job": self.job}  # the quality job runs on the batch job's request
        request = with_lineage_parent(config, JobRequest.from_dict(asked, self.job), context)
        started = time.monotonic()
        shared = self._in_shared_application(config, request)
        if shared is not None:
            summary = shared
        else:
            summary = self._spark_submit(config, request, context)
        submit_seconds = time.monotonic() - started
        self.log.info("%s %s: %s records, %s quarantined; %s %.1fs, of which the Spark job's own work %ss (the "
                      "rest is %s)", self.job, request.dataset, getattr(summary, "records", "-"),
                      getattr(summary, "quarantined", "-"),
                      "the shared Spark application" if shared is not None else "spark-submit", submit_seconds,
                      summary.seconds, "the request and its session" if shared is not None
                      else "JVM start, session and submit overhead")
        self._emit_table_events(config, context, request.dataset, summary)
        return replace(summary, submit_seconds=round(submit_seconds, 3)).to_dict()

    def _said(self, code: int, reported: dict | None):
        """The job's typed summary; the task's exception when it failed (``summary_error``:
        permanent or worth a retry), or when it ended without a summary."""
        from loglake.jobs.launch import JobOutcome

        outcome = JobOutcome.of(self.job, code, reported)
        if outcome.failure is not None:
            raise summary_error(outcome.failure)
        if not outcome.ok:
            raise AirflowException(f"the {self.job} job ended with exit code {code} and no summary")
        return outcome.summary

    def _in_shared_application(self, config, request):
        """The job's summary from the shared Spark application; None when it does not run
        there (not running, not answering within its start wait, or refused). A task that
        comes while it starts waits for it (``loglake.jobs.shared_app.submit``). A failure fails the
        task like spark-submit's would."""
        from loglake.jobs import shared_app

        if self.job not in shared_app.SERVED:
            return None
        answer = shared_app.submit(config, request, output=self._job_output)
        if answer is None:
            return None
        return self._said(*answer)

    def _job_output(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.log.info("%s", line)

    def _spark_submit(self, config, request, context):
        from loglake.jobs.launch import submit_spec
        from loglake.jobs.protocol import read_failure, read_summary_file

        spec = submit_spec(config, self.job)
        self.application = self.application or spec["application"]
        self.jars = self.jars or spec["jars"]
        self.py_files = self.py_files or spec["py_files"]
        self.conf = {**spec["conf"], **(self.conf or {})}
        self.env_vars = {**spec["env_vars"], **(self.env_vars or {})}

        with tempfile.TemporaryDirectory(prefix="loglake-summary-") as tmp:
            summary_file = Path(tmp) / "summary"
            self.application_args = request.with_summary_file(summary_file).argv()
            try:
                super().execute(context)
            except AirflowException as e:
                # spark-submit's own exception says only its exit code: the job's summary says
                # whether a retry can help.
                failure = read_failure(summary_file)
                error = summary_error(failure) if failure is not None else None
                if isinstance(error, AirflowFailException):
                    raise error from e
                raise
            return self._said(0, read_summary_file(summary_file))

    def _emit_table_events(self, config, context, name: str, summary) -> None:
        aliases = [o for o in self.outlets if isinstance(o, AssetAlias)]
        if not aliases:
            return
        ds = config.dataset(name)
        extra = {k: v for k, v in summary.to_dict().items() if k in ("run_id", "records", "quarantined", "ranges")}
        for alias in aliases:
            for table in (ds.tables.batch, ds.tables.quarantine):
                context["outlet_events"][alias].add(table_asset(table), extra=extra)
