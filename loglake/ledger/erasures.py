"""The erasure ledger: which records of the log are erased, and what became of each request.

``loglake erase`` (``loglake.erasure``) records a request here before it removes anything:
two of loglake's own tables under the lake root, both written by delta-rs.

- ``_ledger/erasures``: one row per request and event — *recorded* (who, when, why, which
  field, the log's position when it was asked, how many offsets), *applied* (the tables'
  commits that removed the rows), *purged* (the files deleted from the tables' history). The
  key itself is not kept: ``subject`` is a SHA-256 of dataset, field and key, enough to answer
  "was this key erased?" for whoever knows the key.
- ``_ledger/erased_offsets``: the positions (topic, partition, offset) of the erased records.
  Every read of the log skips them (``erased_offsets``, read once per job and cached by the
  table's version), the audit counts them as erased, not as missing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Callable, NamedTuple
from datetime import datetime, timezone

from loglake.core.config import Config
from loglake.core.contracts import ERASED_OFFSETS, ERASURES, SystemTable
from loglake.core.objectstore import delta_location
from loglake.tables import open_table, query

EVENTS = ("recorded", "applied", "purged")

def subject(dataset: str, field: str, key: str) -> str:
    """The ledger's name for a data subject: no key, but the same for the same key."""
    return hashlib.sha256(f"{dataset}\x00{field}\x00{key}".encode()).hexdigest()


@dataclass(frozen=True)
class Erasure:
    """One request, with its events so far."""

    erasure_id: str
    dataset: str
    topic: str
    field: str
    subject: str
    block: bool
    reason: str
    requested_by: str
    requested_at: datetime
    positions: dict[int, int]
    offsets: int
    applied_at: datetime | None = None
    purged_at: datetime | None = None
    applied: dict | None = None
    purged: dict | None = None

    @property
    def state(self) -> str:
        return "purged" if self.purged_at else "applied" if self.applied_at else "recorded"


def _path(config: Config, table: SystemTable) -> str:
    return config.system_table_path(table)


def _append(config: Config, table: SystemTable, rows: list[dict]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    from loglake.core.retrying import attempts_made

    uri, options = delta_location(_path(config, table), config.object_store)
    data = pa.Table.from_pylist([{c: r.get(c) for c in table.contract.names} for r in rows],
                                schema=table.contract.arrow_schema())
    attempts_made(lambda: write_deltalake(uri, data, mode="append", schema_mode="merge", storage_options=options,
                                          configuration={"delta.checkpointInterval": "10"}),
                  attempts=8, base_delay=0.1, max_delay=2.0, only=(CommitFailedError,))


def record(config: Config, erasure: Erasure, offsets) -> None:
    """Append a request's erased positions, then its *recorded* row (``offsets``: a pyarrow
    table with ``partition`` and ``offset``). Positions first: a reader that sees the request
    sees its offsets; offsets without a request (a crash between) are skipped all the same."""
    import pyarrow as pa

    if offsets.num_rows:
        n = offsets.num_rows
        rows = pa.table({"erasure_id": [erasure.erasure_id] * n, "dataset": [erasure.dataset] * n,
                         "topic": [erasure.topic] * n, "partition": offsets.column("partition").cast(pa.int32()),
                         "offset": offsets.column("offset").cast(pa.int64())})
        _append(config, ERASED_OFFSETS, rows.to_pylist())
    _append(config, ERASURES, [_row(erasure, "recorded", erasure.requested_at)])


def mark(config: Config, erasure: Erasure, event: str, detail: dict) -> None:
    """Append the *applied* or *purged* event of ``erasure`` with what it did."""
    if event not in EVENTS[1:]:
        raise ValueError(f"event {event!r} is not one of {EVENTS[1:]}")
    _append(config, ERASURES, [{**_row(erasure, event, datetime.now(timezone.utc)),
                                "detail": json.dumps(detail, sort_keys=True, default=str)}])


def _row(e: Erasure, event: str, at: datetime) -> dict:
    return {"erasure_id": e.erasure_id, "dataset": e.dataset, "topic": e.topic, "event": event, "field": e.field,
            "subject": e.subject, "block": e.block, "reason": e.reason, "requested_by": e.requested_by,
            "positions": json.dumps({str(p): o for p, o in sorted(e.positions.items())}),
            "offsets": e.offsets, "at": at}


def erasures(config: Config, dataset: str | None = None) -> list[Erasure]:
    """Every request (of ``dataset``), oldest first, with its events folded in."""
    table = open_table(_path(config, ERASURES), store=config.object_store)
    if table is None:
        return []
    where = "" if dataset is None else " WHERE dataset = '" + dataset.replace("'", "''") + "'"
    out: dict[str, dict] = {}
    for r in sorted(query(table, f"SELECT * FROM t{where}"), key=lambda r: r["at"]):
        e = out.setdefault(r["erasure_id"], {"row": r})
        if r["event"] in ("applied", "purged"):
            e[r["event"]] = (r["at"], json.loads(r["detail"] or "{}"))
    result = []
    for e in out.values():
        r = e["row"]
        applied, purged = e.get("applied", (None, None)), e.get("purged", (None, None))
        result.append(Erasure(
            r["erasure_id"], r["dataset"], r["topic"], r["field"], r["subject"], bool(r["block"]), r["reason"],
            r["requested_by"], r["at"], {int(p): o for p, o in json.loads(r["positions"] or "{}").items()},
            int(r["offsets"] or 0), applied[0], purged[0], applied[1], purged[1]))
    return sorted(result, key=lambda e: e.requested_at)


@dataclass(frozen=True)
class ErasedOffsets:
    """The erased positions of one topic at one version of the ledger: ``table`` a pyarrow
    table (``partition`` int32, ``offset`` int64), sorted; ``version`` None: no erasure yet."""

    version: int | None
    table: object

    @property
    def empty(self) -> bool:
        return self.table.num_rows == 0

    @functools.cached_property
    def _by_partition(self) -> dict[int, "object"]:
        import numpy as np

        parts = self.table.column("partition").to_numpy()
        offsets = self.table.column("offset").to_numpy().astype(np.int64)
        return {int(p): np.sort(offsets[parts == p]) for p in np.unique(parts)}

    def per_partition(self) -> dict[int, "object"]:
        """Per partition, its erased offsets as a sorted numpy array (computed once; a copy of
        the mapping, the arrays shared: do not change them)."""
        return dict(self._by_partition)

    def within(self, partition: int, start: int, end: int) -> int:
        """How many of ``partition``'s offsets in ``[start, end)`` are erased."""
        import numpy as np

        got = self.per_partition().get(partition)
        if got is None:
            return 0
        return int(np.searchsorted(got, end) - np.searchsorted(got, start))


_CACHE: dict[tuple[str, str], tuple[object, ErasedOffsets]] = {}
_LOCK = threading.Lock()


def erased_offsets(config: Config, topic: str) -> ErasedOffsets:
    """The erased positions of ``topic`` now: read again only when the ledger's version moved
    (one cheap look at its log per call: the speed stream asks before every micro-batch)."""
    import pyarrow as pa

    path = _path(config, ERASED_OFFSETS)
    with _LOCK:
        held = _CACHE.get((path, topic))
    table = None
    if held is not None:
        table = held[0]
        try:
            table.update_incremental()
        except Exception:  # noqa: BLE001 — the table was replaced (a test's lake): read it again
            table = None
        if table is not None and table.version() == held[1].version:
            return held[1]
    table = table or open_table(path, store=config.object_store)
    if table is None:
        return ErasedOffsets(None, pa.table({"partition": pa.array([], pa.int32()),
                                             "offset": pa.array([], pa.int64())}))
    quoted = topic.replace("'", "''")
    from deltalake import QueryBuilder

    got = pa.table(QueryBuilder().register("t", table).execute(
        f"SELECT DISTINCT \"partition\", \"offset\" FROM t WHERE topic = '{quoted}' "
        "ORDER BY \"partition\", \"offset\"").read_all())
    got = pa.table({"partition": got.column("partition").cast(pa.int32()),
                    "offset": got.column("offset").cast(pa.int64())})
    found = ErasedOffsets(table.version(), got)
    with _LOCK:
        _CACHE[(path, topic)] = (table, found)
    return found


def positions_sql(topic: str, offsets: dict[int, "list[int]"]) -> str:
    """The SQL predicate (Delta's and DataFusion's) of ``offsets`` per partition of ``topic``."""
    quoted = topic.replace("'", "''")
    parts = [f"(\"_partition\" = {int(p)} AND \"_offset\" IN ({', '.join(str(int(o)) for o in sorted(os_))}))"
             for p, os_ in sorted(offsets.items()) if len(os_)]
    return f"\"_topic\" = '{quoted}' AND ({' OR '.join(parts) or 'FALSE'})"


def held_positions(table, topic: str, offsets: dict[int, "list[int]"]) -> dict[int, list[int]]:
    """Which of ``offsets`` (per partition of ``topic``) the delta-rs ``table`` holds rows at:
    its position columns read (nothing else), matched in numpy, so a large erased set costs
    no large predicate."""
    import numpy as np
    import pyarrow as pa
    from deltalake import QueryBuilder

    wanted = {int(p): np.asarray(sorted(o), dtype=np.int64) for p, o in offsets.items() if len(o)}
    if not wanted:
        return {}
    quoted = topic.replace("'", "''")
    lo = min(int(o[0]) for o in wanted.values())
    hi = max(int(o[-1]) for o in wanted.values())
    parts = ", ".join(str(p) for p in sorted(wanted))
    got = pa.table(QueryBuilder().register("t", table).execute(
        f"SELECT \"_partition\" AS p, \"_offset\" AS o FROM t WHERE \"_topic\" = '{quoted}' AND "
        f"\"_partition\" IN ({parts}) AND \"_offset\" BETWEEN {lo} AND {hi}").read_all())
    ps, os_ = got.column("p").to_numpy(), got.column("o").to_numpy().astype(np.int64)
    out = {}
    for p, want in wanted.items():
        here = os_[ps == p]
        hit = here[np.isin(here, want)]
        if len(hit):
            out[p] = sorted(set(hit.tolist()))
    return out


class Removed(NamedTuple):
    """What ``remove_rows`` did: rows deleted, the commit's version, the files it removed and added."""

    rows: int
    version: int | None
    files_removed: int = 0
    files_added: int = 0


def remove_rows(path: str, topic: str, offsets: dict[int, "list[int]"], metadata: dict, store=None,
                check: Callable[[str], None] | None = None) -> Removed:
    """Delete the rows of the table at ``path`` at the positions ``offsets`` (per partition of
    ``topic``), by delta-rs, in one commit whose ``userMetadata`` is ``metadata``. No such row
    (or no table): no commit, ``Removed(0, None)``. A conflict with a concurrent commit is
    retried; ``check`` runs before each attempt (the writer's lease)."""
    from deltalake import CommitProperties, DeltaTable
    from deltalake.exceptions import CommitFailedError

    from loglake.core.retrying import attempts_made

    uri, options = delta_location(path, store)
    props = CommitProperties(custom_metadata={"userMetadata": json.dumps(metadata, sort_keys=True)})

    def attempt() -> Removed:
        table = open_table(path, store=store)
        if table is None:
            return Removed(0, None)
        held = held_positions(table, topic, offsets)
        if not held:
            return Removed(0, None)
        if check is not None:
            check(f"erase rows of {path}")
        target = DeltaTable(uri, version=table.version(), storage_options=options)
        metrics = target.delete(positions_sql(topic, held), commit_properties=props)
        return Removed(int(metrics.get("num_deleted_rows", sum(len(o) for o in held.values()))), target.version(),
                       int(metrics.get("num_removed_files", 0)), int(metrics.get("num_added_files", 0)))

    return attempts_made(attempt, attempts=8, base_delay=0.2, max_delay=3.0, only=(CommitFailedError,))[0]
