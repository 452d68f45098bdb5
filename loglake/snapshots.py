"""A read of a dataset at one consistent point: every table and the ledger pinned together.

A reader — a query, a registered serving view, the audit — must never see rows vanish or
appear twice because a batch run published and maintenance expired between two of its
reads. So a reader pins Delta versions, in an order that makes any interleaving safe:

1. the speed-side tables (speed, quarantine, a changelog's latest state) at their current
   versions: everything the speed layer committed so far;
2. then the offsets ledger at its current version: the watermarks W_p, and the *serving
   point*, the batch and quarantine versions recorded by the newest publish or compaction;
3. the batch table at that serving point, not at its current version.

Maintenance expires speed rows below a W it read from the ledger before it deleted them;
the ledger pinned in step 2 is at least as new, so its W is at least as high and no row
at or above it was expired in the speed tables pinned in step 1. Batch rows reach the
serving point only through the quality gate, which records the point after it published
(and after it swapped a staged backfill or changelog rebuild in), so what a reader serves
below W is validated and complete, whatever a batch job is writing meanwhile.
A pinned version stays readable until VACUUM removes its files (the retention, 168 hours
by default); maintenance records a new serving point after it compacts the batch table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loglake.config import Config, Dataset
from loglake.ledger import compute_watermarks, ledger_path, ledger_rows, lost_ranges, serving_point
from loglake.tables import open_table

SPEED_SIDE = ("speed", "quarantine", "latest")


@dataclass(frozen=True)
class DatasetSnapshot:
    """A dataset's tables and ledger at one point (versions None: no table there yet)."""

    dataset: str
    versions: dict[str, int | None]  # layer → version: speed-side tables, and batch at the serving point
    batch_quarantine_version: int | None  # the quarantine table as the batch layer published it
    ledger_version: int | None
    ledger: list[dict] = field(default_factory=list)

    def version(self, layer: str) -> int | None:
        return self.versions.get(layer)

    def watermarks(self, earliest: dict[int, int] | None = None) -> dict[int, int]:
        return compute_watermarks(self.ledger, earliest) if self.ledger else {}

    @property
    def lost(self) -> list[dict]:
        return lost_ranges(self.ledger)


def _version_at(path: str, timestamp_ms: int | None) -> int | None:
    """The table's current version, or its version as of ``timestamp_ms`` (None: no table then)."""
    table = open_table(path)
    if table is None:
        return None
    if timestamp_ms is None:
        return table.version()
    versions = [h["version"] for h in table.history() if h.get("timestamp", 0) <= timestamp_ms]
    return max(versions) if versions else None


def pin(config: Config, ds: Dataset, as_of_ms: int | None = None) -> DatasetSnapshot:
    """Pin ``ds``'s tables and ledger now (or as they were at ``as_of_ms``), in the order above."""
    versions: dict[str, int | None] = {}
    for layer in SPEED_SIDE:
        if getattr(ds.tables, layer, None):
            versions[layer] = _version_at(config.table_path(ds, layer), as_of_ms)
    ledger_version = _version_at(ledger_path(config), as_of_ms)
    rows = [] if ledger_version is None else ledger_rows(config, ds, ledger_version)
    batch_version, quarantine_version = serving_point(rows)
    batch_path = config.table_path(ds, "batch")
    if batch_version is None:  # a ledger from before serving points: the batch table as it is (was)
        batch_version = _version_at(batch_path, as_of_ms)
        quarantine_version = versions.get("quarantine")
    elif open_table(batch_path) is None:
        batch_version = None
    versions["batch"] = batch_version
    return DatasetSnapshot(ds.name, versions, quarantine_version, ledger_version, rows)
