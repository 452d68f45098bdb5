"""The offset-coverage audit against a real broker, tables built by the real speed and batch jobs."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from loglake.ops.audit import audit_dataset
from loglake.ops.audit_report import format_audit
from loglake.kafka.admin import ensure_topic, log_bounds
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan
from loglake.batch.planning import plan_batch
from loglake.local.produce import generate, produce
from loglake.core.contracts import AUDIT_RESULTS
from loglake.ledger.results import last_audit
from loglake.tables import open_table, query
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration


def build_half(spark, config, ds) -> None:
    """Speed over the whole log; batch over the first half of every partition."""
    run_speed(spark, config, ds, available_now=True)
    half = Plan(ds.name, tuple(OffsetRange(ds.topic, p, lo, lo + (hi - lo) // 2)
                               for p, (lo, hi) in log_bounds(config, ds.topic).items()))
    recompute_and_publish(spark, config, ds, half, "half")


def serve_current(spark, config, ds) -> None:
    """Make what the batch tables hold now the served point, as a loglake that did not check
    the commits before it served them did (a publish refuses commits loglake did not make:
    test_foreign_commits): damage done behind loglake's back is then served."""
    from loglake.lake.system_tables import append_ledger

    versions = {f"{layer}_version": open_table(config.table_path(ds, layer)).version()
                for layer in ("batch", "quarantine")}
    append_ledger(spark, config, [{"dataset": ds.name, "topic": ds.topic, "partition": -1, "start": 0, "end": 0,
                                   "records": 0, "quarantined": 0, "run_id": "test", "state": "compacted",
                                   **versions}])


def part_row(result, partition, layer):
    return next(r for r in result.partitions if r.partition == partition and r.layer == layer)


def test_a_clean_audit_checks_every_offset_then_finds_an_injected_duplicate_and_gap(spark, make_config):
    from delta.tables import DeltaTable

    config = make_config()
    ds = config.dataset("job_views")
    res = produce(config, ds, 900, bad_fraction=0.05, seed=62)
    build_half(spark, config, ds)
    # Clean first: every produced offset checked, once, in the layer that serves it.
    clean = audit_dataset(config, ds, run_id="clean")
    assert clean.ok, "\n".join(format_audit(clean))
    assert (clean.missing, clean.duplicated, clean.unexpected) == (0, 0, 0)
    assert clean.offsets_checked == res.records
    # Both parts did work: batch below the watermark, speed above it.
    assert sum(r.offsets_checked for r in clean.partitions if r.layer == "batch") > 0
    assert sum(r.offsets_checked for r in clean.partitions if r.layer == "speed") > 0
    # One stored row per partition and layer, read back through the record-table contract.
    stored = last_audit(config, ds)
    assert stored.run_id == "clean" and stored.ok and stored.offsets_checked == res.records
    assert len(stored.partitions) == 2 * ds.partitions

    batch_path = config.table_path(ds, "batch")
    rows = query(open_table(batch_path), 'SELECT "_partition" AS p, "_offset" AS o FROM t ORDER BY p, o')
    p = rows[0]["p"]
    dup, gap = rows[0]["o"], rows[1]["o"]
    batch = spark.read.format("delta").load(batch_path)
    batch.where(f"_partition = {p} AND _offset = {dup}").write.format("delta").mode("append").save(batch_path)
    DeltaTable.forPath(spark, batch_path).delete(f"_partition = {p} AND _offset = {gap}")
    # Not served yet: readers see the published rows, the newest version is damaged.
    unserved = audit_dataset(config, ds, record=False)
    assert not unserved.ok and (unserved.missing, unserved.duplicated) == (0, 0)
    assert (unserved.newest.missing, unserved.newest.duplicated) == (1, 1)
    serve_current(spark, config, ds)

    result = audit_dataset(config, ds, run_id="broken")
    assert not result.ok
    assert (result.missing, result.duplicated, result.unexpected) == (1, 1, 0)
    row = part_row(result, p, "batch")
    assert row.sample_missing == [gap] and row.sample_duplicated == [dup]
    assert all(r.ok for r in result.partitions if (r.partition, r.layer) != (p, "batch"))

    cli = run_loglake(config, "audit", "job_views", "--no-record")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "FAILED" in cli.stdout and "1 missing, 1 duplicated" in cli.stdout
    assert f"[{p}] batch" in cli.stdout
    assert f"missing offsets: {gap}" in cli.stdout and f"duplicated offsets: {dup}" in cli.stdout
    # --no-record kept the stored results to the library calls' runs.
    stored = query(open_table(config.system_table_path(AUDIT_RESULTS)), "SELECT DISTINCT run_id FROM t ORDER BY run_id")
    assert [r["run_id"] for r in stored] == ["broken", "clean"]


# make test-long: the audit of a transactional topic whose aborted transactions and markers
# take offsets, checking exactly the committed records, in test_transactions.
@pytest.mark.long
def test_non_contiguous_offsets_are_read_from_the_log(spark, make_config):
    """Transactions leave commit/abort markers in the log: end - earliest overstates the
    records. Records of an aborted transaction are in no table and not missing."""
    config = make_config()
    ds = config.dataset("job_views")
    topic = ensure_topic(config, ds)
    records = [rec for rec, _ok in generate(ds, 300, seed=63)]
    producer = Producer(config.kafka_client_conf(**{"transactional.id": f"audit-test-{topic}"}))
    producer.init_transactions(30)
    for i in range(0, len(records), 50):
        producer.begin_transaction()
        for key, value in records[i:i + 50]:
            producer.produce(topic, key=key, value=value)
        if i == 100:
            producer.flush(30)  # in the log first: abort purges what is still queued
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    span = sum(hi - lo for lo, hi in log_bounds(config, topic).values())
    assert span > len(records)  # the markers take offsets
    build_half(spark, config, ds)
    result = audit_dataset(config, ds, record=False)
    assert result.ok, "\n".join(format_audit(result))
    assert result.offsets_checked == len(records) - 50  # one transaction of 50 aborted


def test_changelog_audit_accounts_for_every_offset(spark, make_config):
    from delta.tables import DeltaTable

    config = make_config()
    ds = config.dataset("company_ceos")
    res = produce(config, ds, 800, bad_fraction=0.05, seed=64)
    assert res.tombstones > 0
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "rebuild")
    more = produce(config, ds, 200, bad_fraction=0.05, seed=65)
    run_speed(spark, config, ds, available_now=True)
    result = audit_dataset(config, ds, record=False)
    assert result.ok, "\n".join(format_audit(result))
    # Batch accounts for the first 800 offsets by key, speed for the 200 after the watermark.
    by_layer = {layer: sum(r.offsets_checked for r in result.partitions
                           if r.layer == layer and r.point == "served") for layer in ("batch", "speed")}
    assert by_layer == {"batch": res.records, "speed": more.records}

    # Lose one key's latest row: its newest offset is reported missing.
    batch_path = config.table_path(ds, "batch")
    victim = query(open_table(batch_path), 'SELECT company_id, "_partition" AS p, "_offset" AS o FROM t '
                                           'ORDER BY o LIMIT 1')[0]
    DeltaTable.forPath(spark, batch_path).delete(f"company_id = '{victim['company_id']}'")
    serve_current(spark, config, ds)
    result = audit_dataset(config, ds, record=False)
    row = part_row(result, victim["p"], "batch")
    assert (row.missing, row.duplicated, row.unexpected) == (1, 0, 0)
    assert row.sample_missing == [victim["o"]]
