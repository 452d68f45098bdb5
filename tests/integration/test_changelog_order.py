"""Changelog order (issue 11, item 9): a key's changes are ordered by offset within its
partition only, and a topic whose partition count differs from its dataset is refused."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from confluent_kafka.admin import NewTopic

from loglake.core.errors import ConfigError
from loglake.kafka.admin import TIMEOUT, admin, list_topics
from loglake.batch.planning import plan_backfill, plan_batch
from loglake.core.processes import wait_for
from loglake.lake.delta_io import latest_per_key
from loglake.speed.stream import start_stream

pytestmark = pytest.mark.integration


def test_a_topic_with_another_partition_count_is_refused_naming_the_key(spark, make_config):
    config = make_config()
    ceos, views = config.dataset("company_ceos"), config.dataset("job_views")
    client = admin(config)
    declared = {ceos.name: ceos.partitions, views.name: views.partitions}
    wrong = {ds.topic: declared[ds.name] + 2 for ds in (ceos, views)}
    for topic, future in client.create_topics([NewTopic(t, n, 1) for t, n in wrong.items()]).items():
        future.result(timeout=TIMEOUT)
    wait_for(lambda: all(list_topics(config).get(t) == n for t, n in wrong.items()), 30, "topic metadata")
    # A changelog backfill is refused before the log is read, so the range form is tried
    # on the events dataset.
    for ds, attempt in ((ceos, lambda: plan_batch(config, ceos)),
                        (views, lambda: plan_backfill(config, views, ranges=["0:0-0"])),
                        (ceos, lambda: start_stream(spark, config, ceos))):
        with pytest.raises(ConfigError) as e:
            attempt()
        assert e.value.key == f"datasets.{ds.name}.partitions"
        assert f"has {declared[ds.name] + 2} partitions but the dataset declares {declared[ds.name]}" in str(e.value)


def test_newest_change_per_key_is_ordered_by_offset_within_its_partition(spark):
    t0 = datetime(2026, 1, 1)
    rows = [
        # key a lives in partition 0: offset order decides, whatever the timestamps say.
        ("a", "old", 0, 5, t0 + timedelta(seconds=9)),
        ("a", "new", 0, 7, t0 + timedelta(seconds=1)),
        # key b spread over two partitions (a custom partitioner): partition 1's offset 3 is
        # lower than partition 0's 40, but its record is newer: Kafka time decides.
        ("b", "older", 0, 40, t0 + timedelta(seconds=2)),
        ("b", "newer", 1, 3, t0 + timedelta(seconds=5)),
    ]
    df = spark.createDataFrame(rows, "k string, v string, _partition int, _offset long, _kafka_timestamp timestamp")
    got = {r["k"]: r["v"] for r in latest_per_key(df, "k").collect()}
    assert got == {"a": "new", "b": "newer"}
