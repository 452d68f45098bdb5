"""Quick reads of loglake's Delta tables without a JVM (delta-rs), for the CLI and status.

Queries go through delta-rs' own SQL engine (``QueryBuilder``), not a pyarrow dataset
scan: pyarrow's scanner threads could abort the interpreter at exit on this stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from loglake.core.config import Config, Dataset
from loglake.core.objectstore import delta_location


@dataclass(frozen=True)
class TableRef:
    layer: str   # speed | batch | quarantine | latest | history
    name: str    # <schema>.<table>, as in the dataset's config
    path: str
    store: Any = None  # the object store it is on (the config's ``object_store``), None on a filesystem

    def open(self, version: int | None = None):
        return open_table(self.path, version, self.store)


@dataclass(frozen=True)
class Snapshot:
    """A table's current version and the data files it references (one consistent read)."""

    version: int
    files: int
    bytes: int


def dataset_tables(config: Config, ds: Dataset) -> list[TableRef]:
    """Every table the dataset declares (speed, batch, quarantine and, for a changelog, latest and
    its history when it keeps one)."""
    layers = (("speed", "batch", "quarantine") + (("latest",) if ds.tables.latest else ())
              + (("history",) if ds.tables.history else ()))
    return [TableRef(layer, getattr(ds.tables, layer), config.table_path(ds, layer), config.object_store)
            for layer in layers]


def staging_path(config: Config, ds: Dataset, run_id: str, layer: str) -> str:
    """Where a batch run writes ``layer`` (batch, quarantine) aside when what it writes would
    be served before its quality gate (a backfill below the watermark, a changelog rebuild):
    the gate swaps it in when it passes (``spark_jobs/quality.py``)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)
    return f"{config.lake_root.rstrip('/')}/_staging/{ds.name}/{safe}/{layer}"


def staging_root(config: Config, ds: Dataset, run_id: str) -> str:
    return staging_path(config, ds, run_id, "").rstrip("/")


def _is_delta(ref: TableRef) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(*delta_location(ref.path, ref.store))


def existing_tables(config: Config, ds: Dataset) -> list[TableRef]:
    """The dataset's tables that exist yet."""
    return [t for t in dataset_tables(config, ds) if _is_delta(t)]


def snapshot(path: str, store=None) -> Snapshot:
    """Version, file count and bytes of the table's current snapshot, from its Delta log
    (``store``: the object store it is on, the config's ``object_store``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = open_table(path, store=store)
    if table is None:
        raise FileNotFoundError(f"no Delta table at {path}")
    adds = pa.table(table.get_add_actions(flatten=True))
    size = pc.sum(adds["size_bytes"]).as_py() if adds.num_rows else 0
    return Snapshot(table.version(), adds.num_rows, int(size or 0))


def open_table(path: str, version: int | None = None, store=None):
    """The Delta table at ``path`` (at ``version``, its current one by default); None if none.
    ``store``: the object store it is on (the config's ``object_store``; a filesystem path needs none)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        uri, options = delta_location(path, store)
        return DeltaTable(uri, version=version, storage_options=options)
    except TableNotFoundError:
        return None


def layer_table(config: Config, ds: Dataset, layer: str, version: int | None = None):
    """The dataset's table of ``layer`` (speed, batch, quarantine, latest), None if none yet."""
    return open_table(config.table_path(ds, layer), version, config.object_store)


def query(table, sql: str) -> list[dict]:
    """Run ``sql`` over ``table`` registered as ``t``; rows as dicts."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", table).execute(sql).read_all()).to_pylist()


def landed_positions(config: Config, ds: Dataset, topic: str) -> dict[int, int]:
    """Per partition, one past the highest offset of ``topic`` the speed layer landed (in
    ``speed.<ds>`` or its quarantine rows); partitions with neither are absent."""
    landed: dict[int, int] = {}
    quoted = topic.replace("'", "''")
    for layer, where in (("speed", ""), ("quarantine", " AND \"_layer\" = 'speed'")):
        table = layer_table(config, ds, layer)
        if table is None:
            continue
        for row in query(table, f'SELECT "_partition" AS p, max("_offset") AS o FROM t '
                                f"WHERE \"_topic\" = '{quoted}'{where} GROUP BY \"_partition\""):
            landed[row["p"]] = max(landed.get(row["p"], -1), row["o"] + 1)
    return landed


def _count(table) -> int:
    return 0 if table is None else query(table, "SELECT count(*) AS n FROM t")[0]["n"]


def table_counts(config: Config, ds: Dataset) -> dict[str, int]:
    """Row count of each of the dataset's tables (0 for tables not created yet)."""
    return {t.layer: _count(t.open()) for t in dataset_tables(config, ds)}


def table_summary(config: Config, ds: Dataset) -> list[str]:
    """Lines describing each table: rows, version, files, and quarantine reasons."""
    lines = []
    for ref in dataset_tables(config, ds):
        if ref.layer == "batch":
            continue
        layer, name, path = ref.layer, ref.name, ref.path
        t = ref.open()
        if t is None:
            lines.append(f"{name}: no table yet at {path}")
            continue
        rows = _count(t)
        lines.append(f"{name}: {rows} rows, version {t.version()}, {len(t.file_uris())} files ({path})")
        if layer == "quarantine" and rows:
            reasons = query(t, "SELECT reason_code, count(*) AS n FROM t GROUP BY reason_code ORDER BY n DESC, reason_code")
            lines.append("  reasons: " + ", ".join(f"{r['reason_code']} {r['n']}" for r in reasons))
    return lines
