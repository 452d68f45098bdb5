"""Quick reads of loglake's Delta tables without a JVM (delta-rs), for the CLI and status.

Queries go through delta-rs' own SQL engine (``QueryBuilder``), not a pyarrow dataset
scan: pyarrow's scanner threads could abort the interpreter at exit on this stack.
"""

from __future__ import annotations

from loglake.config import Config, Dataset


def open_table(path: str):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path.replace("s3a://", "s3://"))
    except TableNotFoundError:
        return None


def query(table, sql: str) -> list[dict]:
    """Run ``sql`` over ``table`` registered as ``t``; rows as dicts."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", table).execute(sql).read_all()).to_pylist()


def _count(table) -> int:
    return 0 if table is None else query(table, "SELECT count(*) AS n FROM t")[0]["n"]


def table_counts(config: Config, ds: Dataset) -> dict[str, int]:
    """Row count of each of the dataset's tables (0 for tables not created yet)."""
    from loglake.maintenance import dataset_tables

    return {t.layer: _count(open_table(t.path)) for t in dataset_tables(config, ds)}


def table_summary(config: Config, ds: Dataset) -> list[str]:
    """Lines describing each table: rows, version, files, and quarantine reasons."""
    lines = []
    for layer in ["speed", "quarantine"] + (["latest"] if ds.kind == "changelog" else []):
        path = config.table_path(ds, layer)
        t = open_table(path)
        name = getattr(ds.tables, layer)
        if t is None:
            lines.append(f"{name}: no table yet at {path}")
            continue
        rows = _count(t)
        lines.append(f"{name}: {rows} rows, version {t.version()}, {len(t.file_uris())} files ({path})")
        if layer == "quarantine" and rows:
            reasons = query(t, "SELECT reason_code, count(*) AS n FROM t GROUP BY reason_code ORDER BY n DESC, reason_code")
            lines.append("  reasons: " + ", ".join(f"{r['reason_code']} {r['n']}" for r in reasons))
    return lines
