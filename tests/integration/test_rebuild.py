"""`loglake rebuild`: a damaged or deleted table made again from the log (issue 12).

After a rebuild the serving view serves what it served before and every retained offset
is in the tables exactly once; when the log no longer holds what the table needs, the
rebuild refuses loudly before anything is moved.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from loglake.ops.audit import audit_dataset
from loglake.core.errors import DataLossError, ParamError
from loglake.kafka.admin import admin
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.lifecycle.rebuild import check_layer
from loglake.batch.recompute import recompute_from_log
from loglake.quality.pipeline import recompute_and_publish
from loglake.lifecycle.rebuild_job import rebuild
from loglake.serving.spark import query
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def served(spark, config, name: str) -> list[tuple]:
    return sorted(tuple(r) for r in query(spark, config, f"SELECT _partition, _offset FROM {name}").collect())


def test_batch_and_speed_tables_are_rebuilt_from_the_log(spark, make_config):
    config = make_config(topic_suffix="rebuild")
    ds = config.dataset("job_views")
    produce(config, ds, 300, seed=31, bad_fraction=0.05)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "first")
    produce(config, ds, 100, seed=32, bad_fraction=0.05)
    run_speed(spark, config, ds, available_now=True)
    before = served(spark, config, "job_views")
    assert len(before) == 380

    shutil.rmtree(config.table_path(ds, "batch"))  # deleted by mistake
    out = rebuild(spark, config, ds, "batch", "rebuild-batch")
    assert (out.records, out.quarantined, out.set_aside) == (285, 15, None)  # nothing left to set aside
    assert served(spark, config, "job_views") == before

    speed = Path(config.table_path(ds, "speed"))
    for f in list(speed.glob("*.parquet"))[:2]:  # damaged: data files gone
        f.unlink()
    out = rebuild(spark, config, ds, "speed", "rebuild-speed")
    assert Path(out.set_aside).exists() and (out.offsets, out.records, out.quarantined) == (100, 95, 5)
    assert served(spark, config, "job_views") == before
    assert audit_dataset(config, ds, record=False).ok

    # Retention deleted offsets the batch table holds: refused, nothing moved.
    client = admin(config)
    for fut in client.delete_records([TopicPartition(ds.topic, 0, 3)]).values():
        fut.result(timeout=30)
    version = len(list(Path(config.table_path(ds, "batch"), "_delta_log").glob("*.json")))
    with pytest.raises(DataLossError, match=rf"{ds.topic}\[0\] offsets \[0, 3\).*RESTORE TABLE"):
        rebuild(spark, config, ds, "batch", "lossy")
    assert len(list(Path(config.table_path(ds, "batch"), "_delta_log").glob("*.json"))) == version
    assert served(spark, config, "job_views") == before


def test_a_changelogs_latest_state_is_rebuilt(spark, make_config):
    config = make_config(topic_suffix="rebuild-cl")
    ds = config.dataset("company_ceos")
    produce(config, ds, 200, seed=33)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "first")
    produce(config, ds, 100, seed=34)
    run_speed(spark, config, ds, available_now=True)
    latest = config.table_path(ds, "latest")
    expected = sorted(tuple(r) for r in recompute_from_log(spark, config, ds).select("company_id", "ceo").collect())
    shutil.rmtree(latest)
    rebuild(spark, config, ds, "latest", "rebuild-latest")
    got = sorted(tuple(r) for r in spark.read.format("delta").load(latest).select("company_id", "ceo").collect())
    assert got == expected
    with pytest.raises(ParamError, match="not a changelog"):
        check_layer(config.dataset("job_views"), "latest")
