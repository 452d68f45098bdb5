"""The quality job: validate and publish what the batch job of a run wrote (``loglake.quality.gate``).

Run under spark-submit after ``spark_jobs/batch.py`` (the DAGs' ``quality`` task,
``loglake batch|backfill``) or by the shared Spark application. Publishing moves the watermark.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.jobs.requests import QualityRequest
from loglake.jobs.summaries import QualitySummary
from loglake.jobs import entry
from loglake.quality.gate import run_quality


def run_job(spark: SparkSession, config: Config, ds: Dataset, request: QualityRequest) -> QualitySummary:
    """Validate and publish what the batch job of ``request.run_id`` wrote."""
    return run_quality(spark, config, ds, request.plan, request.run_id)


def main(argv: list[str] | None = None) -> int:
    return entry.run("quality", argv, run_job)
