"""The loglake sensors (plugins/loglake_airflow/sensors.py) against a real broker and real Delta tables.

Each poke reads the state afresh through ``LoglakeHook``, with the configuration taken from
the environment as an Airflow worker has it: the offsets ledger (delta-rs) for the batch
watermark, the log end and the speed layer's consumer group (confluent-kafka) for the lag.
A poke is false before the batch job publishes (or the speed stream reads), true after.
"""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from loglake.core import paths
from loglake.kafka.admin import end_offsets
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.batch.recompute import run_batch
from loglake.quality.pipeline import recompute_and_publish
from loglake.quality.gate import run_quality
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(monkeypatch, tmp_path):
    """Point the environment at a test's config, as ``loglake up`` does for Airflow's processes;
    plugins/ on sys.path as Airflow puts it."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
    monkeypatch.delenv("LOGLAKE_KAFKA_BOOTSTRAP", raising=False)

    def point_at(config) -> None:
        monkeypatch.setenv("LOGLAKE_CONF", str(config.conf_dir))
        monkeypatch.setenv("LOGLAKE_HOME", str(config.home))
        monkeypatch.setenv("LOGLAKE_PROFILE", config.profile_name)
    return point_at


def now() -> datetime:
    return datetime.now(timezone.utc)


def test_the_watermark_sensor_waits_for_published_ranges(spark, make_config, worker):
    from loglake_airflow.sensors import BatchWatermarkSensor

    config = make_config()
    ds = config.dataset("job_views")
    worker(config)
    produce(config, ds, 600, bad_fraction=0.05, seed=81)
    ends = end_offsets(config, ds.topic)
    assert all(e > 0 for e in ends.values())
    # A target as a producer task's XCom gives it (partitions as strings); a run that started now.
    reach = BatchWatermarkSensor(task_id="reach", dataset=ds.name, target={str(p): e for p, e in ends.items()})
    advance = BatchWatermarkSensor(task_id="advance", dataset=ds.name)
    run = {"dag_run": SimpleNamespace(start_date=now())}
    assert reach.poke(run) is False and advance.poke(run) is False

    plan = plan_batch(config, ds)
    run_batch(spark, config, ds, plan, "sensor-1")
    assert reach.poke(run) is False and advance.poke(run) is False  # written, not yet through the gate
    run_quality(spark, config, ds, plan, "sensor-1")
    done = reach.poke(run)
    assert done and done.xcom_value == {str(p): e for p, e in sorted(ends.items())}
    assert advance.poke(run)

    # From a watermark that already exists: advanced only once the next range is published.
    since = now()
    later = BatchWatermarkSensor(task_id="later", dataset=ds.name, since=since.isoformat())
    assert later.poke({}) is False
    produce(config, ds, 150, seed=82)
    more = end_offsets(config, ds.topic)
    further = BatchWatermarkSensor(task_id="further", dataset=ds.name, target=more)
    assert later.poke({}) is False and further.poke({}) is False
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "sensor-2")
    assert later.poke({}) and further.poke({}).xcom_value == {str(p): e for p, e in sorted(more.items())}
    assert reach.poke(run)  # a target once reached stays reached


def test_the_caught_up_sensor_waits_for_the_speed_layer(spark, make_config, worker):
    from loglake_airflow.sensors import StreamCaughtUpSensor

    config = make_config()
    ds = config.dataset("job_views")
    worker(config)
    produce(config, ds, 400, seed=83)

    def caught_up(max_lag: int = 0):
        return StreamCaughtUpSensor(task_id=f"caught-up-{max_lag}", dataset=ds.name, max_lag=max_lag).poke({})

    assert caught_up() is False  # no position yet: every record is behind
    assert caught_up(399) is False
    assert sum(caught_up(400).xcom_value.values()) == 400

    run_speed(spark, config, ds, available_now=True)
    done = caught_up()
    assert done and done.xcom_value == {str(p): 0 for p in range(ds.partitions)}

    produce(config, ds, 25, seed=84)
    assert caught_up() is False and caught_up(24) is False
    assert caught_up(25)
    run_speed(spark, config, ds, available_now=True)
    assert caught_up()
