"""The speed layer against a real broker, real Spark and real Delta tables."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from loglake.kafka_admin import group_offsets, log_bounds
from loglake.produce import produce
from spark_jobs.speed import run_speed

pytestmark = pytest.mark.integration


def read(spark, config, ds, layer):
    return spark.read.format("delta").load(config.table_path(ds, layer))


def log_record_count(config, topic) -> int:
    # An idempotent, non-transactional producer writes contiguous offsets: the log holds end - earliest.
    return sum(hi - lo for lo, hi in log_bounds(config, topic).values())


def assert_exactly_once(spark, config, ds, good: int, bad: int) -> None:
    speed = read(spark, config, ds, "speed")
    quarantine = read(spark, config, ds, "quarantine")
    assert speed.count() == good
    assert speed.select("_partition", "_offset").distinct().count() == good
    assert quarantine.count() == bad
    assert quarantine.where(F.col("reason").isNull() | F.col("reason_code").isNull()).count() == 0
    # Every offset of the log lands once, in exactly one of the two tables.
    landed = speed.select("_partition", "_offset").unionByName(quarantine.select("_partition", "_offset"))
    assert landed.distinct().count() == landed.count() == good + bad == log_record_count(config, ds.topic)


def test_speed_lands_every_offset_once(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    res = produce(config, ds, 3000, bad_fraction=0.1, seed=11)
    assert len(res.by_partition) == ds.partitions  # records spread over every partition
    last = run_speed(spark, config, ds, available_now=True)
    assert last is not None
    assert_exactly_once(spark, config, ds, res.good, res.bad)
    speed = read(spark, config, ds, "speed")
    assert {"_topic", "_partition", "_offset", "_kafka_timestamp", "view_date", "duration_s"} <= set(speed.columns)
    assert speed.where(F.col("_topic") != ds.topic).count() == 0
    reasons = {r["reason_code"] for r in read(spark, config, ds, "quarantine").select("reason_code").collect()}
    assert reasons <= {"bad_json", "null_value", "not_an_object", "missing_field", "wrong_type", "out_of_domain"}
    assert len(reasons) >= 4
    # The position is committed to the dataset's consumer group, so lag tools see it.
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    assert group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends

    # More data later: the stream resumes where it stopped, still exactly once.
    more = produce(config, ds, 500, bad_fraction=0.2, seed=12)
    run_speed(spark, config, ds, available_now=True)
    assert_exactly_once(spark, config, ds, res.good + more.good, res.bad + more.bad)


def test_rerun_with_nothing_new_changes_nothing(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 200, seed=5)
    run_speed(spark, config, ds, available_now=True)
    from delta.tables import DeltaTable
    version = DeltaTable.forPath(spark, config.table_path(ds, "speed")).history(1).first()["version"]
    run_speed(spark, config, ds, available_now=True)
    assert DeltaTable.forPath(spark, config.table_path(ds, "speed")).history(1).first()["version"] == version
    assert read(spark, config, ds, "speed").count() == 200


def test_lost_checkpoint_resumes_after_landed_offsets(spark, make_config):
    import shutil

    config = make_config()
    ds = config.dataset("job_views")
    first = produce(config, ds, 400, bad_fraction=0.05, seed=21)
    run_speed(spark, config, ds, available_now=True)
    shutil.rmtree(config.checkpoint_path(ds))
    second = produce(config, ds, 100, bad_fraction=0.05, seed=22)
    run_speed(spark, config, ds, available_now=True)
    assert_exactly_once(spark, config, ds, first.good + second.good, first.bad + second.bad)


def test_changelog_latest_state_equals_last_value_per_key(spark, make_config):
    config = make_config(speed={"max_offsets_per_trigger": 800})
    ds = config.dataset("company_ceos")
    first = produce(config, ds, 1500, bad_fraction=0.05, seed=41)
    run_speed(spark, config, ds, available_now=True)
    second = produce(config, ds, 1500, bad_fraction=0.05, seed=42)
    run_speed(spark, config, ds, available_now=True)
    expected = {**first.last_value, **second.last_value}
    expected = {k: v for k, v in expected.items() if v is not None}  # tombstones delete
    assert first.tombstones + second.tombstones > 0
    latest = read(spark, config, ds, "latest").collect()
    got = {r["company_id"]: {"company_id": r["company_id"], "company": r["company"], "ceo": r["ceo"]}
           for r in latest}
    assert len(latest) == len(got)  # one row per key
    assert got == {k: {"company_id": v["company_id"], "company": v["company"], "ceo": v["ceo"]}
                   for k, v in expected.items()}
    # The change log itself keeps every valid change, tombstones included.
    assert_exactly_once(spark, config, ds, first.good + second.good, first.bad + second.bad)
