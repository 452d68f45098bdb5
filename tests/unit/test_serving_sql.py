"""The serving view's SQL: batch strictly below the watermark, speed at or above it."""

from __future__ import annotations

from loglake.ledger.snapshots import DatasetSnapshot, served_ranges
from loglake.core.predicates import below_watermark
from loglake.serving.sql import changelog_view_sql, events_view_sql, from_batch


def test_below_watermark_predicate():
    assert below_watermark({}) == "false"  # no batch yet: every speed row serves
    assert below_watermark({1: 20, 0: 5}) == "(_partition = 0 AND _offset < 5) OR (_partition = 1 AND _offset < 20)"


def test_events_view_is_disjoint_by_construction():
    sql = events_view_sql("batch.jv", "speed.jv", {0: 5}, ["a", "_offset"])
    batch, speed = sql.split(" UNION ALL ")
    assert batch == "SELECT `a`, `_offset` FROM batch.jv WHERE (_partition = 0 AND _offset < 5)"
    assert speed == "SELECT `a`, `_offset` FROM speed.jv WHERE NOT ((_partition = 0 AND _offset < 5))"
    assert events_view_sql(None, "speed.jv", {}, ["a"]) == "SELECT `a` FROM speed.jv WHERE NOT (false)"


def test_changelog_view_keeps_newest_per_key_and_drops_tombstones():
    sql = changelog_view_sql("batch.c", "speed.c", {0: 9}, "k", ["k", "v", "_offset", "_partition", "_kafka_timestamp"])
    # Offsets order a key's changes within its partition only; across partitions, Kafka time.
    assert "PARTITION BY `k`, _partition ORDER BY _offset DESC" in sql
    assert "PARTITION BY `k` ORDER BY _kafka_timestamp DESC, _partition DESC" in sql
    assert "_offset DESC, _partition DESC" not in sql
    assert "false AS _deleted FROM batch.c WHERE (_partition = 0 AND _offset < 9)" in sql
    assert "_deleted FROM speed.c WHERE NOT ((_partition = 0 AND _offset < 9))" in sql
    assert sql.endswith("WHERE _rank = 1 AND NOT _deleted")


def test_batch_serves_from_a_start_above_zero_only_where_one_is_given():
    assert from_batch({0: 5, 1: (0, 20)}) == below_watermark({0: 5, 1: 20})
    assert from_batch({1: (7, 20), 0: 5}) == ("(_partition = 0 AND _offset < 5) OR "
                                              "(_partition = 1 AND _offset >= 7 AND _offset < 20)")
    sql = events_view_sql("batch.jv", "speed.jv", {0: (3, 9)}, ["a"])
    assert sql.endswith("FROM speed.jv WHERE NOT ((_partition = 0 AND _offset >= 3 AND _offset < 9))")


def row(p: int, start: int, end: int, state: str = "published") -> dict:
    return {"partition": p, "start": start, "end": end, "state": state}


def test_watermarks_of_coverage_from_offset_zero_come_from_the_ledger_alone():
    ledger = [row(0, 0, 10), row(0, 10, 25), row(0, 30, 40), row(1, 0, 4, "lost"), row(1, 4, 9),
              row(2, 0, 5, "written"), row(3, 5, 8)]
    snap = DatasetSnapshot("ds", {}, None, 3, ledger)
    assert snap.coverage() == {0: (0, 25), 1: (0, 9), 3: (5, 8)}
    # No Kafka is asked (there is no config to ask with) when every coverage starts at 0.
    del ledger[-1]
    assert served_ranges(None, None, DatasetSnapshot("ds", {}, None, 3, ledger)) == {0: (0, 25), 1: (0, 9)}
