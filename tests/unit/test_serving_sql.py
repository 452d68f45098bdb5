"""The serving view's SQL: batch strictly below the watermark, speed at or above it."""

from __future__ import annotations

from spark_jobs.predicates import below_watermark
from spark_jobs.serving import changelog_view_sql, events_view_sql


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
