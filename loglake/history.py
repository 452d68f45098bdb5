"""``loglake history TABLE``: a table's Delta history, each version with loglake's meaning.

Delta records what happened (WRITE, DELETE, OPTIMIZE, ...); loglake records why, in what
its writers leave behind: a speed micro-batch tags its commit with the stream's transaction
(``txn``: application id and batch id) and the schema version (``userMetadata``); a batch
run, a quality gate's swap, maintenance and a rebuild record their job and run id (and the
ranges) as the commit's ``userMetadata`` (``spark_jobs.delta_io.commit_metadata``); the
offsets ledger says from which version on the batch side is served (a publish or a
compaction); ``_maintenance_log`` which operation made which versions. Read with delta-rs,
no JVM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from loglake.config import Config, Dataset
from loglake.contracts import MAINTENANCE_LOG
from loglake.errors import ParamError

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
    from loglake.tables import dataset_tables

    known = {t.name: Resolved(ds, t.layer, t.name, t.path)
             for ds in config.datasets.values() for t in dataset_tables(config, ds)}
    if table not in known:
        raise ParamError("table", f"unknown table {table!r}; known tables: {', '.join(sorted(known))}")
    return known[table]


def _txn(path: str, version: int) -> dict | None:
    """The commit's ``txn`` action (appId, version), from its log file; None when it has none
    or the log is not on a filesystem readable here."""
    from pathlib import Path

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
    from loglake.tables import open_table, query

    table = open_table(config.system_table_path(MAINTENANCE_LOG))
    if table is None:
        return []
    quoted = path.replace("'", "''")
    return query(table, f"SELECT operation, version_before, version_after, run_id FROM t WHERE path = '{quoted}'")


def _served(config: Config, ref: Resolved) -> dict[int, list[dict]]:
    """Version → the ledger rows that made it the served one (batch and quarantine tables)."""
    from loglake.ledger import ledger_rows

    column = {"batch": "batch_version", "quarantine": "quarantine_version"}.get(ref.layer)
    out: dict[int, list[dict]] = {}
    if column is None:
        return out
    for r in ledger_rows(config, ref.ds):
        if r.get(column) is not None and r.get("state") in ("published", "compacted"):
            out.setdefault(int(r[column]), []).append(r)
    return out


def meaning(ref: Resolved, entry: dict, txn: dict | None, maintenance: list[dict], served: list[dict]) -> str:
    """What a version is, in loglake's words."""
    v = entry["version"]
    try:
        meta = json.loads(entry.get("userMetadata") or "{}")
    except ValueError:
        meta = {}
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
    if v == 0 and not parts:
        parts.append("table created")
    for r in served:
        what = "published" if r["state"] == "published" else "compacted"
        rng = f" [{r['partition']}] [{r['start']}, {r['end']})" if r["state"] == "published" else ""
        parts.append(f"served from here on ({what} by run {r['run_id']}{rng})")
    return "; ".join(dict.fromkeys(parts)) or f"not written by loglake ({entry.get('operation')})"


def _metrics(entry: dict) -> str:
    m = entry.get("operationMetrics") or {}
    out = [fmt.format(m[k]) for k, fmt in _METRICS if m.get(k) not in (None, "0", 0)]
    return ", ".join(dict.fromkeys(out))


def table_history(config: Config, table: str, limit: int = 20) -> list[dict]:
    """The newest ``limit`` versions of ``table``: version, timestamp, operation, metrics, meaning."""
    from loglake.tables import open_table

    if limit < 1:
        raise ParamError("limit", f"must be >= 1, found {limit}")
    ref = resolve(config, table)
    delta = open_table(ref.path)
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
