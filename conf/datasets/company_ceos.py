"""company_ceos' own code: its transform and its sample events.

``transform``: the speed and batch layers call it on the validated rows (typed fields plus
provenance columns), so both layers hold the same rows. It must be deterministic (re-running
a range yields the same table) and keep the provenance columns. ``sample``: one realistic
record for ``loglake produce company_ceos``.
"""

import random
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_FIRST = ["Ada", "Grace", "Satya", "Lisa", "Jensen", "Mary", "Tim", "Sundar", "Andy", "Safra", "Reed", "Arvind"]
_LAST = ["Lovelace", "Hopper", "Nadella", "Su", "Huang", "Barra", "Cook", "Pichai", "Jassy", "Catz", "Hastings"]


def transform(df: DataFrame) -> DataFrame:
    """Normalise names: trim surrounding whitespace (producers differ in hygiene)."""
    return df.withColumn("company", F.trim("company")).withColumn("ceo", F.trim("ceo"))


def sample(rng: random.Random, now: datetime) -> tuple[str, dict | None]:
    """One change (``loglake produce company_ceos``): key, value; a tombstone (None) for 5 %."""
    n = rng.randint(1, 200)
    cid = f"c{n}"
    if rng.random() < 0.05:
        return cid, None  # tombstone: the company is gone
    return cid, {
        "company_id": cid,
        "company": f"Company {n}",
        "ceo": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
        "since": _iso(now - timedelta(days=rng.randint(0, 3650))),
    }


def _iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
