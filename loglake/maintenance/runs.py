"""Which datasets maintenance covers, and how a run is shown.

No JVM here (delta-rs reads the log): the Airflow task that lists the datasets to
maintain, the CLI and the Spark job (``spark_jobs/maintenance.py``) share it.
"""

from __future__ import annotations

from loglake.core.config import Config, Dataset
from loglake.tables import existing_tables

# Expiry applies to the layers that hold speed rows; the latest table is a state, not a log.
EXPIRED_LAYERS = ("speed", "quarantine")


def datasets_with_tables(config: Config, names: list[str] | None = None) -> list[Dataset]:
    """The datasets (all, or those named) that have at least one table to maintain."""
    chosen = [config.dataset(n) for n in names] if names else list(config.datasets.values())
    return [ds for ds in chosen if existing_tables(config, ds)]


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
