"""Transforms for tests: a changed transform makes a recomputed range differ from what is served."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from loglake.core import paths
from loglake.core.config import load_dataset

job_views = load_dataset(paths.REPO_ROOT / "conf" / "datasets" / "job_views.yaml").load_transform()


def job_views_tenfold(df: DataFrame) -> DataFrame:
    """``job_views`` with durations ten times too large (a transform bug, say)."""
    return job_views(df.withColumn("duration_ms", F.col("duration_ms") * F.lit(10)))
