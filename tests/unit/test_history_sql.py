"""The SCD type 2 history's SQL (``loglake.serving.history``), run by DataFusion (delta-rs'
engine, no JVM) over small Delta tables delta-rs writes: versions, their validity, deletes,
unchanged re-snapshots, a change present twice, and the history read back as events."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from loglake.serving.history import history_sql, versions_sql

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
COLUMNS = ["k", "v", "_partition", "_offset", "_kafka_timestamp"]


def changes(rows) -> pa.Table:
    """(key, value or None for a delete, offset, seconds after T0) → a change table."""
    return pa.table({
        "k": [r[0] for r in rows], "v": [r[1] for r in rows], "_partition": pa.array([0] * len(rows), pa.int32()),
        "_offset": pa.array([r[2] for r in rows], pa.int64()),
        "_kafka_timestamp": pa.array([T0 + timedelta(seconds=r[3]) for r in rows], pa.timestamp("us", tz="UTC")),
        "_deleted": [r[1] is None for r in rows],
        "_time": pa.array([T0 + timedelta(seconds=r[3]) for r in rows], pa.timestamp("us", tz="UTC")),
    })


def run(tmp_path, name: str, table: pa.Table, sql_of) -> list[dict]:
    path = tmp_path / name
    write_deltalake(str(path), table)
    qb = QueryBuilder().register("e", DeltaTable(str(path)))
    out = pa.table(qb.execute(sql_of("e")).read_all()).to_pylist()
    return sorted(out, key=lambda r: (r["k"], r["valid_from"]))


@pytest.fixture
def lifecycle(tmp_path):
    rows = [("a", "1", 0, 10), ("a", "2", 1, 20), ("b", "x", 2, 20), ("a", "3", 3, 30), ("a", None, 4, 40),
            ("a", "4", 5, 50), ("b", "x", 6, 60),  # b re-snapshotted unchanged: no new version
            ("c", "y", 7, 70), ("c", None, 8, 80), ("c", None, 9, 81),  # a delete, then its tombstone
            # d: deleted, its tombstone timed by another clock (no source time: Kafka's), re-inserted
            ("d", "1", 10, 90), ("d", None, 11, 100), ("d", None, 12, 9999), ("d", "2", 13, 110)]
    return run(tmp_path, "events", changes(rows), lambda e: history_sql(f"SELECT * FROM {e}", ["k"], COLUMNS))


def test_a_key_inserted_updated_twice_deleted_and_reinserted_has_four_contiguous_versions(lifecycle):
    a = [r for r in lifecycle if r["k"] == "a"]
    secs = lambda t: None if t is None else int((t - T0).total_seconds())
    assert [(r["v"], secs(r["valid_from"]), secs(r["valid_to"]), r["is_current"], r["_closed_by_delete"])
            for r in a] == [("1", 10, 20, False, False), ("2", 20, 30, False, False), ("3", 30, 40, False, True),
                            ("4", 50, None, True, False)]
    assert [(r["_offset"], r["_closed_offset"]) for r in a] == [(0, 1), (1, 3), (3, 4), (5, None)]


def test_an_unchanged_resnapshot_opens_no_version_and_a_second_delete_closes_nothing(lifecycle):
    assert [(r["v"], r["is_current"], r["_offset"]) for r in lifecycle if r["k"] == "b"] == [("x", True, 2)]
    assert [(r["v"], r["_closed_offset"], r["_closed_by_delete"]) for r in lifecycle if r["k"] == "c"] == [
        ("y", 8, True)]


def test_the_log_orders_a_keys_versions_not_their_times(lifecycle):
    d = [(r["v"], r["is_current"], r["_closed_offset"]) for r in lifecycle if r["k"] == "d"]
    assert d == [("1", False, 11), ("2", True, None)]


def test_a_history_read_back_as_events_gives_itself_and_a_change_present_twice_counts_once(tmp_path, lifecycle):
    history = pa.Table.from_pylist(lifecycle)
    again = run(tmp_path, "history", history,
                lambda h: history_sql(versions_sql(h, COLUMNS), ["k"], COLUMNS))
    assert again == lifecycle
    # The history and the same changes once more (a view whose speed side overlaps it).
    both = run(tmp_path, "both", history, lambda h: history_sql(
        f"{versions_sql(h, COLUMNS)} UNION ALL SELECT {', '.join(COLUMNS)}, false AS _deleted, "
        f"valid_from AS _time FROM {h}", ["k"], COLUMNS))
    assert both == lifecycle
