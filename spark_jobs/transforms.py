"""Dataset transforms: pure DataFrame → DataFrame functions, one per dataset.

The speed and batch layers call the same function on validated rows (typed fields plus
provenance columns), so the two layers cannot drift in logic. A transform must be
deterministic (re-running a range yields the same table) and keep the provenance columns.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def job_views(df: DataFrame) -> DataFrame:
    """Add the view's date (for partition pruning and daily rollups) and seconds viewed."""
    return df.withColumn("view_date", F.to_date("viewed_at")).withColumn(
        "duration_s", (F.col("duration_ms") / F.lit(1000.0)).cast("double"))


def company_ceos(df: DataFrame) -> DataFrame:
    """Normalise names: trim surrounding whitespace (producers differ in hygiene)."""
    return df.withColumn("company", F.trim("company")).withColumn("ceo", F.trim("ceo"))


def identity(df: DataFrame) -> DataFrame:
    """No change: for datasets that need none."""
    return df
