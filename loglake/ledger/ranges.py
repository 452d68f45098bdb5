"""The offsets ledger: which ranges the batch layer has recomputed, and so the batch watermarks.

A Delta table (``loglake.core.contracts.LEDGER``) with one row per range and state. The batch
job appends a range as ``written`` after its rows are committed; the quality gate
appends it again as ``published`` once its suite passed. The batch watermark W_p of a
partition is the end of the contiguous published coverage from its earliest retained
offset (``compute_watermarks``, a pure rule). Read here without a JVM (delta-rs), so
planning in an Airflow task or the CLI stays fast.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from loglake.core.config import Config, Dataset
from loglake.core.contracts import LEDGER
from loglake.kafka.admin import log_bounds
from loglake.tables import open_table, query


def ledger_path(config: Config) -> str:
    return config.system_table_path(LEDGER)


def ledger_rows(config: Config, ds: Dataset, version: int | None = None) -> list[dict]:
    """The ledger's rows of ``ds`` on its current topic (empty when nothing ran yet), at
    ``version`` of the ledger (its current one by default). Columns a ledger written by an
    older loglake lacks read as None."""

    table = open_table(ledger_path(config), version, config.object_store)
    if table is None:
        return []
    present = set(table.schema().to_arrow().names)
    columns = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in LEDGER.contract.names)
    name = ds.name.replace("'", "''")
    topic = ds.topic.replace("'", "''")
    return query(table, f"SELECT {columns} FROM t WHERE dataset = '{name}' "
                        f"AND topic = '{topic}' ORDER BY \"partition\", start, committed_at")


# Ledger states that cover offsets for the watermark: recomputed and validated, or lost
# (deleted by Kafka before a layer read them, and accepted as lost by an operator).
COVERING = (None, "published", "lost")


def serving_record(rows: Sequence[Mapping]) -> Mapping | None:
    """The ledger row that recorded the versions readers serve: the newest publish or
    compaction (both under the dataset's single writer); None for a ledger from before
    versions were recorded."""
    marked = [r for r in rows if r.get("batch_version") is not None]
    return max(marked, key=lambda r: (r["committed_at"], r["batch_version"])) if marked else None


def serving_point(rows: Sequence[Mapping]) -> tuple[int | None, int | None]:
    """(batch version, quarantine version) that readers serve (``serving_record``'s). (None,
    None) for a ledger from before versions were recorded: readers then take the tables'
    current ones."""
    newest = serving_record(rows)
    if newest is None:
        return None, None
    return newest["batch_version"], newest.get("quarantine_version")


def lost_ranges(rows: Sequence[Mapping]) -> list[dict]:
    """The ranges an operator accepted as lost (``loglake accept-loss``), oldest first."""
    return sorted((dict(r) for r in rows if r.get("state") == "lost"), key=lambda r: (r["committed_at"], r["partition"]))


def batch_watermarks(config: Config, ds: Dataset, earliest: dict[int, int] | None = None) -> dict[int, int]:
    """Per partition, the batch watermark W_p (absent where batch has not covered the
    partition from its earliest retained offset). ``earliest`` is read from Kafka unless given,
    and not at all when the ledger holds no rows of the dataset (then there are none)."""
    rows = ledger_rows(config, ds)
    if not rows:
        return {}
    if earliest is None:

        earliest = {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}
    return compute_watermarks(rows, earliest)


def compute_watermarks(ledger: Sequence[Mapping], earliest: Mapping[int, int] | None = None) -> dict[int, int]:
    """Per partition, the end of the contiguous coverage from the earliest offset.

    ``ledger`` rows have ``partition``, ``start``, ``end`` and ``state``: *published* and
    *lost* ranges count (a *written* range waits for its quality gate; rows from before the
    gate existed have no state and count as published; a *lost* range is one the log lost
    and an operator accepted). Overlaps and repeats merge;
    a gap stops the watermark (what lies beyond a gap is not published). With
    ``earliest`` (partition → earliest retained offset), coverage must start at or before
    it: a partition whose first range starts later has no watermark, since its first
    offsets were never recomputed. (A watermark *below* the earliest offset is kept: it
    means offsets were deleted before batch read them, which planning reports as loss.)
    """
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for row in ledger:
        if row.get("state") in COVERING and row["end"] > row["start"]:
            by_partition.setdefault(int(row["partition"]), []).append((int(row["start"]), int(row["end"])))
    marks = {}
    for p, spans in by_partition.items():
        spans.sort()
        if earliest is not None and spans[0][0] > earliest.get(p, 0):
            continue
        w = spans[0][1]
        for s, e in spans[1:]:
            if s > w:
                break
            w = max(w, e)
        marks[p] = w
    return marks


# Ledger states whose ranges the batch layer published (``loglake_records_total{layer="batch"}``
# counts each offset once, when a range first publishes it; a lost range published nothing).
PUBLISHING = (None, "published")


def published_spans(ledger: Sequence[Mapping], exclude_run: str | None = None) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the merged ``[start, end)`` spans some published range covers (rows of
    run ``exclude_run`` left out: a run's own earlier try does not make its offsets old)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for row in ledger:
        if row.get("state") in PUBLISHING and row["end"] > row["start"] and (
                exclude_run is None or row.get("run_id") != exclude_run):
            spans.setdefault(int(row["partition"]), []).append((int(row["start"]), int(row["end"])))
    merged: dict[int, list[tuple[int, int]]] = {}
    for p, found in spans.items():
        out: list[tuple[int, int]] = []
        for s, e in sorted(found):
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        merged[p] = out
    return merged


def uncovered(spans: Sequence[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` that no span of ``spans`` (merged, sorted) covers."""
    out, at = [], start
    for s, e in spans:
        if e <= at or s >= end:
            continue
        if s > at:
            out.append((at, s))
        at = max(at, e)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return out


def fresh_from(spans: Sequence[tuple[int, int]], start: int, end: int) -> int | None:
    """Where the part of ``[start, end)`` that ``spans`` leaves uncovered begins, when that part
    is one tail ``[f, end)`` (``end`` when all is covered); None when a gap lies below a covered span."""
    parts = uncovered(spans, start, end)
    if not parts:
        return end
    return parts[0][0] if len(parts) == 1 and parts[0][1] == end else None
