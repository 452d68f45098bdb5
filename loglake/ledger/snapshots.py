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
tagged with the stream's transaction id and the batch id (``spark_jobs/speed.py``: in the
commit's ``userMetadata``, ``stream_commits`` reads them; Delta's own SetTransaction record
only where Delta checks it (a query's first micro-batch, or one whose stream is not sure of its lease), see ``loglake.lake.delta_io``). A reader
pinning between two of those commits would see a batch's rows without its quarantined
offsets. So step 1 pins the speed table, takes the newest batch b it holds, and keeps b only
if the stream has finished it (its checkpoint's commit log holds b: every part of b is
committed), else b - 1 (b started only after b - 1 finished); each speed-side table is then
pinned at its newest version holding no batch after that one. Older versions only hold more
rows below any watermark, so the order above stays safe. The checkpoint is read where it is:
a directory, or the lake's object store (an ``s3a://`` checkpoint root).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from loglake.core import objectstore
from loglake.core.config import Config, Dataset
from loglake.core.errors import KafkaUnavailableError
from loglake.kafka.admin import list_topics, log_bounds
from loglake.ledger.ranges import COVERING, compute_watermarks, ledger_path, ledger_rows, lost_ranges, serving_point
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

    def coverage(self) -> dict[int, tuple[int, int]]:
        """Per partition, ``(S_p, W_p)`` from the ledger alone: where its first covering range
        starts, and the watermark (the end of the contiguous coverage from there)."""
        starts: dict[int, int] = {}
        for r in self.ledger:
            if r.get("state") in COVERING and r["end"] > r["start"]:
                p = int(r["partition"])
                starts[p] = min(starts.get(p, int(r["start"])), int(r["start"]))
        return {p: (starts[p], w) for p, w in self.watermarks().items()}

    @property
    def lost(self) -> list[dict]:
        return lost_ranges(self.ledger)


def _version_at(path: str, timestamp_ms: int | None, store=None) -> int | None:
    """The table's current version, or its version as of ``timestamp_ms`` (None: no table then)."""
    table = open_table(path, store=store)
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


def _stream(config: Config, ds: Dataset) -> tuple[str, str] | None:
    """(transaction id, checkpoint location) of the speed stream; None without a readable checkpoint.
    The checkpoint may be a directory or on the lake's object store (``loglake.core.objectstore``)."""
    checkpoint = config.checkpoint_path(ds).removeprefix("file://").removeprefix("file:").rstrip("/")
    try:
        meta = json.loads(objectstore.read_text(config.object_store, f"{checkpoint}/metadata").splitlines()[0])
        return speed_txn_app(ds, meta["id"]), checkpoint
    except (OSError, ValueError, KeyError, IndexError):
        return None


def _finished(checkpoint: str, batch_id: int, as_of_ms: int | None, store=None) -> bool:
    """Whether the stream finished micro-batch ``batch_id`` (by ``as_of_ms``): Spark records a
    batch in the checkpoint's commit log only after all of its writes returned."""
    try:
        done_ms = objectstore.modified_ms(store, f"{checkpoint}/commits/{batch_id}")
    except OSError:
        return False
    return as_of_ms is None or done_ms <= as_of_ms


# The commit metadata (``userMetadata``, JSON) naming the stream and micro-batch of a commit.
STREAM_KEY, BATCH_KEY = "loglake_stream", "loglake_batch"
# A walk down a table's history for a stream's commits reads at most this many commits ...
WALK_COMMITS = 2_000
# ... and, looking for a micro-batch's commits, none written this long before the speed
# table's newest commit of the stream (the micro-batches after it all wrote later).
WALK_SKEW_MS = 600_000


def stream_commits(path: str, app: str, upto: int | None = None, limit: int | None = WALK_COMMITS, store=None):
    """``(version, batch, timestamp ms)`` of the commits of stream ``app`` (the ``userMetadata`` of
    ``loglake.lake.delta_io.append_idempotent`` and of the stream's MERGE) to the table at
    ``path``, newest first, at or below version ``upto``; yields ``(version, None, timestamp)``
    for every other commit too, so that a caller can stop on time. Reads the history from the
    newest commit down, in growing pages, at most ``limit`` commits (None: all). ``store``: the
    object store the table is on (the config's ``object_store``)."""
    table = open_table(path, store=store)
    if table is None:
        return
    seen, page = 0, 32
    while True:
        page = page if limit is None else min(page, limit)
        entries = table.history(page)
        for entry in entries[seen:]:
            version = entry.get("version")
            if version is None or (upto is not None and version > upto):
                continue
            batch = None
            try:
                meta = json.loads(entry.get("userMetadata") or "{}")
                if isinstance(meta, dict) and meta.get(STREAM_KEY) == app and BATCH_KEY in meta:
                    batch = int(meta[BATCH_KEY])
            except (ValueError, TypeError):
                pass
            yield version, batch, entry.get("timestamp", 0)
        if len(entries) < page or (limit is not None and page >= limit):
            return
        seen, page = len(entries), page * 8


def stream_batch(path: str, app: str, limit: int | None = None, store=None) -> int | None:
    """The newest micro-batch of stream ``app`` in the table at ``path`` (None: none): from its
    commits' metadata, or Delta's SetTransaction record (tables written before the metadata named
    the batch). ``limit``: commits read at most (None: all, the check before a replay)."""
    table = open_table(path, store=store)
    if table is None:
        return None
    txn = table.transaction_version(app)
    tagged = next((b for _v, b, _t in stream_commits(path, app, limit=limit, store=store) if b is not None), None)
    return max((b for b in (txn, tagged) if b is not None), default=None)


def _through_tagged(path: str, table, app: str, batch_id: int, since_ms: int | None,
                    store=None) -> int | None | bool:
    """``_through`` from the commits' metadata; False when no commit of ``app`` is found in the
    walk (a table the stream wrote before its commits named their batch: ask the SetTransaction)."""
    upto = table.version()
    first_after, found = None, False
    for version, batch, ts in stream_commits(path, app, upto, store=store):
        if batch is not None:
            found = True
            if batch <= batch_id:
                break
            first_after = version
        elif since_ms is not None and ts < since_ms - WALK_SKEW_MS:
            break
    if first_after is None:
        return upto if found or table.transaction_version(app) is None else False
    return None if first_after == 0 else first_after - 1


def _through(table, app: str, batch_id: int, path: str | None = None, since_ms: int | None = None,
             store=None) -> int | None:
    """The newest version of ``table`` (a delta-rs table at its pinned version) holding no
    batch of ``app`` after ``batch_id`` (None: none, the table did not exist yet then).
    ``path``: read the commits' metadata (the walk stops at commits written ``WALK_SKEW_MS``
    before ``since_ms``, the newest commit of the stream); else, and for tables from before
    the metadata, Delta's SetTransaction record version by version."""
    if table is not None and path is not None:
        tagged = _through_tagged(path, table, app, batch_id, since_ms, store)
        if tagged is not False:
            return tagged
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
    store = config.object_store
    versions: dict[str, int | None] = {"speed": _version_at(paths["speed"], as_of_ms, store)}
    stream = _stream(config, ds)
    speed = (None if stream is None or versions["speed"] is None
             else open_table(paths["speed"], versions["speed"], store))
    newest, since_ms = None, None
    if speed is not None:
        newest = speed.transaction_version(stream[0])
        for _v, batch, ts in stream_commits(paths["speed"], stream[0], versions["speed"], store=store):
            if batch is not None:
                newest, since_ms = max(batch, newest if newest is not None else batch), ts
                break
    # Whether the stream finished its newest batch in the speed table: read before the other
    # speed-side tables are pinned, so that a finished batch is whole in them.
    whole = newest is not None and _finished(stream[1], newest, as_of_ms, store)
    for layer in layers[1:]:
        versions[layer] = _version_at(paths[layer], as_of_ms, store)
    if newest is not None:
        through = newest if whole else newest - 1
        for layer in layers:
            table = speed if layer == "speed" else (
                None if versions[layer] is None else open_table(paths[layer], versions[layer], store))
            versions[layer] = _through(table, stream[0], through, paths[layer], since_ms, store)
    ledger_version = _version_at(ledger_path(config), as_of_ms, store)
    rows = [] if ledger_version is None else ledger_rows(config, ds, ledger_version)
    batch_version, quarantine_version = serving_point(rows)
    batch_path = config.table_path(ds, "batch")
    if batch_version is None:  # a ledger from before serving points: the batch table as it is (was)
        batch_version = _version_at(batch_path, as_of_ms, store)
        quarantine_version = versions.get("quarantine")
    elif open_table(batch_path, store=store) is None:
        batch_version = None
    versions["batch"] = batch_version
    if ds.tables.history:  # after the ledger: at least as new as the watermarks (swapped in before a publish)
        versions["history"] = _version_at(config.table_path(ds, "history"), as_of_ms, store)
    return DatasetSnapshot(ds.name, versions, quarantine_version, ledger_version, rows)


def served_ranges(config: Config, ds: Dataset, snap: DatasetSnapshot) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets ``[start, W_p)`` the serving view takes from the batch layer
    (speed rows outside them; partitions absent: speed only). ``start`` 0 means "below W_p".

    The watermark rule asks that coverage start at or before the log's earliest retained
    offset. Coverage from offset 0 (a topic loglake saw from its beginning) meets it whatever
    the log holds, so the ledger alone answers and Kafka is not asked. Only a partition whose
    coverage starts later (a topic retention had trimmed before the first batch, a backfill
    into a partition no batch covered yet) needs the earliest offset, read from Kafka; when
    Kafka does not answer, the batch serves exactly the offsets it covered, ``[S_p, W_p)``,
    and speed the rest: every offset once still, though speed rows below ``S_p`` that
    maintenance has not expired yet then show.
    """
    coverage = snap.coverage()
    if all(start == 0 for start, _w in coverage.values()):
        return {p: (0, w) for p, (_s, w) in coverage.items()}


    try:
        list_topics(config, timeout=2.0)  # a broker that is down answers nothing: do not wait long
        earliest = {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}
    except KafkaUnavailableError as e:
        logging.getLogger("loglake.ledger.snapshots").info(
            "serving view of %s: Kafka did not give the earliest offsets (%s); the batch layer serves the offsets it "
            "covered, speed the rest", ds.name, str(e).splitlines()[0])
        return dict(coverage)
    return {p: (0, w) for p, (s, w) in coverage.items() if s <= earliest.get(p, 0)}
