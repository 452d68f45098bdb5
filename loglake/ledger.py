"""The offsets ledger: which ranges the batch layer has recomputed, and so the watermarks.

A Delta table at ``<lake>/_ledger/offsets`` with one row per range and state: dataset,
topic, partition, start, end, records, quarantined, run_id, state, committed_at. The
batch job appends a range as ``written`` after its rows are committed; the quality gate
appends it again as ``published`` once its suite passed. Only published ranges advance
the watermark. Read here without a JVM (delta-rs), so planning in an Airflow task or
the CLI stays fast.
"""

from __future__ import annotations

from loglake.config import Config, Dataset
from loglake.planning import compute_watermarks

COLUMNS = ["dataset", "topic", "partition", "start", "end", "records", "quarantined", "run_id", "state",
           "committed_at"]


def ledger_path(config: Config) -> str:
    return f"{config.lake_root.rstrip('/')}/_ledger/offsets"


def ledger_rows(config: Config, ds: Dataset) -> list[dict]:
    """The ledger's rows of ``ds`` on its current topic (empty when nothing ran yet)."""
    from loglake.tables import open_table, query

    table = open_table(ledger_path(config))
    if table is None:
        return []
    name = ds.name.replace("'", "''")
    topic = ds.topic.replace("'", "''")
    return query(table, f"SELECT * FROM t WHERE dataset = '{name}' AND topic = '{topic}' "
                        "ORDER BY \"partition\", start, committed_at")


def watermarks(config: Config, ds: Dataset, earliest: dict[int, int] | None = None) -> dict[int, int]:
    """Per partition, the batch watermark W_p (absent where batch has not covered the
    partition from its earliest retained offset). ``earliest`` is read from Kafka unless given,
    and not at all when the ledger holds no rows of the dataset (then there are none)."""
    rows = ledger_rows(config, ds)
    if not rows:
        return {}
    if earliest is None:
        from loglake.kafka_admin import watermarks as log_state
        earliest = {p: lo for p, (lo, _hi) in log_state(config, ds.topic).items()}
    return compute_watermarks(rows, earliest)
