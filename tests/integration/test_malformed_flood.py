"""A flood of malformed records keeps the driver's memory bounded (issue 11, item 7).

Both layers carry the few quarantined records of a pass to the driver in its observation
(up to ``counting.CARRY_ROWS``), and beyond note where they are so that a second pass parses
only those. Noting every bad offset on the driver grows with the flood; above
``counting.EXACT_BAD_LIMIT`` offsets a pass notes one window per partition instead. Both limits
are lowered here so a small flood takes the bounded path; the tables must come out exact.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from loglake.batch.planning import plan_batch
from loglake.tables import open_table, query
from loglake.local.produce import produce
from loglake.records import counting
from loglake.batch.recompute import run_batch
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration

FLOOD = 1500


@pytest.fixture
def observed(monkeypatch):
    """The observations the passes made (the real ``counted``; its values kept once read)."""
    seen: list = []
    real = counting.counted

    def spy(*args, **kwargs):
        frame, obs = real(*args, **kwargs)
        seen.append(obs)
        return frame, obs

    monkeypatch.setattr(counting, "counted", spy)
    monkeypatch.setattr(counting, "EXACT_BAD_LIMIT", 100, raising=False)
    monkeypatch.setattr(counting, "CARRY_ROWS", 100)
    return seen


def flood(config, ds):
    produce(config, ds, 200, seed=91)
    produce(config, ds, FLOOD, seed=92, bad_fraction=1.0)
    produce(config, ds, 200, seed=93)


def assert_bounded(observations):
    assert observations
    gave_up = 0
    for obs in observations:
        values = dict(obs.get)
        rows = values.pop("carried")["rows"]
        assert "bad" not in values  # no per-record list on the driver
        assert len(repr(values)) < 2000, values
        assert rows is None or len(rows) <= counting.CARRY_ROWS  # carried only below the bound
        gave_up += rows is None
    assert gave_up, "the flood passed the carrying bound in some pass"


def quarantined(config, ds, layer):
    return query(open_table(config.table_path(ds, "quarantine")),
                 f"SELECT _partition, _offset, reason_code FROM t WHERE _layer = '{layer}'")


def test_batch_flood_passes_through_quarantine_with_bounded_driver_memory(spark, make_config, observed):
    config = make_config()
    ds = config.dataset("job_views")
    flood(config, ds)
    summary = run_batch(spark, config, ds, plan_batch(config, ds), "flood")
    assert (summary.records, summary.quarantined) == (400, FLOOD)
    rows = quarantined(config, ds, "batch")
    assert len(rows) == len({(r["_partition"], r["_offset"]) for r in rows}) == FLOOD
    assert all(r["reason_code"] for r in rows)
    assert_bounded(observed)


def test_speed_flood_passes_through_quarantine_with_bounded_driver_memory(spark, make_config, observed):
    config = make_config()
    ds = config.dataset("job_views")
    flood(config, ds)
    run_speed(spark, config, ds, available_now=True)
    assert len(query(open_table(config.table_path(ds, "speed")), "SELECT _offset FROM t")) == 400
    rows = quarantined(config, ds, "speed")
    assert len(rows) == len({(r["_partition"], r["_offset"]) for r in rows}) == FLOOD
    assert all(r["reason_code"] for r in rows)
    assert_bounded(observed)


def test_a_pass_carries_its_bad_rows_up_to_the_bound_in_bytes(spark, monkeypatch):
    """The carried rows stop at ``CARRY_BYTES`` as at ``CARRY_ROWS``, over tasks merged in any
    order: below the bound, exactly the bad rows; beyond, none, but still their count."""
    df = spark.range(40, numPartitions=4).select(
        F.lit("t").alias("_topic"), F.lit(0).alias("_partition"), F.col("id").alias("_offset"),
        F.current_timestamp().alias("_kafka_timestamp"), F.lit(None).cast("binary").alias("key"),
        F.expr("unhex(repeat('ab', 1000))").alias("value"),
        F.when(F.col("id") % 2 == 0, F.struct(F.lit("bad_json").alias("code"), F.lit("x").alias("message")))
        .alias("_reason"))

    def carried():
        observed, obs = counting.counted(df, exact=False)
        observed.collect()
        return obs.get["quarantined"], obs.get["carried"]

    n, c = carried()
    assert n == c["seen"] == 20 and sorted(r["_offset"] for r in c["rows"]) == list(range(0, 40, 2))
    assert {bytes(r["value"]) for r in c["rows"]} == {b"\xab" * 1000} and {r["reason_code"] for r in c["rows"]} == {
        "bad_json"}
    monkeypatch.setattr(counting, "CARRY_BYTES", 10_000)  # ten of the twenty
    n, c = carried()
    assert n == c["seen"] == 20 and c["rows"] is None
