"""Topics written by transactional producers: committed records only, sparse offsets.

An exactly-once producer (Kafka Streams, Flink, any transactional producer) leaves a
commit or abort marker after each transaction and, for an aborted one, records no
``read_committed`` consumer is given. What the tables must hold is checked against the
log as an independent read_committed consumer (confluent-kafka, not loglake's reader)
sees it, so a bug shared by loglake's reader and writer cannot hide.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from pyspark.sql import functions as F

from loglake.core.errors import DataLossError
from loglake.kafka.admin import admin, group_offsets, log_bounds
from loglake.batch.planning import plan_batch
from loglake.ledger.ranges import batch_watermarks
from loglake.local.produce import produce
from loglake.ops.audit import audit_dataset
from loglake.ops.audit_report import format_audit
from loglake.ops.diff import diff_range
from loglake.ops.status import dataset_status
from loglake.records.kafka_source import check_retained
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def log_offsets(config, topic: str, isolation: str) -> set[tuple[int, int]]:
    """(partition, offset) of every record a consumer of ``isolation`` is given."""
    c = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": "test-isolation",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation})
    bounds = log_bounds(config, topic)
    pending = {p for p, (lo, hi) in bounds.items() if hi > lo}
    found = set()
    try:
        c.assign([TopicPartition(topic, p, bounds[p][0]) for p in pending])
        while pending:
            for m in c.consume(1000, timeout=5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    pending.discard(m.partition())
                else:
                    found.add((m.partition(), m.offset()))
    finally:
        c.close()
    return found


def landed(spark, config, ds, layer: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row of ``layer`` and of its quarantine rows."""
    rows = spark.read.format("delta").load(config.table_path(ds, layer)).select("_partition", "_offset")
    q = (spark.read.format("delta").load(config.table_path(ds, "quarantine"))
         .where(F.col("_layer") == layer).select("_partition", "_offset"))
    return [(r[0], r[1]) for r in rows.unionByName(q).collect()]


def test_a_transactional_topic_lands_its_committed_records_once_and_its_aborted_ones_nowhere(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    # As in the issue, smaller: plain records, transactions (every third aborted), plain records.
    malformed: list = []  # the producer's own account of the records it broke (what reached the log)
    first = produce(config, ds, 600, bad_fraction=0.05, seed=201, malformed=malformed)
    txn = produce(config, ds, 600, bad_fraction=0.05, seed=202, transactional=True, transaction_size=40, abort_every=3,
                  malformed=malformed)
    last = produce(config, ds, 300, bad_fraction=0.05, seed=203, malformed=malformed)
    assert (txn.transactions, txn.aborted_transactions, txn.aborted, txn.records) == (15, 5, 200, 400)
    committed = log_offsets(config, ds.topic, "read_committed")
    everything = log_offsets(config, ds.topic, "read_uncommitted")
    aborted = everything - committed
    assert len(malformed) == len(set(malformed)) == first.bad + txn.bad + last.bad > 0
    assert set(malformed) <= committed  # an aborted transaction's broken records are not counted
    assert len(committed) == first.records + txn.records + last.records == 1300
    assert len(aborted) == txn.aborted == 200
    # The markers take offsets too: the log's span is more than all its records.
    assert sum(hi - lo for lo, hi in log_bounds(config, ds.topic).values()) > len(everything)

    run_speed(spark, config, ds, available_now=True)
    speed = landed(spark, config, ds, "speed")
    assert len(speed) == len(set(speed)), "an offset landed twice in the speed layer"
    assert set(speed) == committed, (f"{len(set(speed) & aborted)} aborted records served, "
                                     f"{len(committed - set(speed))} committed records missing")
    q = (spark.read.format("delta").load(config.table_path(ds, "quarantine")).where(F.col("_layer") == "speed")
         .select("_partition", "_offset").collect())
    assert {(r[0], r[1]) for r in q} == set(malformed)  # the quarantine holds what was broken, and only that

    result = recompute_and_publish(spark, config, ds, plan_batch(config, ds), "txn")
    assert result is not None
    batch = landed(spark, config, ds, "batch")
    assert len(batch) == len(set(batch)) and set(batch) == committed

    # Markers and aborted records are not missing offsets: the watermark reaches the end,
    # the audit checks exactly the committed records, the diff finds nothing, no lag.
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    assert batch_watermarks(config, ds) == ends
    assert group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends
    audit = audit_dataset(config, ds, record=False)
    assert audit.ok, "\n".join(format_audit(audit))
    assert audit.offsets_checked == len(committed)
    for p, (lo, hi) in log_bounds(config, ds.topic).items():
        d = diff_range(config, ds, p, lo, hi)
        assert (d.missing_in_speed.count, d.missing_in_batch.count, d.changed.rows) == (0, 0, 0)
    status = dataset_status(config, ds)
    assert [(s.speed_lag, s.batch_lag) for s in status.partitions] == [(0, 0)] * ds.partitions

    # An open transaction: its records are not readable yet (read_committed stops at the last
    # stable offset), so the log's end does not move, and nothing waits for them.
    # Its client log goes to Python's logging, not to the terminal, if it outlives the test's broker.
    open_txn = Producer({"bootstrap.servers": config.kafka.bootstrap_servers, "transactional.id": f"open-{ds.topic}",
                         "logger": logging.getLogger("tests.kafka")})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(20):
        open_txn.produce(ds.topic, key=str(i).encode(), value=b'{"not": "committed yet"}')
    open_txn.flush(30)
    assert {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()} == ends
    assert not plan_batch(config, ds).ranges
    run_speed(spark, config, ds, available_now=True)
    assert len(landed(spark, config, ds, "speed")) == len(committed)
    open_txn.abort_transaction(30)

    # Retention is still loud on a sparse topic: offsets deleted before the batch layer read them.
    more = produce(config, ds, 300, seed=204, transactional=True, transaction_size=30, abort_every=2)
    p = max(more.by_partition, key=more.by_partition.get)
    cut = log_bounds(config, ds.topic)[p][1] - 1
    client = admin(config)
    for fut in client.delete_records([TopicPartition(ds.topic, p, cut)]).values():
        fut.result(30)
    with pytest.raises(DataLossError, match=rf"{ds.topic}\[{p}\]"):
        check_retained(config, list(plan_batch(config, ds).ranges))


def test_a_byte_budget_sizes_micro_batches_by_the_committed_records_only(make_config):
    """``speed.max_bytes_per_trigger``: the cap is the budget ÷ the mean size of the topic's newest
    committed records (key, value, headers); an aborted transaction's records, though larger and
    newer, are never read, as the stream never reads them."""
    from loglake.kafka.admin import ensure_topic
    from loglake.speed.sizing import size_micro_batches

    config = make_config(speed={"max_bytes_per_trigger": "64k", "max_offsets_per_trigger": 100_000})
    ds = config.dataset("job_views")
    ensure_topic(config, ds)
    # Nothing to size by yet: the records cap alone, said so.
    empty = size_micro_batches(config, ds.topic)
    assert (empty.max_offsets, empty.mean_bytes) == (100_000, None)
    assert "holds no record" in empty.describe()

    p = Producer({"bootstrap.servers": config.kafka.bootstrap_servers, "transactional.id": f"sizing-{ds.topic}"})
    p.init_transactions()
    for commit, value, count in ((True, b"v" * 1000, 200), (False, b"w" * 10_000, 20)):
        p.begin_transaction()
        for partition in range(ds.partitions):
            for i in range(count):
                p.produce(ds.topic, key=b"k%09d" % i, value=value, partition=partition, headers=[("h", b"12345")])
        if commit:
            p.commit_transaction(60)  # flushes
        else:
            p.flush(60)  # in the log first: an abort purges what is still queued
            p.abort_transaction(60)
    # 10 + 1,000 + 6 bytes per committed record; the aborted 10 KB ones are the log's newest:
    # 200 records, a commit marker, 20 aborted records and an abort marker in each partition.
    assert {hi for _lo, hi in log_bounds(config, ds.topic).values()} == {222}
    sized = size_micro_batches(config, ds.topic)
    assert sized.mean_bytes == 1016
    assert sized.max_offsets == 65_536 // 1016 == 64
    assert sized.sampled >= ds.partitions * 40
    assert "mean record 1,016 B" in sized.describe() and "bound by speed.max_bytes_per_trigger 64k" in sized.describe()
    # A cap in records alone binds first when it is the smaller.
    assert size_micro_batches(make_config(speed={"max_bytes_per_trigger": "64k", "max_offsets_per_trigger": 50}),
                              ds.topic).max_offsets == 50
    # No budget: the records cap, the topic unread.
    unsized = size_micro_batches(make_config(speed={"max_offsets_per_trigger": 70, "max_bytes_per_trigger": None}),
                                 ds.topic)
    assert (unsized.max_offsets, unsized.mean_bytes) == (70, None) and "no byte budget" in unsized.bound


def exact_noted(monkeypatch) -> list[bool]:
    """How each micro-batch asks ``counting.counted`` to note its bad offsets (``exact``), in order."""
    from loglake.records import counting
    noted = []
    real_counted = counting.counted

    def counted(*args, **kwargs):
        noted.append(kwargs.get("exact"))
        return real_counted(*args, **kwargs)

    monkeypatch.setattr(counting, "counted", counted)
    return noted


def test_a_micro_batch_replayed_after_a_crash_is_noted_by_the_span_it_was_planned_with(spark, make_config,
                                                                                        monkeypatch):
    """A stream's first micro-batch may be one the previous run planned (Spark's offset log)
    under a larger cap: it is noted by its own span, not by this run's cap."""
    from loglake.records import counting
    from loglake.speed import checkpoint
    from loglake.speed import stream as streaming

    suffix = f"replayed-{uuid.uuid4().hex[:6]}"
    config = make_config(speed={"max_offsets_per_trigger": 100, "max_bytes_per_trigger": None}, topic_suffix=suffix)
    ds = config.dataset("job_views")
    produce(config, ds, 400, bad_fraction=0.1, seed=221)
    monkeypatch.setattr(counting, "EXACT_BAD_LIMIT", 60)  # the driver decides; a small limit makes 100 "large"

    def crash(*args, **kwargs):
        raise RuntimeError("the driver died after planning the micro-batch")

    with monkeypatch.context() as m:
        m.setattr(streaming, "process_batch", crash)
        with pytest.raises(Exception, match="the driver died"):
            run_speed(spark, config, ds, available_now=True)
    # Spark shares the cap out among the partitions, rounding down: up to 100, above the limit.
    assert 60 < checkpoint.planned_span(spark, config.checkpoint_path(ds), ds.topic, 0) <= 100

    noted = exact_noted(monkeypatch)
    # Restarted with a smaller cap: the same conf directory, state and topic.
    config = make_config(speed={"max_offsets_per_trigger": 50, "max_bytes_per_trigger": None}, topic_suffix=suffix)
    ds = config.dataset("job_views")
    last = run_speed(spark, config, ds, available_now=True)
    spans = [records for records, _ms in last["_batches"].values()]
    # The replayed micro-batch (100 offsets) takes the bounded path; the new ones (≤ 50) are exact.
    assert noted[0] is False and noted[1:] and all(noted[1:]), noted
    everything = landed(spark, config, ds, "speed")  # speed rows and the speed layer's quarantine rows
    assert len(everything) == len(set(everything)) == 400, spans


def test_a_stream_under_a_byte_budget_lands_every_committed_record_once_in_micro_batches_within_it(spark,
                                                                                                 make_config,
                                                                                                 monkeypatch):
    from loglake.speed.sizing import size_micro_batches
    from loglake.records import counting
    # A records cap above counting.EXACT_BAD_LIMIT: the sized cap, far below it, is the one that binds.
    config = make_config(speed={"max_bytes_per_trigger": "32k", "max_offsets_per_trigger": 2 * counting.EXACT_BAD_LIMIT})
    ds = config.dataset("job_views")
    txn = produce(config, ds, 1200, bad_fraction=0.05, seed=211, transactional=True, transaction_size=50,
                  abort_every=4)
    cap = size_micro_batches(config, ds.topic).max_offsets
    assert 100 < cap < 400  # job_views events are ~100-200 B: the budget, not the records cap, binds
    noted = exact_noted(monkeypatch)
    last = run_speed(spark, config, ds, available_now=True)
    # Micro-batches of at most the sized cap note their bad offsets one by one.
    assert noted and all(noted), noted
    assert last["_sizing"].max_offsets == cap
    spans = [records for records, _ms in last["_batches"].values()]
    span = sum(hi - lo for lo, hi in log_bounds(config, ds.topic).values())
    assert max(spans) <= cap
    assert len(spans) >= -(-span // cap)
    committed = log_offsets(config, ds.topic, "read_committed")
    assert len(committed) == txn.records
    speed = landed(spark, config, ds, "speed")
    assert len(speed) == len(set(speed)) and set(speed) == committed
