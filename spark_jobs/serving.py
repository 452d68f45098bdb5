"""The serving view and SQL over every table: batch below the watermark, speed above it.

Per partition p with batch watermark W_p, the serving view of an events dataset is the
batch rows with ``_offset < W_p`` plus the speed rows with ``_offset >= W_p``: disjoint
by construction, so counts and sums over it are exact. For a changelog dataset it is the
batch latest state (as of W_p) with the speed changes at or above W_p folded on top:
newest offset per key wins, tombstones delete.
"""

from __future__ import annotations

import re
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession

from loglake.config import Config, Dataset
from loglake.contracts import LEDGER
from loglake.errors import ConfigError
from loglake.kafka_admin import log_bounds
from loglake.ledger import compute_watermarks, ledger_path
from loglake.planning import parse_timestamp
from loglake.tables import open_table
from spark_jobs.delta_io import table_exists
from spark_jobs.predicates import below_watermark

_VERSION = re.compile(r"^\d+$")


def _layers_union(batch: str | None, speed: str | None, watermarks: Mapping[int, int],
                  batch_cols: str, speed_cols: str) -> str:
    """Batch rows below the watermark UNION ALL speed rows at or above it (either may be absent)."""
    below = below_watermark(watermarks)
    parts = []
    if batch:
        parts.append(f"SELECT {batch_cols} FROM {batch} WHERE {below}")
    if speed:
        parts.append(f"SELECT {speed_cols} FROM {speed} WHERE NOT ({below})")
    return " UNION ALL ".join(parts)


def _quoted(columns: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns)


def events_view_sql(batch: str | None, speed: str | None, watermarks: Mapping[int, int],
                    columns: list[str]) -> str:
    cols = _quoted(columns)
    return _layers_union(batch, speed, watermarks, cols, cols)


def changelog_view_sql(batch: str | None, speed: str | None, watermarks: Mapping[int, int],
                       key: str, columns: list[str]) -> str:
    cols = _quoted(columns)
    union = _layers_union(batch, speed, watermarks, f"{cols}, false AS _deleted", f"{cols}, _deleted")
    return (f"SELECT {cols} FROM (SELECT *, row_number() OVER (PARTITION BY `{key}` "
            f"ORDER BY _offset DESC, _partition DESC) AS _rank FROM ({union})) WHERE _rank = 1 AND NOT _deleted")


def version_at(path: str, timestamp_ms: int) -> int | None:
    """The table's version as of ``timestamp_ms`` (None if it did not exist yet).

    Unlike Delta's ``TIMESTAMP AS OF``, a time after the last commit is fine: the table
    then was what its last commit made it.
    """
    table = open_table(path)
    if table is None:
        return None
    versions = [h["version"] for h in table.history() if h.get("timestamp", 0) <= timestamp_ms]
    return max(versions) if versions else None


def _as_of_clause(path: str, as_of: str | None) -> str | None:
    """``VERSION AS OF n`` for ``as_of``; None when the table did not exist at that time."""
    if as_of is None:
        return ""
    if _VERSION.match(as_of):
        return f" VERSION AS OF {int(as_of)}"
    version = version_at(path, parse_timestamp(as_of, "--as-of"))
    return None if version is None else f" VERSION AS OF {version}"


def read_watermarks(spark: SparkSession, config: Config, ds: Dataset, as_of: str | None = None) -> dict[int, int]:
    """Watermarks from the ledger (as of a timestamp, for a consistent time-travel view)."""
    path = ledger_path(config)
    clause = _as_of_clause(path, as_of) if table_exists(spark, path) else None
    if clause is None:
        return {}
    columns = ", ".join(f"`{c}`" for c in LEDGER.contract.names)
    sql = f"SELECT {columns} FROM delta.`{path}`{clause} WHERE dataset = '{ds.name}' AND topic = '{ds.topic}'"
    earliest = {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}
    return compute_watermarks([r.asDict() for r in spark.sql(sql).collect()], earliest)


def register_tables(spark: SparkSession, config: Config, as_of: str | None = None) -> list[str]:
    """Register ``speed.*``, ``batch.*``, ``quarantine.*`` and each dataset's serving view.

    ``as_of``: a Delta version (each raw table at that version; serving views need a
    consistent snapshot, so they are registered only for a timestamp) or a timestamp
    (every table and the ledger as of then). Returns the names registered.
    """
    names = []
    for schema in ("speed", "batch", "quarantine"):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
    for ds in config.datasets.values():
        present = {}
        for layer in ("speed", "batch", "quarantine", "latest"):
            name = getattr(ds.tables, layer)
            if name is None:
                continue
            path = config.table_path(ds, layer)
            if not table_exists(spark, path):
                continue
            clause = _as_of_clause(path, as_of)
            if clause is None:  # the table did not exist yet at that time
                continue
            spark.sql(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM delta.`{path}`{clause}")
            present[layer] = name
            names.append(name)
        if as_of is not None and _VERSION.match(as_of):
            continue
        if "speed" not in present and "batch" not in present:
            continue
        marks = read_watermarks(spark, config, ds, as_of)
        source = present.get("batch") or present["speed"]
        columns = [c for c in spark.table(source).columns if c != "_deleted"]
        if ds.kind == "changelog":
            sql = changelog_view_sql(present.get("batch"), present.get("speed"), marks, ds.key, columns)
        else:
            sql = events_view_sql(present.get("batch"), present.get("speed"), marks, columns)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW `{ds.name}` AS {sql}")
        names.append(ds.name)
    return names


def serving_view(spark: SparkSession, config: Config, ds: Dataset | str, as_of: str | None = None) -> DataFrame:
    """The serving view of one dataset as a DataFrame."""
    ds = config.dataset(ds) if isinstance(ds, str) else ds
    names = register_tables(spark, config, as_of)
    if ds.name not in names:
        raise ConfigError(f"dataset {ds.name} has no speed or batch table yet (run the speed layer or a batch)",
                          key="dataset")
    return spark.table(f"`{ds.name}`")


def query(spark: SparkSession, config: Config, sql: str, as_of: str | None = None) -> DataFrame:
    """Run Spark SQL with every table and serving view registered; returns the DataFrame."""
    register_tables(spark, config, as_of)
    return spark.sql(sql)
