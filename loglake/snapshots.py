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

The speed-side tables are pinned at one micro-batch of the stream. A micro-batch commits
its valid rows to the speed table, then (when it has some) its quarantined rows to the
quarantine table, then (a changelog) its MERGE into the latest state, each a Delta commit
tagged with the stream's transaction id and the batch id (``spark_jobs/speed.py``). A reader
pinning between two of those commits would see a batch's rows without its quarantined
offsets. So step 1 pins the speed table, takes the newest batch b it holds, and keeps b only
if the stream has finished it (its checkpoint's commit log holds b: every part of b is
committed), else b - 1 (b started only after b - 1 finished); each speed-side table is then
pinned at its newest version holding no batch after that one. Older versions only hold more
rows below any watermark, so the order above stays safe. (A checkpoint that is not on a
filesystem is not read here: the speed-side tables are then pinned at their current versions.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

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


def speed_txn_app(ds: Dataset, stream_id: str) -> str:
    """The Delta transaction id the speed stream of ``ds`` tags its commits with (the batch id
    is the transaction version): its checkpoint's own id, so a new checkpoint never collides."""
    return f"loglake-speed-{ds.name}-{stream_id}"


def _local(uri: str) -> Path | None:
    if "://" in uri and not uri.startswith("file:"):
        return None
    return Path(uri.removeprefix("file://").removeprefix("file:"))


def _stream(config: Config, ds: Dataset) -> tuple[str, Path] | None:
    """(transaction id, checkpoint directory) of the speed stream; None without a readable checkpoint."""
    checkpoint = _local(config.checkpoint_path(ds))
    if checkpoint is None:
        return None
    try:
        meta = json.loads((checkpoint / "metadata").read_text().splitlines()[0])
        return speed_txn_app(ds, meta["id"]), checkpoint
    except (OSError, ValueError, KeyError, IndexError):
        return None


def _finished(checkpoint: Path, batch_id: int, as_of_ms: int | None) -> bool:
    """Whether the stream finished micro-batch ``batch_id`` (by ``as_of_ms``): Spark records a
    batch in the checkpoint's commit log only after all of its writes returned."""
    try:
        done = (checkpoint / "commits" / str(batch_id)).stat()
    except OSError:
        return False
    return as_of_ms is None or done.st_mtime * 1000 <= as_of_ms


def _through(table, app: str, batch_id: int) -> int | None:
    """The newest version of ``table`` (a delta-rs table at its pinned version) holding no
    batch of ``app`` after ``batch_id`` (None: none, the table did not exist yet then)."""
    while table is not None:
        txn = table.transaction_version(app)
        if txn is None or txn <= batch_id:
            return table.version()
        if table.version() == 0:
            return None
        table.load_as_version(table.version() - 1)
    return None


def pin(config: Config, ds: Dataset, as_of_ms: int | None = None) -> DatasetSnapshot:
    """Pin ``ds``'s tables and ledger now (or as they were at ``as_of_ms``), in the order above."""
    layers = [layer for layer in SPEED_SIDE if getattr(ds.tables, layer, None)]
    paths = {layer: config.table_path(ds, layer) for layer in layers}
    versions: dict[str, int | None] = {"speed": _version_at(paths["speed"], as_of_ms)}
    stream = _stream(config, ds)
    speed = None if stream is None or versions["speed"] is None else open_table(paths["speed"], versions["speed"])
    newest = None if speed is None else speed.transaction_version(stream[0])
    # Whether the stream finished its newest batch in the speed table: read before the other
    # speed-side tables are pinned, so that a finished batch is whole in them.
    whole = newest is not None and _finished(stream[1], newest, as_of_ms)
    for layer in layers[1:]:
        versions[layer] = _version_at(paths[layer], as_of_ms)
    if newest is not None:
        through = newest if whole else newest - 1
        for layer in layers:
            table = speed if layer == "speed" else (
                None if versions[layer] is None else open_table(paths[layer], versions[layer]))
            versions[layer] = _through(table, stream[0], through)
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
