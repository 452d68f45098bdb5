"""The speed layer against a real broker, real Spark and real Delta tables."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F

from loglake.kafka.admin import end_offsets, group_offsets, log_bounds
from loglake.local.produce import produce
from loglake.observe import exporter
from loglake.testing import caught_up
from loglake.speed.stream import run_speed

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


def test_the_quarantine_rows_delta_rs_appends_equal_those_the_batch_layer_writes_with_spark(spark, make_config):
    """A micro-batch's few quarantined rows ride to the driver in its observation and are
    appended by delta-rs (``delta_io.append_arrow``); a recompute writes its own from the same
    records with Spark. The rows are the same but for ``_layer`` (timestamps included: the
    driver's naive local times become the same UTC instants), and Spark reads delta-rs' commits
    as its own, the stream's batch id with them."""
    from deltalake import DeltaTable

    from loglake.batch.planning import plan_batch
    from loglake.ledger.snapshots import STREAM_KEY, stream_batch
    from loglake.batch.recompute import run_batch

    config = make_config()
    ds = config.dataset("job_views")
    res = produce(config, ds, 1200, bad_fraction=0.05, seed=13)
    run_speed(spark, config, ds, available_now=True)
    q_path = config.table_path(ds, "quarantine")
    engines = [c.get("engineInfo", "") for c in DeltaTable(q_path).history() if STREAM_KEY in c.get("userMetadata", "")]
    assert engines and all(e.startswith("delta-rs") for e in engines), engines  # the stream's appends
    speed_path = config.table_path(ds, "speed")
    app = next(json.loads(c["userMetadata"])[STREAM_KEY] for c in DeltaTable(speed_path).history()
               if STREAM_KEY in c.get("userMetadata", ""))
    assert stream_batch(q_path, app) == stream_batch(speed_path, app) == 0  # one micro-batch, in both
    run_batch(spark, config, ds, plan_batch(config, ds), "batch")
    quarantine = read(spark, config, ds, "quarantine")
    cols = sorted(c for c in quarantine.columns if c != "_layer")

    def rows(layer):
        return sorted(r[0] for r in quarantine.where(F.col("_layer") == layer)
                      .select(F.sha2(F.to_json(F.struct(*cols)), 256)).collect())

    assert rows("speed") == rows("batch") and len(rows("speed")) == res.bad > 0

    # delta-rs checkpoints where Spark would (every 10th version), not at its own 100th: the stream
    # made its quarantine table with that interval, and sets it on one made without it.
    from loglake.lake.delta_io import APPENDED_BY_DELTA_RS, append_arrow, create_if_missing
    from loglake.records.counting import CARRIED, carried_arrow
    from loglake.records.validation import empty_quarantine

    assert DeltaTable(q_path).metadata().configuration.items() >= APPENDED_BY_DELTA_RS.items()
    other = str(Path(q_path).parent / "made-by-spark")
    create_if_missing(empty_quarantine(spark), other)
    assert DeltaTable(other).metadata().configuration == {}
    create_if_missing(empty_quarantine(spark), other, properties=APPENDED_BY_DELTA_RS)
    assert DeltaTable(other).metadata().configuration == APPENDED_BY_DELTA_RS

    one = {"carried": {"rows": [tuple(r[c] for c in CARRIED.names) for r in quarantine.limit(1).collect()]},
           "quarantined": 1}
    version = DeltaTable(q_path).version()
    for batch_id in range(1, 12):
        assert append_arrow(carried_arrow(one, "speed"), q_path, "checkpoint-test", batch_id)
    assert DeltaTable(q_path).version() == version + 11
    checkpoints = sorted(p.name for p in Path(q_path, "_delta_log").glob("*.checkpoint.parquet"))
    new = [v for v in (int(n.split(".")[0]) for n in checkpoints) if v > version]
    assert len(new) == 1 and version + 11 - new[0] < 10, new  # one in 11 versions (delta-rs: at a 10th commit)


def test_the_speed_rows_delta_rs_appends_equal_those_the_batch_layer_writes_with_spark(spark, make_config):
    """A small micro-batch (the previous one was) is collected to the driver and appended by
    delta-rs (``speed.writer.collected``, ``delta_io.append_arrow``); a recompute writes the same
    records to the batch table with Spark. Every offset lands once, the rows are the same, column
    by column (timestamps included), the table's schema is Spark's as it made it, and Spark reads
    delta-rs' commits with the stream's batch ids."""
    from deltalake import DeltaTable

    from loglake.batch.planning import plan_batch
    from loglake.batch.recompute import run_batch
    from loglake.lake.delta_io import APPENDED_BY_DELTA_RS
    from loglake.ledger.snapshots import STREAM_KEY

    config = make_config(speed={"max_offsets_per_trigger": 100})
    ds = config.dataset("job_views")
    res = produce(config, ds, 900, bad_fraction=0.05, seed=21)
    speed_path = config.table_path(ds, "speed")
    run_speed(spark, config, ds, available_now=True)
    assert_exactly_once(spark, config, ds, res.good, res.bad)
    table = DeltaTable(speed_path)
    assert table.metadata().configuration.items() >= APPENDED_BY_DELTA_RS.items()
    batches = [json.loads(c["userMetadata"]) for c in table.history() if STREAM_KEY in c.get("userMetadata", "")]
    engines = [c.get("engineInfo", "") for c in table.history() if STREAM_KEY in c.get("userMetadata", "")]
    assert len(batches) >= 9, batches  # micro-batches of at most 100 of 900 records
    assert all(e.startswith("delta-rs") for e in engines), engines  # a cap of 100: every micro-batch small

    run_batch(spark, config, ds, plan_batch(config, ds), "batch")
    speed, batch = read(spark, config, ds, "speed"), read(spark, config, ds, "batch")
    assert speed.schema == batch.schema

    def rows(df):
        return sorted(r[0] for r in df.select(F.to_json(F.struct(*sorted(df.columns)))).collect())

    assert rows(speed) == rows(batch) and len(rows(speed)) == res.good


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


# job_views through Spark (a micro-batch above SMALL_BATCH_RECORDS) runs in make test-long: its
# append is company_ceos' (``delta_io.append_idempotent``, the replay asked of the tables' commits
# as there), which make test runs.
@pytest.mark.parametrize("dataset, writer", [pytest.param("job_views", "spark", marks=pytest.mark.long),
                                             ("job_views", "delta-rs"), ("company_ceos", "spark")])
def test_a_micro_batch_replayed_after_a_crash_lands_once_though_delta_did_not_check_it(spark, make_config, dataset,
                                                                                       writer, monkeypatch):
    # A micro-batch after its query's first is appended without Delta's transaction check (with
    # Spark, its cost is a state reconstruction per commit; delta-rs records the transaction of
    # every small micro-batch it appends, from the snapshot it commits on, and checks none). A
    # crash after its commits and before Spark recorded it in the checkpoint's commit log replays
    # it as the next query's first: that one asks the tables whether it landed (their commits'
    # metadata) and lands nothing twice.
    import json
    from pathlib import Path

    from loglake.ledger.snapshots import BATCH_KEY
    from loglake.speed import stream
    from loglake.tables import open_table

    if writer == "spark":  # no micro-batch is small: Spark appends every one
        monkeypatch.setattr(stream, "SMALL_BATCH_RECORDS", 0)
    config = make_config(speed={"max_offsets_per_trigger": 60})
    ds = config.dataset(dataset)
    res = produce(config, ds, 300, bad_fraction=0.1, seed=31, progress=False)
    last = run_speed(spark, config, ds, available_now=True)
    newest = max(last["_batches"])
    assert newest >= 2  # several micro-batches: the last one was not its query's first
    speed = open_table(config.table_path(ds, "speed"))
    by_batch = {json.loads(h["userMetadata"]).get(BATCH_KEY) for h in speed.history() if h.get("userMetadata")}
    recorded = speed.transaction_version(
        f"loglake-speed-{ds.name}-{json.loads((Path(config.checkpoint_path(ds)) / 'metadata').read_text())['id']}")
    engines = {h.get("engineInfo", "").split("/")[0].split(":")[0] for h in speed.history()
               if BATCH_KEY in h.get("userMetadata", "")}
    assert newest in by_batch
    if writer == "spark":  # Delta's own record stopped at the query's first micro-batch
        assert recorded < newest and engines == {"Apache-Spark"}, engines
    else:
        assert recorded == newest and engines == {"delta-rs"}, engines
    crash_before_done(config, ds, newest)
    version = speed.version()
    run_speed(spark, config, ds, available_now=True)
    assert open_table(config.table_path(ds, "speed")).version() == version  # the replay appended nothing
    # The position the replay committed is recorded in Kafka again (a continuous stream with
    # nothing new after the replay: tests/reliability/test_faults.py's R1).
    assert caught_up(config, ds, end_offsets(config, ds.topic))
    # `loglake history` names every micro-batch, the ones without Delta's txn action too.
    from loglake.ledger.history import table_history

    said = "\n".join(r["meaning"] for r in table_history(config, f"speed.{ds.name}"))
    assert all(f"speed micro-batch {b} (schema v1)" in said for b in range(newest + 1)), said
    if ds.kind == "changelog":
        assert read(spark, config, ds, "speed").select("_partition", "_offset").distinct().count() == res.good
        return
    assert_exactly_once(spark, config, ds, res.good, res.bad)


def crash_before_done(config, ds, batch_id: int) -> None:
    """What a crash after micro-batch ``batch_id``'s commits leaves: the checkpoint without its
    record as done, and the stream's position in Kafka not recorded (rewound to 0)."""
    from pathlib import Path

    from loglake.kafka.admin import PositionCommitter

    commits = Path(config.checkpoint_path(ds)) / "commits"
    for done in (commits / str(batch_id), commits / f".{batch_id}.crc"):
        done.unlink(missing_ok=True)
    rewound = PositionCommitter(config, ds.consumer_group, ds.topic)
    rewound.submit({p: 0 for p in range(ds.partitions)})
    assert rewound.close() and not caught_up(config, ds, end_offsets(config, ds.topic))


def test_a_running_stream_that_replayed_a_micro_batch_records_its_position_with_nothing_new(spark, make_config):
    # The stream as `loglake speed start` runs it (spark-submit, a processing-time trigger),
    # started on a checkpoint a crash left with its last micro-batch undone and nothing after
    # it in the log: it replays the micro-batch (Spark 4.1.1's Kafka source then fails its
    # progress report, SPARK-55271: the stream starts its query again) and records the position.
    from loglake.core.processes import Managed, wait_for
    from loglake.jobs.launch import job_env, spark_submit
    from loglake.speed.control import SpeedStream

    config = make_config(speed={"max_offsets_per_trigger": 60, "trigger_interval": "1 second"})
    ds = config.dataset("job_views")
    res = produce(config, ds, 200, bad_fraction=0.1, seed=37, progress=False)
    last = run_speed(spark, config, ds, available_now=True)
    crash_before_done(config, ds, max(last["_batches"]))
    ends = end_offsets(config, ds.topic)
    # The job itself, not under the supervisor (SpeedStream.start): a restart of the whole job
    # by the supervisor would hide whether the stream's own restart works.
    proc = Managed(config.home, "speed-job_views")
    proc.start(spark_submit(config, SpeedStream(config, ds).request(False)), env=job_env(config))
    try:
        wait_for(lambda: caught_up(config, ds, ends), 180, "the stream to record the replayed micro-batch's position",
                 0.5, log=proc)
        assert proc.pid() is not None  # running, not failed
        # As a compose stack's speed container runs it, it serves its stream's metrics.
        target = exporter.registered(config)["speed-job_views"]
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
            served = {(s.name, s.labels.get("dataset")): s.value
                      for fam in text_string_to_metric_families(r.read().decode()) for s in fam.samples}
        assert served[("loglake_stream_active", "job_views")] == 1.0
        assert served[("loglake_stream_starts_total", "job_views")] == 1.0
    finally:
        proc.stop(timeout=10)
    assert "speed-job_views" not in exporter.registered(config)
    assert_exactly_once(spark, config, ds, res.good, res.bad)


def test_a_second_stream_of_a_dataset_is_refused_while_one_runs(spark, make_config):
    from loglake.core.errors import StreamRunningError
    from loglake.leases import stream_lease

    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 50, seed=3, progress=False)
    with stream_lease(config, ds.name):  # as a running stream holds it
        with pytest.raises(StreamRunningError, match=f"speed stream of dataset {ds.name} runs already"):
            run_speed(spark, config, ds, available_now=True)
    assert open_table_or_none(config, ds) is None  # it wrote nothing
    run_speed(spark, config, ds, available_now=True)  # once let go: runs
    assert read(spark, config, ds, "speed").count() == 50


def open_table_or_none(config, ds):
    from loglake.tables import open_table

    return open_table(config.table_path(ds, "speed"))
