"""job_views' own code: its transform and its sample events.

``transform``: the speed and batch layers call it on the validated rows (typed fields plus
provenance columns), so both layers hold the same rows. It must be deterministic (re-running
a range yields the same table) and keep the provenance columns. ``sample``: one realistic
record for ``loglake produce job_views``.
"""

import random
import uuid
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_SOURCES_WEIGHTED = (["search"] * 50 + ["recommendation"] * 25 + ["email"] * 10
                     + ["company_page"] * 10 + ["direct"] * 5)


def transform(df: DataFrame) -> DataFrame:
    """Add the view's date (for partition pruning and daily rollups) and seconds viewed."""
    return df.withColumn("view_date", F.to_date("viewed_at")).withColumn(
        "duration_s", (F.col("duration_ms") / F.lit(1000.0)).cast("double"))


def sample(rng: random.Random, now: datetime) -> tuple[str, dict]:
    """One view (``loglake produce job_views``): key, value."""
    user = int(rng.paretovariate(1.2) * 10) % 50_000 + 1  # a few heavy users, a long tail
    value = {
        "view_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "user_id": user,
        "job_id": rng.randint(1, 200_000),
        "viewed_at": _iso(now - timedelta(milliseconds=rng.randint(0, 5_000))),
        "source": rng.choice(_SOURCES_WEIGHTED),
        "duration_ms": _duration_ms(rng),
    }
    return str(user), value


def _duration_ms(rng: random.Random) -> int:
    """Most views last seconds to minutes; about one in 500 is a tab left open for 10 minutes to an
    hour (the suite's ``warn`` expectation flags those: the demo's data always has some)."""
    if rng.random() < 0.002:
        return rng.randint(600_001, 3_600_000)
    return min(int(rng.lognormvariate(9.5, 1.0)), 86_400_000)


def _iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
