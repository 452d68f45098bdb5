"""The quality gate (write → audit → publish) with real Kafka, Spark, Delta and Great Expectations."""

from __future__ import annotations

import json

import pytest

from loglake.core.errors import ConfigError
from loglake.ledger.ranges import ledger_rows
from loglake.ledger.ranges import batch_watermarks
from loglake.batch.planning import plan_backfill, plan_batch
from loglake.local.produce import produce
from loglake.ledger.results import data_docs_dir, last_quality
from loglake.tables import open_table, query
from loglake.batch.recompute import run_batch
from loglake.core.contracts import QUALITY_RESULTS
from loglake.core.errors import QualityGateError
from loglake.quality.pipeline import recompute_and_publish
from loglake.quality.gate import run_quality

pytestmark = pytest.mark.integration

# Produced durations are log-normal around 13 s: a 1-second ceiling fails most rows.
SHORT_VIEWS = {"expectation": "expect_column_values_to_be_between", "column": "duration_ms",
               "kwargs": {"max_value": 1000}}


def suite(severity: str) -> dict:
    return {"job_views": {"quality": [
        {"expectation": "expect_column_values_to_be_unique", "column": "view_id", "severity": "fail"},
        {**SHORT_VIEWS, "severity": severity}]}}


def test_failing_fail_expectation_keeps_the_watermark_and_names_the_expectation(spark, make_config):
    config = make_config(datasets=suite("fail"))
    ds = config.dataset("job_views")
    produce(config, ds, 400, seed=71)
    plan = plan_batch(config, ds)
    run_batch(spark, config, ds, plan, "gate-1")
    with pytest.raises(QualityGateError) as e:
        run_quality(spark, config, ds, plan, "gate-1")
    msg = str(e.value)
    assert "expect_column_values_to_be_between on column duration_ms" in msg
    assert "expect_column_values_to_be_unique" not in msg  # it passed
    failed = e.value.failed[0]
    assert 0 < failed["unexpected_count"] <= failed["element_count"] == 400
    # The sample names real offsets of rows that break the rule.
    sample = [tuple(map(int, s.split(":"))) for s in failed["sample_offsets"].split(", ")]
    rows = query(open_table(config.table_path(ds, "batch")), "SELECT _partition, _offset, duration_ms FROM t")
    durations = {(r["_partition"], r["_offset"]): r["duration_ms"] for r in rows}
    assert sample and all(durations[s] > 1000 for s in sample)

    assert batch_watermarks(config, ds) == {}
    assert {r["state"] for r in ledger_rows(config, ds)} == {"written"}
    last = last_quality(config, ds)
    assert last.run_id == "gate-1" and not last.published
    assert last.failed == ["expect_column_values_to_be_between(duration_ms)"] and last.warned == []
    assert (data_docs_dir(config) / "index.html").exists()


def test_failing_warn_expectation_publishes_and_is_recorded(spark, make_config):
    config = make_config(datasets=suite("warn"))
    ds = config.dataset("job_views")
    produce(config, ds, 300, seed=72)
    plan = plan_batch(config, ds)
    summary = recompute_and_publish(spark, config, ds, plan, "gate-2")
    assert summary.quality.published and summary.quality.rows == 300
    assert [w.column for w in summary.quality.warned] == ["duration_ms"]
    assert batch_watermarks(config, ds) == {r.partition: r.end for r in plan.ranges if r.size}
    results = query(open_table(config.system_table_path(QUALITY_RESULTS)),
                    "SELECT expectation, severity, success, unexpected_count, observed, published FROM t "
                    "ORDER BY expectation")
    assert [(r["expectation"], r["severity"], r["success"], r["published"]) for r in results] == [
        ("expect_column_values_to_be_between", "warn", False, True),
        ("expect_column_values_to_be_unique", "fail", True, True)]
    assert json.loads(results[0]["observed"])["unexpected_count"] == results[0]["unexpected_count"] > 0
    last = last_quality(config, ds)
    assert last.published and last.warned == ["expect_column_values_to_be_between(duration_ms)"]


def test_unknown_expectation_is_a_config_error_naming_the_key(spark, make_config):
    config = make_config(datasets={"job_views": {"quality": [
        {"expectation": "expect_column_values_to_be_purple", "column": "source"}]}})
    ds = config.dataset("job_views")
    produce(config, ds, 20, seed=73)
    plan = plan_batch(config, ds)
    run_batch(spark, config, ds, plan, "gate-3")
    with pytest.raises(ConfigError) as e:
        run_quality(spark, config, ds, plan, "gate-3")
    assert "datasets.job_views.quality.0.expectation" in str(e.value)
    assert batch_watermarks(config, ds) == {}


def test_two_ranges_of_one_partition_are_both_written_and_published(spark, make_config):
    """A backfill of [0, h) and [h, end) of one partition: both recomputed, both published
    (the gate once looked written ranges up by partition and published one of them twice)."""
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 600, seed=73)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "all")
    batch_path = config.table_path(ds, "batch")
    before = query(open_table(batch_path), "SELECT _partition, _offset FROM t ORDER BY 1, 2")
    end0 = max(r["_offset"] for r in before if r["_partition"] == 0) + 1
    half = end0 // 2
    plan = plan_backfill(config, ds, ranges=[f"0:0-{half}", f"0:{half}-{end0}"])
    summary = recompute_and_publish(spark, config, ds, plan, "two-ranges")
    assert summary.records + summary.quarantined == end0
    assert summary.quality.published
    # The table still holds every row of the partition, each once.
    assert query(open_table(batch_path), "SELECT _partition, _offset FROM t ORDER BY 1, 2") == before
    mine = [r for r in ledger_rows(config, ds) if r["run_id"] == "two-ranges"]
    assert sorted((r["state"], r["start"], r["end"]) for r in mine) == [
        ("published", 0, half), ("published", half, end0), ("written", 0, half), ("written", half, end0)]
    assert sum(r["records"] + r["quarantined"] for r in mine if r["state"] == "published") == end0
