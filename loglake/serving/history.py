"""A changelog's history, SCD type 2 (``history: scd2``): one row per version of each key.

A version is opened by a change that writes the key (an insert, an update, a snapshot read)
and closed by the key's next change: the next version's opening, or a delete. Its columns:
the row as the change wrote it (the dataset's fields after its transform, the provenance of
the change that opened it), then

- ``valid_from``: when the version began, the change's source time (Debezium's
  ``source.ts_ms``; a plain changelog's Kafka timestamp);
- ``valid_to``: when the next change of the key ended it (null while current);
- ``is_current``: it is the key's version now (not closed);
- ``_closed_partition``, ``_closed_offset``: the change that closed it (null while current);
- ``_closed_by_delete``: that change deleted the key.

A key's changes are ordered as the latest state orders them (``loglake.lake.delta_io.
latest_per_key``): by offset, a key's changes sharing a partition; a key a custom partitioner
spread over partitions by Kafka timestamp, then partition and offset. The log's order, not the
times: a tombstone carries no source time, and a database's clock may step back, yet the
history's current version is always the latest state's row. A change that changes no column
of the row (a re-snapshot of an unchanged row) opens no version.

The history is a function of a key's changes. The batch layer recomputes it from the whole
retained log, each run (``loglake.batch.recompute``), together with the versions the table
holds whose changes the log no longer retains (expired, or compacted away): each version is
itself a change (its opening), and a version closed by a delete carries that delete, so the
history outlives the log's retention. The view ``<dataset>_history`` is that table with the
speed layer's changes at or above the watermark folded on top, by the same statement.

Plain SQL strings (``loglake.serving.sql``'s way): Spark runs them in the batch job and its
serving views, DataFusion (delta-rs) in the Arrow reader.
"""

from __future__ import annotations

from typing import Sequence

from loglake.serving.sql import from_batch, Marks

# The columns a history row adds to the row; no field of a dataset with history may be named so.
COLUMNS = ("valid_from", "valid_to", "is_current", "_closed_partition", "_closed_offset", "_closed_by_delete")


def _q(columns: Sequence[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns)


def _order(keys: Sequence[str]) -> str:
    """A key's changes in the log's order (``_spread``: the key has changes in several partitions)."""
    return (f"PARTITION BY {_q(keys)} ORDER BY CASE WHEN _spread THEN _kafka_timestamp END, "
            f"CASE WHEN _spread THEN _partition ELSE 0 END, _offset")


def changes_sql(table: str, columns: Sequence[str], time: str = "_kafka_timestamp") -> str:
    """A table of changes (the speed table's rows, ``_deleted`` among them) as the events the
    history is made of; ``time``: the column of their source time (Debezium's ``_source_time``)."""
    return f"SELECT {_q(columns)}, _deleted, COALESCE({time}, _kafka_timestamp) AS _time FROM {table}"


def versions_sql(table: str, columns: Sequence[str], where: str = "") -> str:
    """A history table's versions as events again: each version's opening change, and the
    delete that closed it, if one did (its row's values stand in; a delete's are not read)."""
    closing = [{"_partition": "_closed_partition AS _partition", "_offset": "_closed_offset AS _offset"}.get(c, f"`{c}`")
               for c in columns]
    cond = f" AND ({where})" if where else ""
    return (f"SELECT {_q(columns)}, false AS _deleted, valid_from AS _time FROM {table} WHERE true{cond} "
            f"UNION ALL SELECT {', '.join(closing)}, true AS _deleted, valid_to AS _time FROM {table} "
            f"WHERE _closed_by_delete{cond}")


def history_sql(events: str, keys: Sequence[str], columns: Sequence[str]) -> str:
    """The history of ``events`` (a relation of ``columns`` plus ``_deleted`` and ``_time``; a
    change present twice, as two sides' copies of one offset, counts once)."""
    row = [c for c in columns if not c.startswith("_")]  # what a version is: the row's own columns
    order = _order(keys)
    copies = f"SELECT *, row_number() OVER (PARTITION BY _partition, _offset ORDER BY _deleted) AS _copy FROM ({events})"
    by_key = f"PARTITION BY {_q(keys)}"
    once = (f"SELECT *, MIN(_partition) OVER ({by_key}) <> MAX(_partition) OVER ({by_key}) AS _spread "
            f"FROM ({copies}) WHERE _copy = 1")
    prior = ", ".join([f"LAG(_deleted) OVER ({order}) AS _prev_deleted",
                       *(f"LAG(`{c}`) OVER ({order}) AS `_prev_{c}`" for c in row)])
    with_prior = f"SELECT *, {prior} FROM ({once})"
    same = " AND ".join(f"(`{c}` IS NOT DISTINCT FROM `_prev_{c}`)" for c in row) or "true"
    kept = (f"SELECT * FROM ({with_prior}) WHERE _deleted OR _prev_deleted IS NULL OR _prev_deleted "
            f"OR NOT ({same})")
    following = ", ".join(f"LEAD({c}) OVER ({order}) AS _next{c}" for c in ("_time", "_partition", "_offset", "_deleted"))
    nexts = f"SELECT *, {following} FROM ({kept})"
    return (f"SELECT {_q(columns)}, _time AS valid_from, _next_time AS valid_to, _next_offset IS NULL AS is_current, "
            f"_next_partition AS _closed_partition, _next_offset AS _closed_offset, "
            f"COALESCE(_next_deleted, false) AS _closed_by_delete FROM ({nexts}) WHERE NOT _deleted")


def time_column(ds) -> str:
    """The column of a change's source time: Debezium's ``_source_time``, else Kafka's timestamp."""
    return "_source_time" if ds.debezium else "_kafka_timestamp"


def view_name(ds) -> str:
    """The name of a dataset's history view."""
    return f"{ds.name}_history"


def view_of(ds, sides: dict, watermarks: Marks) -> str:
    """The view ``<dataset>_history`` over ``sides``: history, speed → (its name, {column: SQL
    type}), or None for a side with no table; a column one side lacks reads as null."""
    from loglake.serving.sql import null_filled

    trimmed = {side: None if v is None else (v[0], {c: t for c, t in v[1].items() if c not in COLUMNS})
               for side, v in sides.items()}
    named, columns = null_filled(trimmed)
    return view_sql(named["history"], named["speed"], watermarks, ds.keys, columns, time_column(ds))


def view_sql(history: str | None, speed: str | None, watermarks: Marks, keys: Sequence[str],
             columns: Sequence[str], time: str) -> str:
    """The view ``<dataset>_history``: the history table's versions with the speed changes at or
    above each partition's watermark folded on top (either side may be absent)."""
    parts = []
    if history:
        parts.append(versions_sql(history, columns))
    if speed:
        parts.append(f"SELECT * FROM ({changes_sql(speed, columns, time)}) WHERE NOT ({from_batch(watermarks)})")
    return history_sql(" UNION ALL ".join(parts), keys, columns)
