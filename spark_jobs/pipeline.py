"""Write → audit → publish in one process: the batch job, then the quality gate.

What the DAGs run as two Spark tasks (``spark_jobs/batch.py``, ``spark_jobs/quality.py``)
composed for in-process use (tests, benchmarks, notebooks). It sits above the jobs,
which never import one another.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.ledger.planning import Plan
from spark_jobs.batch import run_batch
from spark_jobs.quality import run_quality


def recompute_and_publish(spark: SparkSession, config: Config, ds: Dataset, plan: Plan, run_id: str) -> dict:
    """``run_batch`` then ``run_quality`` on the same plan and run id; the batch summary with
    the quality summary under ``quality``."""
    summary = run_batch(spark, config, ds, plan, run_id)
    return {**summary, "quality": run_quality(spark, config, ds, plan, run_id)}
