"""A one-off speed run (``loglake speed run DATASET --available-now``) after retention
deleted offsets it had not read: loglake's data-loss message, then after ``accept-loss``
every retained offset lands once. (The supervised stream's case is R3's, tests/reliability.)"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import functions as F

from loglake.kafka.admin import admin, log_bounds
from loglake.local.produce import produce
from loglake.ops.audit import audit_dataset
from loglake.ops.audit_report import format_audit
from loglake.testing import run_loglake
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


# make test-long only: a fault scenario (R3's one-off speed run); retention loss in the batch layer is in
# make test (test_batch).
@pytest.mark.long
def test_a_one_off_speed_run_past_deleted_offsets_fails_plainly_then_resumes_after_accept_loss(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 1200, bad_fraction=0.05, seed=301)
    run_speed(spark, config, ds, available_now=True)  # the position to lose (the command runs below)
    # The position record in the consumer group follows the checkpoint asynchronously and may
    # not have arrived ("the final position is not recorded in Kafka yet"): the checkpoint, not
    # the group, is where a run resumes. Model that: the group's record is gone.
    client = admin(config)
    client.delete_consumer_groups([ds.consumer_group])[ds.consumer_group].result(timeout=30)
    produce(config, ds, 600, bad_fraction=0.05, seed=302)
    # Retention: the oldest 90 % of every partition, past the speed layer's position.
    cut = {p: lo + (hi - lo) * 9 // 10 for p, (lo, hi) in log_bounds(config, ds.topic).items()}
    for fut in client.delete_records([TopicPartition(ds.topic, p, o) for p, o in cut.items()]).values():
        fut.result(timeout=30)

    r = run_loglake(config, "speed", "run", "job_views", "--available-now")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "StreamingQueryException" not in out and "at org.apache" not in out, out
    assert "data loss" in out and f"{ds.topic}[" in out and "loglake accept-loss job_views" in out, out

    r = run_loglake(config, "accept-loss", "job_views", "--reason", "retention test")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_loglake(config, "speed", "run", "job_views", "--available-now")
    assert r.returncode == 0, r.stdout + r.stderr

    # Every retained offset once (speed ∪ its quarantine); the serving view = retained log − quarantine.
    speed = spark.read.format("delta").load(config.table_path(ds, "speed"))
    quarantine = spark.read.format("delta").load(config.table_path(ds, "quarantine")).where(F.col("_layer") == "speed")
    bounds = log_bounds(config, ds.topic)
    retained = {(p, o) for p, (lo, hi) in bounds.items() for o in range(lo, hi)}
    rows = [(r[0], r[1]) for r in speed.select("_partition", "_offset").unionByName(
        quarantine.select("_partition", "_offset")).collect()]
    after_cut = [x for x in rows if x[1] >= cut[x[0]]]
    assert len(after_cut) == len(set(after_cut)) and set(after_cut) == retained
    audit = audit_dataset(config, ds, record=False)
    assert audit.ok, "\n".join(format_audit(audit))
    served = run_loglake(config, "query", "SELECT count(*) AS n FROM job_views", "--format", "csv")
    assert served.returncode == 0, served.stderr
    n_quarantined = len({x for x in quarantine.select("_partition", "_offset").collect() if x[1] >= cut[x[0]]})
    assert int(served.stdout.splitlines()[1]) == len(retained) - n_quarantined
