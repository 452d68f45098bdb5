"""The serving view's SQL, engine-neutral: batch below the watermark, speed above it.

Per partition p with batch watermark W_p, the serving view of an events dataset is the
batch rows with ``_offset < W_p`` plus the speed rows with ``_offset >= W_p``: disjoint
by construction, so counts and sums over it are exact. For a changelog dataset it is the
batch latest state (as of W_p) with the speed changes at or above W_p folded on top:
newest offset per key wins, tombstones delete.

Plain strings, no engine: Spark (``loglake.serving.spark``) and the Arrow reader
(``loglake.serving.arrow``, delta-rs' SQL engine) run the same statements.
"""

from __future__ import annotations

from typing import Mapping

from loglake.core.predicates import below_watermark

Marks = Mapping[int, "int | tuple[int, int]"]  # partition → W_p, or (start, W_p): what batch serves


def from_batch(watermarks: Marks) -> str:
    """The rows the serving view takes from the batch layer: per partition, offsets below W_p,
    or in ``[start, W_p)`` where a start above 0 is given (``loglake.ledger.snapshots.served_ranges``)."""
    bounds = {p: m if isinstance(m, tuple) else (0, m) for p, m in watermarks.items()}
    if all(start == 0 for start, _w in bounds.values()):
        return below_watermark({p: w for p, (_s, w) in bounds.items()})
    return " OR ".join(f"(_partition = {p} AND _offset < {w})" if start == 0 else
                       f"(_partition = {p} AND _offset >= {start} AND _offset < {w})"
                       for p, (start, w) in sorted(bounds.items()))


def _layers_union(batch: str | None, speed: str | None, watermarks: Marks,
                  batch_cols: str, speed_cols: str) -> str:
    """Batch rows below the watermark UNION ALL speed rows at or above it (either may be absent)."""
    below = from_batch(watermarks)
    parts = []
    if batch:
        parts.append(f"SELECT {batch_cols} FROM {batch} WHERE {below}")
    if speed:
        parts.append(f"SELECT {speed_cols} FROM {speed} WHERE NOT ({below})")
    return " UNION ALL ".join(parts)


def _quoted(columns: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns)


def events_view_sql(batch: str | None, speed: str | None, watermarks: Marks,
                    columns: list[str]) -> str:
    cols = _quoted(columns)
    return _layers_union(batch, speed, watermarks, cols, cols)


def changelog_view_sql(batch: str | None, speed: str | None, watermarks: Marks,
                       key: str | list[str], columns: list[str]) -> str:
    cols = _quoted(columns)
    by = _quoted([key] if isinstance(key, str) else key)
    union = _layers_union(batch, speed, watermarks, f"{cols}, false AS _deleted", f"{cols}, _deleted")
    # Newest per key as ``loglake.lake.delta_io.latest_per_key`` decides: by offset within a
    # partition, then (a key spread over partitions) by Kafka timestamp, then partition.
    in_partition = (f"SELECT *, row_number() OVER (PARTITION BY {by}, _partition ORDER BY _offset DESC) "
                    f"AS _in_p FROM ({union})")
    across = (f"SELECT *, row_number() OVER (PARTITION BY {by} ORDER BY _kafka_timestamp DESC, "
              f"_partition DESC) AS _rank FROM ({in_partition}) WHERE _in_p = 1")
    return f"SELECT {cols} FROM ({across}) WHERE _rank = 1 AND NOT _deleted"


def null_filled(sides: Mapping[str, tuple[str, dict[str, str]] | None]) -> tuple[dict[str, str | None], list[str]]:
    """Every column of either side (the first side's order first), ``_deleted`` apart, and per
    side what to read: its name, or a subquery giving the columns it lacks as typed nulls.
    ``sides``: side → (name, {column: SQL type}), or None for a side with no table. Plain
    strings: the Arrow views (``loglake.serving.arrow``) use it too."""
    columns: dict[str, str] = {}
    for side in sides.values():
        for c, t in (side[1] if side else {}).items():
            if c != "_deleted":
                columns.setdefault(c, t)
    out: dict[str, str | None] = {}
    for key, side in sides.items():
        if side is None:
            out[key] = None
            continue
        name, have = side
        missing = [f"CAST(NULL AS {t}) AS `{c}`" for c, t in columns.items() if c not in have]
        out[key] = f"(SELECT *, {', '.join(missing)} FROM {name})" if missing else name
    return out, list(columns)
