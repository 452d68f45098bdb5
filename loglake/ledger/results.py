"""loglake's own record tables, read: quality results, audit results, the maintenance log.

Each is a Delta table under the lake root (``loglake.core.contracts``: QUALITY_RESULTS,
AUDIT_RESULTS, MAINTENANCE_LOG, with their columns), written by the step that produces
it and read here without a JVM (delta-rs) for ``loglake status``, the Airflow UI page
and the demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loglake.core.config import Config, Dataset, expectation_label
from loglake.core.contracts import AUDIT_RESULTS, MAINTENANCE_LOG, QUALITY_RESULTS, SystemTable
from loglake.tables import open_table, query


def _rows(config: Config, table: SystemTable, ds: Dataset, order: str) -> list[dict]:
    t = open_table(config.system_table_path(table), store=config.object_store)
    if t is None:
        return []
    name = ds.name.replace("'", "''")
    # Columns a table written by an older loglake lacks read as None.
    present = set(t.schema().to_arrow().names)
    columns = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in table.contract.names)
    return query(t, f"SELECT {columns} FROM t WHERE dataset = '{name}' ORDER BY {order}")


def _last_run(rows: list[dict], time_column: str) -> list[dict]:
    """The rows of the most recent run (by ``time_column``) in ``rows``."""
    if not rows:
        return []
    last = max(rows, key=lambda r: r[time_column])["run_id"]
    return [r for r in rows if r["run_id"] == last]


@dataclass(frozen=True)
class QualityRecord:
    """The latest validation of a dataset, as its record table holds it: the run, when, whether
    it was published, how many expectations, and the labels of those that failed and warned."""

    run_id: str
    validated_at: datetime
    published: bool
    expectations: int
    failed: list[str]
    warned: list[str]

    @classmethod
    def from_dict(cls, d: dict | None) -> QualityRecord | None:
        """Back from its JSON form (``DatasetStatus.to_dict``: the loglake page's values)."""
        return None if d is None else cls(**d)


@dataclass(frozen=True)
class AuditRecord:
    """The latest audit of a dataset: the run, when, ``ok`` (served and newest versions), the
    totals of the served versions, and its stored rows (one per partition and layer)."""

    run_id: str
    audited_at: datetime
    ok: bool
    offsets_checked: int
    missing: int
    duplicated: int
    unexpected: int
    partitions: list[dict]

    @classmethod
    def from_dict(cls, d: dict | None) -> AuditRecord | None:
        """Back from its JSON form (``DatasetStatus.to_dict``: the loglake page's values)."""
        return None if d is None else cls(**d)


def last_quality(config: Config, ds: Dataset) -> QualityRecord | None:
    """The latest validation of ``ds``; None before the first."""
    rows = _last_run(_rows(config, QUALITY_RESULTS, ds, "validated_at"), "validated_at")
    if not rows:
        return None
    failed = [r for r in rows if not r["success"]]
    return QualityRecord(
        run_id=rows[0]["run_id"], validated_at=max(r["validated_at"] for r in rows),
        published=bool(rows[0]["published"]), expectations=len(rows),
        failed=[expectation_label(r["expectation"], r["column"]) for r in failed if r["severity"] == "fail"],
        warned=[expectation_label(r["expectation"], r["column"]) for r in failed if r["severity"] == "warn"])


def last_audit(config: Config, ds: Dataset) -> AuditRecord | None:
    """The latest audit of ``ds``; None before the first."""
    rows = _last_run(_rows(config, AUDIT_RESULTS, ds, "audited_at"), "audited_at")
    if not rows:
        return None
    ok = all(r["ok"] for r in rows)
    rows = [r for r in rows if r["point"] in (None, "served")]
    return AuditRecord(
        run_id=rows[0]["run_id"], audited_at=max(r["audited_at"] for r in rows), ok=ok,
        offsets_checked=sum(r["offsets_checked"] for r in rows), missing=sum(r["missing"] for r in rows),
        duplicated=sum(r["duplicated"] for r in rows), unexpected=sum(r["unexpected"] for r in rows),
        partitions=rows)


def last_maintenance(config: Config, ds: Dataset) -> list[dict]:
    """The rows of the latest maintenance run of ``ds`` (one per table and operation)."""
    return _last_run(_rows(config, MAINTENANCE_LOG, ds, "started_at"), "started_at")


def data_docs_dir(config: Config):
    """Where Great Expectations builds the Data Docs site (``index.html``): the GX file
    project lives in the state directory, ``<state>/gx``."""
    return config.home / "gx" / "uncommitted" / "data_docs" / "local_site"
