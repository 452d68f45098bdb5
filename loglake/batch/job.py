"""The batch job: recompute a plan's exact offset ranges (``loglake.batch.recompute``).

Run under spark-submit (``loglake batch|backfill`` and the Airflow DAGs build the command)
or by the shared Spark application. Its ranges are *written*; the quality job publishes them.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.jobs.requests import BatchRequest
from loglake.jobs.summaries import BatchSummary
from loglake.jobs import entry
from loglake.batch.recompute import run_batch


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: BatchRequest) -> BatchSummary:
    """Recompute the request's plan."""
    return run_batch(spark, config, ds, request.plan, request.run_id)


def main(argv: list[str] | None = None) -> int:
    return entry.run("batch", argv, run_job)
