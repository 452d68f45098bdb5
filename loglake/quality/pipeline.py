"""Write → audit → publish in one process: the batch job, then the quality gate.

What the DAGs run as two Spark jobs (``spark_jobs/batch.py``, ``spark_jobs/quality.py``)
composed in one process: the rebuild and replay jobs recompute this way, and so can tests,
benchmarks and notebooks. It imports the work (``recompute``, ``gate``), not the jobs,
which never import one another.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.jobs.summaries import BatchSummary
from loglake.core.plans import Plan
from loglake.quality.gate import run_quality
from loglake.batch.recompute import run_batch


def recompute_and_publish(spark: SparkSession, config: Config, ds: Dataset, plan: Plan, run_id: str) -> BatchSummary:
    """``run_batch`` then ``run_quality`` on the same plan and run id; the batch summary with
    the quality summary under ``quality``."""
    summary = run_batch(spark, config, ds, plan, run_id)
    return replace(summary, quality=run_quality(spark, config, ds, plan, run_id))
