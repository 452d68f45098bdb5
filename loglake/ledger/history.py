"""``loglake history TABLE``: a table's Delta history, each version with loglake's meaning.

Delta records what happened (WRITE, DELETE, OPTIMIZE, ...); loglake records why, in what
its writers leave behind: a speed micro-batch tags its commit with the stream's transaction
(``txn``: application id and batch id) and the schema version (``userMetadata``); a batch
run, a quality gate's swap, maintenance and a rebuild record their job and run id (and the
ranges) as the commit's ``userMetadata`` (``loglake.lake.delta_io.commit_metadata``); the
offsets ledger says from which version on the batch side is served (a publish or a
compaction); ``_maintenance_log`` which operation made which versions. Read with delta-rs,
no JVM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from loglake.core.config import Config, Dataset
from loglake.core.contracts import MAINTENANCE_LOG
from loglake.core.errors import ParamError
from loglake.ledger.ranges import ledger_rows, serving_record
from loglake.tables import dataset_tables, open_table, query

# Ledger states that move the versions readers are served: a publish, a compaction, an erasure.
SERVING_STATES = ("published", "compacted", "erased")

_METRICS = (("numOutputRows", "+{} rows"), ("num_added_rows", "+{} rows"), ("numTargetRowsInserted", "+{} inserted"),
            ("numTargetRowsUpdated", "{} updated"), ("numTargetRowsDeleted", "{} deleted"),
            ("numDeletedRows", "-{} rows"), ("numRemovedFiles", "-{} files"), ("numAddedFiles", "+{} files"),
            ("numFilesRemoved", "-{} files"), ("numFilesAdded", "+{} files"), ("numDeletedFiles", "-{} files"))


@dataclass(frozen=True)
class Resolved:
    ds: Dataset
    layer: str
    name: str
    path: str


def resolve(config: Config, table: str) -> Resolved:
    """The dataset table named ``table`` as in queries (``batch.job_views``, ``speed.company_ceos_latest``)."""

    known = {t.name: Resolved(ds, t.layer, t.name, t.path)
             for ds in config.datasets.values() for t in dataset_tables(config, ds)}
    if table not in known:
        raise ParamError("table", f"unknown table {table!r}; known tables: {', '.join(sorted(known))}")
    return known[table]


def _txn(path: str, version: int) -> dict | None:
    """The commit's ``txn`` action (appId, version), from its log file; None when it has none
    or the log is not on a filesystem readable here."""

    if "://" in path and not path.startswith("file:"):
        return None
    log = Path(path.removeprefix("file://").removeprefix("file:")) / "_delta_log" / f"{version:020d}.json"
    try:
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                return action["txn"]
    except (OSError, ValueError):
        return None
    return None


def _maintenance(config: Config, path: str) -> list[dict]:
    table = open_table(config.system_table_path(MAINTENANCE_LOG), store=config.object_store)
    if table is None:
        return []
    quoted = path.replace("'", "''")
    return query(table, f"SELECT operation, version_before, version_after, run_id FROM t WHERE path = '{quoted}'")


def _served(config: Config, ref: Resolved) -> dict[int, list[dict]]:
    """Version → the ledger rows that made it the served one (batch and quarantine tables)."""

    column = {"batch": "batch_version", "quarantine": "quarantine_version"}.get(ref.layer)
    out: dict[int, list[dict]] = {}
    if column is None:
        return out
    for r in ledger_rows(config, ref.ds):
        if r.get(column) is not None and r.get("state") in SERVING_STATES:
            out.setdefault(int(r[column]), []).append(r)
    return out


def _metadata(entry: dict) -> dict:
    """The commit's ``userMetadata`` as a dict (empty: none, or not loglake's JSON)."""
    try:
        meta = json.loads(entry.get("userMetadata") or "{}")
    except (ValueError, TypeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def made_by_loglake(entry: dict, txn: dict | None = None) -> bool:
    """Whether loglake made the commit of history ``entry``: its ``userMetadata`` names a loglake
    job, stream or step (every loglake writer sets it: ``loglake.lake.delta_io.commit_metadata``,
    ``append_idempotent``), or its ``txn`` action is a loglake stream's (a micro-batch written
    before the metadata named it)."""
    if any(str(k).startswith("loglake_") for k in _metadata(entry)):
        return True
    return str((txn or {}).get("appId", "")).startswith("loglake-")


def engine(entry: dict) -> str:
    """What wrote a commit, as its commitInfo says (``delta-rs:py-1.6.6``, ``Apache-Spark/4.0.0 Delta-Lake/4.0.0``)."""
    return entry.get("engineInfo") or entry.get("clientVersion") or "a writer that did not name itself"


def _restored_to(entry: dict) -> int | None:
    """The version a RESTORE commit took the table back to (None: not a RESTORE by version)."""
    if entry.get("operation") != "RESTORE":
        return None
    try:
        return int((entry.get("operationParameters") or {}).get("version"))
    except (TypeError, ValueError):
        return None


def _commit(version: int, entry: dict | None) -> dict:
    if entry is None:
        return {"version": version, "operation": "unknown", "engine": "a writer unknown (the commit is no longer in "
                "the Delta log)", "timestamp": "unknown time"}
    ts = datetime.fromtimestamp(entry.get("timestamp", 0) / 1000, timezone.utc)
    return {"version": version, "operation": entry.get("operation") or "unknown", "engine": engine(entry),
            "timestamp": ts.isoformat(timespec="seconds").replace("+00:00", "Z")}


def foreign_commits(path: str, served: int | None, served_at_ms: int | None = None,
                    upto: int | None = None, store=None) -> list[dict]:
    """The commits loglake did not make (``made_by_loglake``) that the table at ``path`` (on
    ``store``, the config's ``object_store``) holds
    at version ``upto`` (None: its newest) since version ``served`` (None: since it was
    created), oldest first, each ``{"version", "operation", "engine", "timestamp"}``.

    A RESTORE to a version at or after ``served`` takes the table back to that version: the
    commits it undid no longer count, nor does the RESTORE when that version held none.
    ``served_at_ms``: when ``served`` was recorded as served; a table whose commit ``served``
    is younger than that was made anew since (a rebuild, a table removed and written again),
    so all its commits count. No table: none.
    """

    table = open_table(path, upto, store)
    if table is None:
        return []
    newest = table.version()
    base = served if served is not None and served <= newest else None
    entries = {e["version"]: e for e in table.history(newest + 1 - (base or 0)) if e.get("version") is not None}
    if base is not None and served_at_ms is not None and entries.get(base, {}).get("timestamp", 0) > served_at_ms:
        base = None
        entries = {e["version"]: e for e in table.history(newest + 1) if e.get("version") is not None}
    start = -1 if base is None else base
    held: dict[int, list[dict]] = {start: []}  # version → the foreign commits the table holds there
    for v in range(start + 1, newest + 1):
        entry = entries.get(v)
        if entry is not None and (made_by_loglake(entry) or made_by_loglake(entry, _txn(path, v))):
            held[v] = held[v - 1]
            continue
        back = None if entry is None else _restored_to(entry)
        if back is not None and start <= back < v:
            held[v] = held[back] + ([_commit(v, entry)] if held[back] else [])
        else:
            held[v] = held[v - 1] + [_commit(v, entry)]
    return held[newest]


def meaning(ref: Resolved, entry: dict, txn: dict | None, maintenance: list[dict], served: list[dict]) -> str:
    """What a version is, in loglake's words."""
    v = entry["version"]
    meta = _metadata(entry)
    parts = []
    # A stream's commit names (stream, batch) in its metadata; Delta's txn action only on a
    # query's first micro-batch (and on every one the stream wrote before it named them).
    app = meta.get("loglake_stream") or (txn or {}).get("appId", "")
    batch = meta.get("loglake_batch", (txn or {}).get("version"))
    if app.startswith(f"loglake-speed-{ref.ds.name}-"):
        schema = meta.get("loglake_schema_version")
        parts.append(f"speed micro-batch {batch}" + (f" (schema v{schema})" if schema else ""))
    elif app.startswith(f"loglake-rebuild-{ref.ds.name}-"):
        parts.append(f"rebuild of the latest state: changes from the watermark folded in ({app})")
    job = meta.get("loglake_job")
    if job == "batch":
        where = "staged, swapped in by its quality gate" if meta.get("loglake_staged") else "in place"
        parts.append(f"batch run {meta.get('loglake_run_id')} wrote ranges {meta.get('loglake_ranges')} ({where}"
                     + (f", schema v{meta['loglake_schema_version']})" if meta.get("loglake_schema_version") else ")"))
    elif job == "quality":
        parts.append(f"quality gate of run {meta.get('loglake_run_id')}: validated rows of {meta.get('loglake_ranges')} "
                     "swapped in")
    elif job == "replay":
        parts.append(f"replay {meta.get('loglake_run_id')}: quarantined records the current config accepts moved "
                     "in (or out of the quarantine)")
    elif job == "erase":
        parts.append(f"erasure {meta.get('loglake_erasure')}: the erased records' rows deleted")
    elif job in ("maintenance", "rebuild") and not parts:
        parts.append(f"{job} run {meta.get('loglake_run_id')}")
    ops = [m for m in maintenance if m["version_before"] is not None and m["version_after"] is not None
           and m["version_before"] < v <= m["version_after"]]
    if ops:
        parts = [p for p in parts if not p.startswith("maintenance run")]
        parts.append("maintenance " + ", ".join(sorted({m["operation"] for m in ops})) + f" (run {ops[0]['run_id']})")
    if entry.get("operation") in ("ADD COLUMNS", "CHANGE COLUMN") or (
            entry.get("operation") == "ALTER TABLE" or "columns" in (entry.get("operationParameters") or {})):
        cols = (entry.get("operationParameters") or {}).get("columns")
        parts.append(f"schema evolved: columns added {cols}" if cols else "schema changed")
    if not parts and meta.get("loglake_step"):
        parts.append(f"loglake: {meta['loglake_step']}")
    if v == 0 and not parts:
        parts.append(f"table created (by {engine(entry)})")
    if not parts and not made_by_loglake(entry, txn):
        # Neither its metadata nor loglake's own records explain it: another writer's commit.
        parts.append(f"not written by loglake ({entry.get('operation')} by {engine(entry)}): a publish does not "
                     "serve it until the table is repaired")
    for r in served:
        what = r["state"] if r["state"] in SERVING_STATES else "compacted"
        rng = f" [{r['partition']}] [{r['start']}, {r['end']})" if r["state"] == "published" else ""
        parts.append(f"served from here on ({what} by run {r['run_id']}{rng})")
    return "; ".join(dict.fromkeys(parts))


def _metrics(entry: dict) -> str:
    m = entry.get("operationMetrics") or {}
    out = [fmt.format(m[k]) for k, fmt in _METRICS if m.get(k) not in (None, "0", 0)]
    return ", ".join(dict.fromkeys(out))


def table_history(config: Config, table: str, limit: int = 20) -> list[dict]:
    """The newest ``limit`` versions of ``table``: version, timestamp, operation, metrics, meaning."""

    if limit < 1:
        raise ParamError("limit", f"must be >= 1, found {limit}")
    ref = resolve(config, table)
    delta = open_table(ref.path, store=config.object_store)
    if delta is None:
        raise ParamError("table", f"{ref.name} has no Delta table yet at {ref.path}")
    maintenance = _maintenance(config, ref.path)
    served = _served(config, ref)
    rows = []
    for entry in delta.history(limit):
        v = entry["version"]
        ts = datetime.fromtimestamp(entry.get("timestamp", 0) / 1000, timezone.utc)
        rows.append({"version": v, "timestamp": ts.isoformat(timespec="seconds").replace("+00:00", "Z"),
                     "operation": entry.get("operation"), "metrics": _metrics(entry),
                     "meaning": meaning(ref, entry, _txn(ref.path, v), maintenance, served.get(v, [])),
                     "user_metadata": entry.get("userMetadata")})
    return rows


def format_history(table: str, rows: list[dict]) -> list[str]:
    lines = [f"{table}: {len(rows)} version(s), newest first"]
    for r in rows:
        metrics = f"  [{r['metrics']}]" if r["metrics"] else ""
        lines.append(f"  v{r['version']:<5} {r['timestamp']}  {r['operation']:<14}{metrics}  {r['meaning']}")
    return lines


def unserved_foreign_commits(config: Config, ds: Dataset, layer: str, ledger: list[dict],
                             upto: int | None = None) -> tuple[int | None, list[dict]] | None:
    """``(served version, foreign_commits since it)`` of ``ds``'s batch or quarantine table at
    version ``upto`` (None: its newest), the served version as the dataset's ``ledger`` rows
    record it. None: nothing to compare with (no table, or a ledger from before serving
    points with ranges published)."""
    point = serving_record(ledger)
    if point is None and any(r.get("state") in SERVING_STATES for r in ledger):
        return None
    path = config.table_path(ds, layer)
    served = None if point is None else point.get(f"{layer}_version")
    at = None if point is None else point["committed_at"]
    at_ms = None if at is None else int((at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    return served, foreign_commits(path, served, at_ms, upto, config.object_store)
