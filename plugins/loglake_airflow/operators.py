"""Operators: loglake's Spark jobs under spark-submit, set up exactly as the CLI sets them up."""

from __future__ import annotations

import time
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from loglake_airflow.datasets import table_asset
from loglake_airflow.hooks import SummarySparkSubmitHook


def arg_value(args: list[str] | None, flag: str) -> str | None:
    """The value after ``flag`` in an argument list (``--dataset NAME``), or None."""
    args = list(args or [])
    return args[args.index(flag) + 1] if flag in args[:-1] else None


class LoglakeSparkSubmitOperator(SparkSubmitOperator):
    """Submit ``spark_jobs/<job>.py`` with the application, jars, Spark settings, driver memory
    and environment that ``loglake.launch.submit_spec`` gives for the current configuration.

    They are resolved when the task runs, not when the DAG file is parsed (the jar list
    is read from the jar cache and the settings from ``conf/``). Arguments given to the
    operator win over the spec; ``application_args`` are the job's own arguments.

    The job's JSON summary line is the task's return value (XCom), with
    ``submit_seconds``, the wall time of spark-submit. For each ``AssetAlias`` outlet,
    an event is emitted for the batch and quarantine tables of the job's ``--dataset``.
    A job that ends with a summary saying ``"retryable": false`` (its input is invalid,
    data was lost, the quality gate failed) fails the task without retries.

    :param job: the job under ``spark_jobs/`` (``batch``)
    """

    def __init__(self, *, job: str, conn_id: str = "loglake_spark", **kwargs: Any) -> None:
        kwargs.setdefault("name", f"loglake-{job}")
        super().__init__(conn_id=conn_id, **kwargs)
        self.job = job

    def execute(self, context) -> dict:
        from loglake.config import load_config
        from loglake.launch import submit_spec

        config = load_config()
        spec = submit_spec(config, self.job)
        self.application = self.application or spec["application"]
        self.jars = self.jars or spec["jars"]
        self.conf = {**spec["conf"], **(self.conf or {})}
        self.env_vars = {**spec["env_vars"], **(self.env_vars or {})}
        self._driver_memory = self._driver_memory or spec["driver_memory"]
        self._spark_binary = self._spark_binary or spec["spark_binary"]

        started = time.monotonic()
        try:
            super().execute(context)
        except AirflowException as e:
            failure = getattr(getattr(self, "_hook", None), "summary", None) or {}
            if failure.get("retryable") is False:  # bad input, data loss, a failed quality gate
                raise AirflowFailException(f"{failure.get('error_type')}: {failure.get('error')}") from e
            raise
        submit_seconds = time.monotonic() - started
        summary = dict(getattr(self._hook, "summary", None) or {})
        app = summary.get("seconds")
        self.log.info("%s %s: %s records, %s quarantined; spark-submit %.1fs, of which the Spark job's own "
                      "work %ss (the rest is JVM start, session and submit overhead)",
                      self.job, arg_value(self.application_args, "--dataset"), summary.get("records"),
                      summary.get("quarantined"), submit_seconds, app)
        self._emit_table_events(config, context, summary)
        return {**summary, "submit_seconds": round(submit_seconds, 3)}

    def _get_hook(self) -> SummarySparkSubmitHook:
        hook = super()._get_hook()
        # Same constructor arguments as the provider builds them; only log handling differs.
        hook.__class__ = SummarySparkSubmitHook
        return hook

    def _emit_table_events(self, config, context, summary: dict) -> None:
        aliases = [o for o in self.outlets if isinstance(o, AssetAlias)]
        name = arg_value(self.application_args, "--dataset")
        if not aliases or name is None:
            return
        ds = config.dataset(name)
        extra = {k: summary[k] for k in ("run_id", "records", "quarantined", "ranges") if k in summary}
        for alias in aliases:
            for table in (ds.tables.batch, ds.tables.quarantine):
                context["outlet_events"][alias].add(table_asset(table), extra=extra)
