"""`loglake status` shows where the speed layer is from the stream's own record (issue 45, item 4).

The consumer group's position follows each micro-batch asynchronously, so a stream that has
landed records may have no group record yet (its first micro-batch, a run that ended before the
record was made). Status showed no position then; it reads the offsets the tables hold instead."""

from __future__ import annotations

import pytest

from loglake.kafka.admin import admin, log_bounds
from loglake.local.produce import produce
from loglake.ops.status import dataset_status, format_status
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def test_status_shows_the_landed_position_where_the_group_has_no_record(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 120, bad_fraction=0.1, seed=451)
    run_speed(spark, config, ds, available_now=True)
    client = admin(config)
    client.delete_consumer_groups([ds.consumer_group])[ds.consumer_group].result(timeout=30)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    st = dataset_status(config, ds)
    assert {s.partition: s.speed_position for s in st.partitions} == ends
    assert all(s.speed_lag == 0 for s in st.partitions)
    lines = format_status(ds, st)
    for p, hi in ends.items():
        assert any(line.startswith(f"  [{p}] end {hi}  speed position {hi} (lag 0") for line in lines), lines
