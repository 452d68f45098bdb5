"""Quick reads of loglake's Delta tables without a JVM (delta-rs), for the CLI and status."""

from __future__ import annotations

from collections import Counter

from loglake.config import Config, Dataset


def _open(path: str):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path.replace("s3a://", "s3://"))
    except TableNotFoundError:
        return None


def table_counts(config: Config, ds: Dataset) -> dict[str, int]:
    """Row count of each of the dataset's tables that exist (0 for missing ones)."""
    counts = {}
    layers = ["speed", "quarantine", "batch"] + (["latest"] if ds.kind == "changelog" else [])
    for layer in layers:
        t = _open(config.table_path(ds, layer))
        counts[layer] = 0 if t is None else t.to_pyarrow_dataset().count_rows()
    return counts


def table_summary(config: Config, ds: Dataset) -> list[str]:
    """Lines describing each table: rows, version, files, and quarantine reasons."""
    lines = []
    layers = ["speed", "quarantine"] + (["latest"] if ds.kind == "changelog" else [])
    for layer in layers:
        path = config.table_path(ds, layer)
        t = _open(path)
        name = getattr(ds.tables, layer)
        if t is None:
            lines.append(f"{name}: no table yet at {path}")
            continue
        data = t.to_pyarrow_dataset()
        lines.append(f"{name}: {data.count_rows()} rows, version {t.version()}, {len(t.file_uris())} files ({path})")
        if layer == "quarantine" and data.count_rows():
            reasons = Counter(data.to_table(columns=["reason_code"]).column("reason_code").to_pylist())
            lines.append("  reasons: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    return lines
