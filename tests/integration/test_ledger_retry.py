"""A task of a DAG run tried again after its job had committed records each range once
(issue 11, R7). When the Airflow scheduler dies, the restarted one resets the task instances
the dead one had queued — a task may be killed after its Spark job committed and before the
task reported success — and the next try runs the same job with the same run id. The
tables come out identical (the writes replace exactly those offsets); the offsets ledger
must not say the run wrote or published a range twice."""

from __future__ import annotations

import pytest

from loglake.ledger.ranges import batch_watermarks, ledger_rows
from loglake.batch.planning import plan_backfill, plan_batch
from loglake.local.produce import produce
from loglake.tables import open_table, query
from loglake.batch.recompute import run_batch
from loglake.quality.gate import run_quality

pytestmark = pytest.mark.integration


def states(config, ds, run_id: str) -> list[tuple]:
    return sorted((r["state"], r["partition"], r["start"], r["end"]) for r in ledger_rows(config, ds)
                  if r["run_id"] == run_id)


def offsets(config, ds) -> list[tuple]:
    rows = query(open_table(config.table_path(ds, "batch")), "SELECT _partition, _offset FROM t")
    rows += query(open_table(config.table_path(ds, "quarantine")),
                  "SELECT _partition, _offset FROM t WHERE _layer = 'batch'")
    return sorted((r["_partition"], r["_offset"]) for r in rows)


def test_a_retried_task_of_the_same_run_records_each_range_once(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 400, bad_fraction=0.05, seed=77)
    plan = plan_batch(config, ds)
    once = sorted((s, r.partition, r.start, r.end) for r in plan.ranges for s in ("written", "published"))

    run_id = "loglake_batch/scheduled__2026-11-24T10:00:00+00:00"
    for _try in range(2):  # the second try: the first was killed after its job had committed
        run_batch(spark, config, ds, plan, run_id)
    for _try in range(2):
        run_quality(spark, config, ds, plan, run_id)
    assert states(config, ds, run_id) == once
    ends = {r.partition: r.end for r in plan.ranges}
    assert batch_watermarks(config, ds) == ends
    served = offsets(config, ds)
    assert len(served) == len(set(served)) == sum(r.size for r in plan.ranges)

    # A backfill below the watermark is staged and swapped in by its gate: a second try of
    # the gate after the swap (the staging dropped) validates the swapped rows and publishes
    # nothing twice either.
    p, end = next((r.partition, r.end) for r in plan.ranges if r.end >= 2)
    backfill = plan_backfill(config, ds, ranges=[f"{p}:0-{end // 2}", f"{p}:{end // 2}-{end}"])
    run_id = "loglake_backfill/manual__2026-11-24T10:05:00+00:00"
    for _try in range(2):
        run_batch(spark, config, ds, backfill, run_id)
    for _try in range(2):
        run_quality(spark, config, ds, backfill, run_id)
    assert states(config, ds, run_id) == sorted(
        (s, r.partition, r.start, r.end) for r in backfill.ranges for s in ("written", "published"))
    assert offsets(config, ds) == served

    # Another run of the same ranges is another record.
    run_batch(spark, config, ds, backfill, "manual-again")
    assert [s for s, *_ in states(config, ds, "manual-again")] == ["written", "written"]
