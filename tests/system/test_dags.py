"""The batch and backfill DAGs run whole (``airflow dags test``): real broker, real Spark, real Delta.

Exactness is checked on the tables' own record: the provenance columns of batch and
quarantine hold every requested offset exactly once, and the offsets ledger holds the
ranges with the DAG run's id. Invalid parameters are rejected naming the field, and no
Spark job starts.
"""

from __future__ import annotations

import pytest

from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks, ledger_rows
from loglake.tables import open_table, query
from loglake.local.produce import produce

pytestmark = pytest.mark.system


def covered(config, ds) -> list[tuple[int, int]]:
    """(partition, offset) of every row the batch layer wrote: batch rows and batch quarantine."""
    out = []
    for layer, where in (("batch", "TRUE"), ("quarantine", "_layer = 'batch'")):
        table = open_table(config.table_path(ds, layer))
        if table is not None:
            rows = query(table, f"SELECT _partition, _offset FROM t WHERE {where}")
            out += [(r["_partition"], r["_offset"]) for r in rows]
    return sorted(out)


def covered_rows(config, ds, layer: str) -> list[dict]:
    table = open_table(config.table_path(ds, layer))
    return [] if table is None else query(table, "SELECT _partition, _offset FROM t")


def offsets_of(ranges) -> list[tuple[int, int]]:
    return sorted((p, o) for p, start, end in ranges for o in range(start, end))


def report(name: str, run) -> None:
    """Print where a run's time went (visible with ``pytest -rP``); figures, not assertions."""
    line = f"{name}: airflow dags test {run.seconds:.1f}s"
    for (task_id, index), ti in sorted(run.tasks.items()):
        if ti["duration"] is not None:
            line += f"; {task_id}[{index}] {ti['duration']:.1f}s"
            summary = run.xcom.get((task_id, index))
            if isinstance(summary, dict) and "submit_seconds" in summary:
                line += (f" (Spark job {summary['seconds']:.1f}s, spark-submit {summary['submit_seconds']:.1f}s, "
                         f"task overhead beyond the job {ti['duration'] - summary['seconds']:.1f}s)")
    print(line)


# make test-long only; make test covers its parts: backfill ranges end to end: test_cli's backfill test; the
# DAG's params at the edge: the invalid-backfill test below.
@pytest.mark.long
def test_backfill_recomputes_exactly_the_requested_ranges(make_config, airflow_db):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 600, bad_fraction=0.1, seed=41, progress=False)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    a, b = sorted(ends, key=ends.get)[-2:]
    ranges = [(a, 0, ends[a]), (b, 5, ends[b] - 5)]

    run = airflow_db.dags_test(config, "loglake_backfill",
                               {"dataset": "job_views", "ranges": [f"{p}:{s}-{e}" for p, s, e in ranges]})
    report("backfill", run)
    assert run.returncode == 0, run.output[-4000:]
    assert run.state == "success"
    assert run.tasks["plan", -1]["state"] == "success"
    assert (run.tasks["dataset.recompute", 0]["state"], run.tasks["dataset.recompute", 0]["label"]) == ("success", "job_views")

    assert covered(config, ds) == offsets_of(ranges)  # every requested offset once, nothing else
    summary = run.xcom["dataset.recompute", 0]
    assert summary["records"] + summary["quarantined"] == len(offsets_of(ranges))
    assert summary["quarantined"] > 0
    assert run.tasks["dataset.quality", 0]["state"] == "success"
    ledger = ledger_rows(config, ds)
    for state in ("written", "published"):
        assert sorted((r["partition"], r["start"], r["end"]) for r in ledger if r["state"] == state) == sorted(ranges)
    assert {r["run_id"] for r in ledger} == {f"loglake_backfill/{run.run_id}"}

    events = airflow_db.asset_events(run.run_id)  # emitted when the ranges are published
    assert [(e["name"], e["uri"]) for e in events] == [
        ("loglake.batch.job_views", "loglake://batch/job_views"),
        ("loglake.quarantine.job_views", "loglake://quarantine/job_views")]
    assert all(e["extra"]["run_id"] == f"loglake_backfill/{run.run_id}" for e in events)


def test_invalid_backfill_is_rejected_naming_the_field_before_any_spark_job(make_config, airflow_db):
    # Beyond the log end, as the plan task finds it; the plan's other refusals (a start after
    # its end, an unknown partition) are the same code path: tests/unit/test_planning.py and
    # tests/integration/test_batch.py name their fields.
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 60, seed=3, progress=False)

    run = airflow_db.dags_test(config, "loglake_backfill", {"dataset": "job_views", "ranges": ["1:0-100000"]})
    assert run.returncode != 0 and run.state == "failed"
    assert "AirflowFailException: ranges[0].end: " in run.output
    assert run.tasks["plan", -1]["state"] == "failed"
    assert run.tasks["dataset.recompute", -1]["state"] == "upstream_failed"
    assert "Spark-Submit cmd" not in run.output
    assert open_table(config.table_path(ds, "batch")) is None and ledger_rows(config, ds) == []


def test_dry_run_prints_the_plan_and_runs_no_spark_job(make_config, airflow_db):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 60, seed=4, progress=False)
    run = airflow_db.dags_test(config, "loglake_backfill", {"dataset": "job_views", "ranges": ["0:0-0"],
                                                             "dry_run": True})
    assert run.returncode == 0, run.output[-4000:]
    assert "backfill plan for job_views: 1 range(s), 0 offset(s)" in run.output
    assert "dry run: nothing recomputed" in run.output
    assert run.tasks["dataset.recompute", -1]["state"] == "skipped"
    assert "Spark-Submit cmd" not in run.output and ledger_rows(config, ds) == []


# make test-long only; make test covers its parts: the batch DAG end to end (its recompute, quality and
# audit tasks) in test_secure_kafka, and scheduled by the scheduler in test_demo (the README's `loglake demo`); nothing to
# recompute from the command line in test_cli; a mapped task skipped in the dry-run test above.
@pytest.mark.long
def test_batch_recomputes_to_the_log_end_then_has_nothing_to_do(make_config, airflow_db):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 500, bad_fraction=0.05, seed=5, progress=False)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}

    run = airflow_db.dags_test(config, "loglake_batch")
    report("batch", run)
    assert run.returncode == 0, run.output[-4000:]
    # company_ceos has no topic yet: planned as nothing to do, so one mapped Spark task.
    assert "company_ceos: topic" in run.output and "does not exist yet" in run.output
    assert {k: v["label"] for k, v in run.tasks.items() if k[0] == "dataset.recompute"} == {
        ("dataset.recompute", 0): "job_views"}
    assert run.tasks["dataset.recompute", 0]["state"] == "success"
    assert covered(config, ds) == offsets_of((p, 0, e) for p, e in ends.items())
    assert batch_watermarks(config, ds) == {p: e for p, e in ends.items() if e}
    # After publishing: the diff explains (no speed layer ran, so every row is missing in speed),
    # the audit finds every offset below the watermark exactly once.
    diffs = run.xcom["dataset.diff", 0]
    assert sum(d["missing_in_speed"]["count"] for d in diffs) == sum(1 for _ in covered_rows(config, ds, "batch"))
    audit = run.xcom["dataset.audit", 0]
    assert audit["ok"] and audit["offsets_checked"] == sum(ends.values())

    again = airflow_db.dags_test(config, "loglake_batch")
    assert again.returncode == 0, again.output[-4000:]
    assert "job_views: nothing to recompute" in again.output
    assert again.tasks["dataset.recompute", -1]["state"] == "skipped"
    published = [r for r in ledger_rows(config, ds) if r["state"] == "published"]
    assert len(published) == len([e for e in ends.values() if e])
    # The maintenance DAG: test_cluster's test_airflow_runs_batch_and_maintenance_on_the_cluster (make test-long).


# make test-long only; make test covers its parts: the quality gate failing and keeping the watermark:
# test_quality; a failed Spark task in Airflow: test_retries.
@pytest.mark.long
def test_a_failing_fail_expectation_fails_the_quality_task_and_keeps_the_watermark(make_config, airflow_db):
    config = make_config(datasets={"job_views": {"quality": [
        {"expectation": "expect_column_values_to_be_between", "column": "duration_ms",
         "kwargs": {"max_value": 1000}, "severity": "fail"}]}})
    ds = config.dataset("job_views")
    produce(config, ds, 200, seed=6, progress=False)

    run = airflow_db.dags_test(config, "loglake_batch")
    assert run.state == "failed"
    assert run.tasks["dataset.recompute", 0]["state"] == "success"
    quality = run.tasks["dataset.quality", 0]
    assert quality["state"] == "failed" and quality["try_number"] == 1  # failed at once, not retried
    assert "AirflowFailException: QualityGateError: quality gate failed for job_views" in run.output
    assert "expect_column_values_to_be_between on column duration_ms" in run.output
    assert batch_watermarks(config, ds) == {}
    assert {r["state"] for r in ledger_rows(config, ds)} == {"written"}
    assert airflow_db.asset_events(run.run_id) == []


# make test-long only; make test covers its parts: replay in both layers: test_replay; the replay DAG's params
# at the edge: test_ui.
@pytest.mark.long
def test_replay_dag_moves_the_records_of_its_reason_code_that_the_loosened_conf_accepts(spark, make_config,
                                                                                       airflow_db):
    import json

    from loglake.speed.stream import run_speed
    from tests.integration.test_replay import LOOSENED
    from tests.integration.test_schema_evolution import evolved

    config = make_config(topic_suffix="replay-dag", datasets=evolved())
    ds = config.dataset("job_views")
    produce(config, ds, 200, bad_fraction=0.4, seed=14, progress=False)
    run_speed(spark, config, ds, available_now=True)  # the quarantine to replay (setup only)
    quarantine = query(open_table(config.table_path(ds, "quarantine")),
                       "SELECT _partition, _offset, reason_code, value FROM t WHERE _layer = 'speed'")
    before = {(r["_partition"], r["_offset"]): r["reason_code"] for r in quarantine}
    speed_before = sorted((r["_partition"], r["_offset"]) for r in covered_rows(config, ds, "speed"))
    # What the loosened conf accepts of the out_of_domain records, by the test's own reading: the
    # producer breaks one field per record, and only the source enum gained the value it used.
    moved = {(r["_partition"], r["_offset"]) for r in quarantine
             if r["reason_code"] == "out_of_domain" and json.loads(r["value"])["source"] == "carrier_pigeon"}
    other_out_of_domain = sum(1 for code in before.values() if code == "out_of_domain") - len(moved)
    # Also accepted now, but of another reason: a record without duration_ms stays.
    assert moved and any(code == "missing_field" for code in before.values())

    config = make_config(topic_suffix="replay-dag", datasets=LOOSENED)
    # (A malformed reason_code is refused when the run is triggered: test_ui's REST test.)
    run = airflow_db.dags_test(config, "loglake_replay", {"dataset": "job_views", "reason_code": "out_of_domain"})
    report("replay", run)
    assert run.returncode == 0, run.output[-4000:]
    assert run.state == "success" and run.tasks["replay", -1]["state"] == "success"
    assert run.xcom["replay", -1] == [
        f"replay job_views speed (reason out_of_domain only): moved {len(moved)} (out_of_domain {len(moved)}); "
        f"{other_out_of_domain} stay quarantined (out_of_domain {other_out_of_domain})",
        "replay job_views batch (reason out_of_domain only): moved 0 (none); 0 stay quarantined (none)"]

    after = {(r["_partition"], r["_offset"]): r["reason_code"] for r in query(
        open_table(config.table_path(ds, "quarantine")), "SELECT _partition, _offset, reason_code FROM t")}
    assert after == {k: v for k, v in before.items() if k not in moved}
    # Each moved offset is in the speed table once, beside the rows it held.
    speed_after = sorted((r["_partition"], r["_offset"]) for r in covered_rows(config, ds, "speed"))
    assert speed_after == sorted(speed_before + list(moved))
