"""``loglake erase DATASET --key K [--field F] --reason TEXT``: a data subject forgotten.

Under the dataset's writer lease (no batch run, backfill, replay, rebuild or maintenance
writes meanwhile; one that is running finishes first):

1. a changelog (plain key) gets the key's tombstone, so a compacted topic forgets it too;
2. the subject's records are found (``loglake.erasure.search``) in the log up to its end now
   (the request's *position*: what the key writes later is new data) and in every table;
3. the request and those positions are recorded in the erasure ledger
   (``loglake.ledger.erasures``). From this commit on every read of the log skips them: the
   speed stream's next micro-batch, recompute, backfill, replay, rebuild;
4. the rows at those positions are deleted from every table — speed, batch, quarantine,
   latest state, history, a batch run's staged tables and the tables a rebuild set aside —
   each in one delta-rs commit
   whose metadata names the erasure (the speed-side tables with the stream's appends held);
5. readers are served the batch side's new versions (a ledger row, state *erased*), so the
   serving view never shows the rows again;
6. the erasure is marked *applied*. The versions before it still hold the rows until the
   purge deletes their files (``erasure.purge_after``; 0: now): ``purge_due``.

A speed micro-batch that read the ledger before step 3 and commits after step 4 deletes the
rows itself (``loglake.speed.writer``: the ledger is read again after each commit); the
erasure waits for the stream to pass the erased records (or for no stream to run) and deletes
once more (``settle``), so when it returns no table's current version holds them.

Nothing here prints or records the key: the ledger keeps its hash (``subject``).
"""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from loglake.core import objectstore
from loglake.core.config import Config, Dataset
from loglake.core.contracts import LEDGER
from loglake.core.errors import KafkaUnavailableError, ParamError, StreamRunningError
from loglake.erasure import search
from loglake.erasure.purge import purge
from loglake.kafka.admin import group_offsets, log_bounds
from loglake.leases import appends_paused, check_lease, stream_lease, writer
from loglake.ledger import erasures
from loglake.ledger.erasures import Erasure, subject
from loglake.ledger.history import unserved_foreign_commits
from loglake.ledger.losses import operator
from loglake.ledger.ranges import ledger_rows
from loglake.tables import dataset_tables, open_table

SPEED_SIDE = ("speed", "quarantine", "latest")  # the tables the stream appends to
# How long an erasure waits for the speed stream to pass the erased records (``settle``).
SETTLE_SECONDS = 120.0


@dataclass(frozen=True)
class EraseResult:
    """What an erasure did: its id, the subject's hash, the positions erased, and per table the
    rows deleted and the version that deleted them; ``tombstone``: the offset of the key's
    tombstone (a changelog); ``purged``: the purge's result when it ran at once."""

    erasure_id: str
    dataset: str
    subject: str
    offsets: int
    tables: dict[str, dict] = field(default_factory=dict)
    tombstone: tuple[int, int] | None = None
    purge_due: datetime | None = None
    purged: list[dict] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        rows = ", ".join(f"{t} {d['rows']} ({d.get('files_rewritten', 0)} file(s) rewritten)"
                         for t, d in self.tables.items()) or "none"
        out = [f"erase {self.dataset}: {self.erasure_id} (subject {self.subject[:12]}…): {self.offsets} record(s) "
               f"erased; rows deleted: {rows}"]
        if self.tombstone is not None:
            out.append(f"erase {self.dataset}: the key's tombstone is at partition {self.tombstone[0]} "
                       f"offset {self.tombstone[1]} (Kafka's compaction forgets the key)")
        if self.purged is not None:
            files = sum(len(p["files"]) for p in self.purged)
            out.append(f"erase {self.dataset}: purged at once: {files} file(s) of older versions deleted")
        elif self.purge_due is not None:
            out.append(f"erase {self.dataset}: older table versions hold the rows until the purge, due "
                       f"{self.purge_due:%Y-%m-%d %H:%M} UTC (loglake erase --purge, or loglake_maintenance)")
        return out + [f"erase {self.dataset}: note: {n}" for n in self.notes]


def side_tables(config: Config, ds: Dataset) -> list[str]:
    """The dataset's Delta tables outside its declared ones: what batch runs staged and no gate
    swapped in yet (``_staging/<name>/<run>/<layer>``), and the tables a rebuild set aside
    (``<table>.before-rebuild-<time>``). They hold the dataset's rows too."""
    staging = f"{config.lake_root.rstrip('/')}/_staging/{ds.name}"
    paths = [t.path for t in dataset_tables(config, ds)]
    if objectstore.is_remote(staging):
        found = set()
        for prefix in [staging + "/"] + [p + ".before-rebuild-" for p in paths]:
            found |= {uri.split("/_delta_log/", 1)[0] for uri in objectstore.listing(config.object_store, prefix)
                      if "/_delta_log/" in uri}
        return sorted(found)
    from pathlib import Path

    def local(uri: str) -> Path:
        return Path(uri.removeprefix("file://").removeprefix("file:"))

    base = local(staging)
    found = [str(p.parent) for p in base.glob("*/*/_delta_log")] if base.is_dir() else []
    for path in paths:
        table = local(path)
        found += [str(p) for p in table.parent.glob(table.name + ".before-rebuild-*") if (p / "_delta_log").is_dir()]
    return sorted(found)


def _tombstone(config: Config, ds: Dataset, field_name: str, key: str) -> tuple[int, int] | None:
    """A plain changelog keyed by ``field_name``: produce the key's tombstone; (partition, offset)."""
    if ds.kind != "changelog" or ds.debezium or ds.keys != [field_name]:
        return None
    from confluent_kafka import Producer

    got: dict = {}

    def delivered(err, msg) -> None:
        got["err"], got["at"] = err, (None if err else (msg.partition(), msg.offset()))

    producer = Producer(config.kafka_client_conf(**{"acks": "all", "enable.idempotence": True}))
    producer.produce(ds.topic, key=key.encode(), value=None, on_delivery=delivered)
    producer.flush(60)
    if got.get("err") is not None or "at" not in got:
        raise KafkaUnavailableError(f"erase {ds.name}: the broker did not acknowledge the key's tombstone "
                                    f"({got.get('err') or 'no answer within 60s'}); nothing was erased yet")
    return got["at"]


def _offsets_table(found: dict[int, set[int]]):
    import pyarrow as pa

    parts, offs = [], []
    for p in sorted(found):
        for o in sorted(found[p]):
            parts.append(p)
            offs.append(o)
    return pa.table({"partition": pa.array(parts, pa.int32()), "offset": pa.array(offs, pa.int64())})


def erase(config: Config, ds: Dataset, key: str, *, reason: str, field_name: str | None = None,
          requested_by: str | None = None, say: Callable[[str], None] | None = None) -> EraseResult:
    """Erase the subject ``field_name`` = ``key`` from ``ds`` (the module's docstring says how)."""
    started = time.monotonic()
    field_name = search.check(ds, field_name, key)
    if not isinstance(reason, str) or len(reason.strip()) < 3:
        raise ParamError("reason", "say why the key is erased (kept in the erasure ledger with who and when)")
    requested_by = requested_by or operator()
    now = datetime.now(timezone.utc)
    erasure_id = f"erase-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    say = say or (lambda m: print(m, file=sys.stderr, flush=True))
    with writer(config, ds.name, "erase", erasure_id, say=say, export=False):  # it starts no job
        tombstone = _tombstone(config, ds, field_name, key)
        bounds = log_bounds(config, ds.topic)
        match = search.matcher(ds, field_name, key)
        found: dict[int, set[int]] = {p: set(o) for p, o in search.in_log(config, ds, bounds, match).items()}
        staged = side_tables(config, ds)
        for p, held in search.in_tables(config, ds, field_name, key, match, staged).items():
            found.setdefault(p, set()).update(held)
        # Positions an earlier request erased are recorded once (its rows, if any are left, go below).
        already = {p: set(o.tolist()) for p, o in erasures.erased_offsets(config, ds.topic).per_partition().items()}
        table = _offsets_table({p: got - already.get(p, set()) for p, got in found.items()})
        erasure = Erasure(erasure_id, ds.name, ds.topic, field_name, subject(ds.name, field_name, key), False,
                          reason.strip(), requested_by, datetime.now(timezone.utc),
                          {p: hi for p, (_lo, hi) in sorted(bounds.items())}, table.num_rows)
        erasures.record(config, erasure, table)
        offsets = {p: sorted(o) for p, o in found.items()}
        applied = apply(config, ds, erasure_id, offsets, staged)
        notes = settle(config, ds, erasure_id, offsets, applied)
        notes += reserve(config, ds, erasure_id)
        erasures.mark(config, erasure, "applied", {"tables": applied})
    after = config.profile.erasure.purge_after_seconds
    purged = None
    if after == 0:
        purged = [p for done in purge_due(config, ds) for p in done["tables"]]
    return EraseResult(erasure_id, ds.name, erasure.subject, table.num_rows, applied, tombstone,
                       None if after == 0 else datetime.now(timezone.utc) + timedelta(seconds=after), purged, notes,
                       round(time.monotonic() - started, 3))


def apply(config: Config, ds: Dataset, erasure_id: str, offsets: dict[int, list[int]],
          staged: list[str] = (), layers: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Delete the rows at ``offsets`` from every table of ``ds`` (and the ``staged`` ones,
    ``side_tables``): per table, the rows deleted and the commit's version (tables that held
    none are left out)."""
    meta = {"loglake_job": "erase", "loglake_run_id": erasure_id, "loglake_erasure": erasure_id}
    out = {}
    targets = [(t.layer, t.name, t.path) for t in dataset_tables(config, ds)] + [
        ("aside", path.removeprefix(config.lake_root.rstrip("/") + "/"), path) for path in staged]
    for layer, name, path in targets:
        if layers is not None and layer not in layers:
            continue
        paused = appends_paused(config, ds.name, f"erase {erasure_id}: {name}") if layer in SPEED_SIDE \
            else nullcontext()
        with paused:
            done = erasures.remove_rows(path, ds.topic, offsets, meta, config.object_store, check=check_lease)
        if done.rows:
            out[name] = {"layer": layer, "path": path, "rows": done.rows, "version": done.version,
                         "files_rewritten": done.files_removed, "files_added": done.files_added}
    return out


def settle(config: Config, ds: Dataset, erasure_id: str, offsets: dict[int, list[int]], applied: dict,
           wait_seconds: float = SETTLE_SECONDS) -> list[str]:
    """After the deletes: make sure no micro-batch of the speed stream that read the ledger before
    the request lands the erased rows after them. Such a micro-batch deletes them itself once
    its commits landed (``loglake.speed.writer.erased_since``), before the stream's position
    passes it; so wait until the stream's position is past the erased offsets, or until no
    stream runs (its lease then held here, so none starts), and delete once more: what a
    micro-batch committed meanwhile goes too. ``applied`` gains those rows; the notes say a
    stream that did not move within ``wait_seconds`` (its own next micro-batch deletes them)."""
    ends = {p: max(o) + 1 for p, o in offsets.items() if o}
    if not ends:
        return []
    started = time.monotonic()
    notes: list[str] = []
    while True:
        try:
            with stream_lease(config, ds.name):  # no stream runs, and none starts meanwhile
                again = apply(config, ds, erasure_id, offsets, layers=SPEED_SIDE)
                break
        except StreamRunningError:
            pass
        positions = group_offsets(config, ds.consumer_group, ds.topic, ds.partitions)
        if all((positions.get(p) or 0) >= end for p, end in ends.items()):
            again = apply(config, ds, erasure_id, offsets, layers=SPEED_SIDE)
            break
        if time.monotonic() - started > wait_seconds:
            notes.append(f"the speed stream of {ds.name} did not pass the erased records within {wait_seconds:.0f}s: "
                         "a micro-batch under way that holds them deletes them itself once it committed")
            return notes
        time.sleep(0.5)
    for name, d in again.items():
        held = applied.setdefault(name, {**d, "rows": 0, "files_rewritten": 0, "files_added": 0})
        for k in ("rows", "files_rewritten", "files_added"):
            held[k] += d[k]
        held["version"] = d["version"]
    return notes


def reserve(config: Config, ds: Dataset, erasure_id: str) -> list[str]:
    """Serve the batch side at its versions after the erasure (a ledger row, state *erased*):
    the versions served before still hold the erased rows. Not when a commit loglake did not
    make lies between (a publish would refuse it too): said in the notes instead."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from loglake.core.objectstore import delta_location
    from loglake.ledger.ranges import ledger_path

    rows = ledger_rows(config, ds)
    versions, notes = {}, []
    for layer, column in (("batch", "batch_version"), ("quarantine", "quarantine_version")):
        table = open_table(config.table_path(ds, layer), store=config.object_store)
        versions[column] = None if table is None else table.version()
        found = None if versions[column] is None else unserved_foreign_commits(config, ds, layer, rows,
                                                                               versions[column])
        if found and found[1]:
            notes.append(f"{getattr(ds.tables, layer)} has commits loglake did not make since the served version: "
                         "readers stay on the served version, which still holds the erased rows until the purge; "
                         "repair the table (loglake history) and publish again")
            return notes
    if versions["batch_version"] is None:
        return notes
    row = {"dataset": ds.name, "topic": ds.topic, "partition": -1, "start": 0, "end": 0, "records": 0,
           "quarantined": 0, "run_id": erasure_id, "state": "erased", "committed_at": datetime.now(timezone.utc),
           **versions}
    uri, options = delta_location(ledger_path(config), config.object_store)
    check_lease("serve the versions after the erasure")
    write_deltalake(uri, pa.Table.from_pylist([{c: row.get(c) for c in LEDGER.contract.names}],
                                              schema=LEDGER.contract.arrow_schema()),
                    mode="append", schema_mode="merge", storage_options=options)
    return notes


def purge_due(config: Config, ds: Dataset | None = None, now: datetime | None = None,
              force: bool = False) -> list[dict]:
    """Purge every applied erasure (of ``ds``) whose ``erasure.purge_after`` has passed (``force``:
    every applied one): the files of older table versions that hold its rows are deleted;
    each is marked *purged* with what went. Returns one dict per erasure purged."""
    now = now or datetime.now(timezone.utc)
    wait = timedelta(seconds=config.profile.erasure.purge_after_seconds)
    done = []
    for e in erasures.erasures(config, None if ds is None else ds.name):
        if e.applied_at is None or e.purged_at is not None or (not force and e.applied_at + wait > now):
            continue
        target = config.dataset(e.dataset) if ds is None else ds
        with writer(config, target.name, "erase-purge", e.erasure_id, export=False):  # no writer moves files meanwhile
            done.append(purge_one(config, target, e))
    return done


def purge_one(config: Config, ds: Dataset, e: Erasure) -> dict:
    """Purge one applied erasure from every table of ``ds`` (and those it deleted from): the files
    holding a row at any erased position of the topic (this request's, and any an earlier purge
    could not see yet: a stale micro-batch's rows deleted since)."""
    offsets = {p: o.tolist() for p, o in erasures.erased_offsets(config, e.topic).per_partition().items()}
    paths = [t.path for t in dataset_tables(config, ds)] + side_tables(config, ds)
    paths += [d["path"] for d in (e.applied or {}).get("tables", {}).values() if d["path"] not in paths]
    results = []
    for path in paths:
        if open_table(path, store=config.object_store) is None:
            continue
        got = purge(path, offsets, topic=e.topic, store=config.object_store)
        results.append({"path": path, "files": got.files, "checkpoints": got.checkpoints,
                        "unreadable": got.unreadable})
    detail = {"tables": results}
    erasures.mark(config, e, "purged", detail)
    return {"erasure_id": e.erasure_id, "dataset": ds.name, **detail}


def purge_lines(done: list[dict]) -> list[str]:
    """What purges did, one line per erasure (no key: its id)."""
    out = []
    for d in done:
        files = sum(len(t["files"]) for t in d["tables"])
        unreadable = sum(len(t["unreadable"]) for t in d["tables"])
        out.append(f"erase {d['dataset']}: {d['erasure_id']} purged: {files} file(s) of older versions deleted, "
                   f"{unreadable} table version(s) no longer readable")
    return out
