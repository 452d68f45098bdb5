"""Which tables maintenance covers, their size from the Delta log, and how a run is shown.

No JVM here (delta-rs reads the log): the Airflow task that lists the datasets to
maintain, the CLI and the Spark job (``spark_jobs/maintenance.py``) share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from loglake.config import Config, Dataset

# Expiry applies to the layers that hold speed rows; the latest table is a state, not a log.
EXPIRED_LAYERS = ("speed", "quarantine")


@dataclass(frozen=True)
class TableRef:
    layer: str   # speed | batch | quarantine | latest
    name: str    # <schema>.<table>, as in the dataset's config
    path: str


@dataclass(frozen=True)
class Snapshot:
    """A table's current version and the data files it references (one consistent read)."""

    version: int
    files: int
    bytes: int


def dataset_tables(config: Config, ds: Dataset) -> list[TableRef]:
    """Every table the dataset declares (speed, batch, quarantine and, for a changelog, latest)."""
    layers = ("speed", "batch", "quarantine") + (("latest",) if ds.tables.latest else ())
    return [TableRef(layer, getattr(ds.tables, layer), config.table_path(ds, layer)) for layer in layers]


def _is_delta(path: str) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(path.replace("s3a://", "s3://"))


def existing_tables(config: Config, ds: Dataset) -> list[TableRef]:
    """The dataset's tables that exist yet."""
    return [t for t in dataset_tables(config, ds) if _is_delta(t.path)]


def datasets_with_tables(config: Config, names: list[str] | None = None) -> list[Dataset]:
    """The datasets (all, or those named) that have at least one table to maintain."""
    chosen = [config.dataset(n) for n in names] if names else list(config.datasets.values())
    return [ds for ds in chosen if existing_tables(config, ds)]


def snapshot(path: str) -> Snapshot:
    """Version, file count and bytes of the table's current snapshot, from its Delta log."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from loglake.tables import open_table

    table = open_table(path)
    if table is None:
        raise FileNotFoundError(f"no Delta table at {path}")
    adds = pa.table(table.get_add_actions(flatten=True))
    size = pc.sum(adds["size_bytes"]).as_py() if adds.num_rows else 0
    return Snapshot(table.version(), adds.num_rows, int(size or 0))


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_log_rows(rows: list[dict]) -> list[str]:
    """One line per table and operation: files and bytes before → after, rows expired, attempts."""
    lines = []
    for r in rows:
        line = (f"  {r['table']:<32} {r['operation']:<8} files {r['files_before']} → {r['files_after']}, "
                f"{_size(r['bytes_before'])} → {_size(r['bytes_after'])}, "
                f"version {r['version_before']} → {r['version_after']}")
        if r["operation"] == "expire":
            line += f", {r['rows_deleted']} rows expired"
        line += f", {r['attempts']} attempt{'s' if r['attempts'] != 1 else ''}, {r['seconds']:.1f}s"
        lines.append(line)
    return lines
