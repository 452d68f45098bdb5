"""A flood of malformed records keeps the driver's memory bounded (issue 11, item 7).

Both layers note where the quarantined records of a pass are so that a second pass parses
only those. Noting every bad offset on the driver grows with the flood; above
``parse.EXACT_BAD_LIMIT`` offsets a pass notes one window per partition instead. The limit
is lowered here so a small flood takes the bounded path; the tables must come out exact.
"""

from __future__ import annotations

import pytest

from loglake.ledger.planning import plan_batch
from loglake.local.produce import produce
from loglake.ledger.tables import open_table, query
from spark_jobs import parse
from spark_jobs.recompute import run_batch
from spark_jobs.streaming import run_speed

pytestmark = pytest.mark.integration

FLOOD = 1500


@pytest.fixture
def observed(monkeypatch):
    """The observations the passes made (the real ``counted``; its values kept once read)."""
    seen: list = []
    real = parse.counted

    def spy(*args, **kwargs):
        frame, obs = real(*args, **kwargs)
        seen.append(obs)
        return frame, obs

    monkeypatch.setattr(parse, "counted", spy)
    monkeypatch.setattr(parse, "EXACT_BAD_LIMIT", 100, raising=False)
    return seen


def flood(config, ds):
    produce(config, ds, 200, seed=91)
    produce(config, ds, FLOOD, seed=92, bad_fraction=1.0)
    produce(config, ds, 200, seed=93)


def assert_bounded(observations):
    assert observations
    for obs in observations:
        values = obs.get
        assert "bad" not in values  # no per-record list on the driver
        assert len(repr(values)) < 2000, values


def quarantined(config, ds, layer):
    return query(open_table(config.table_path(ds, "quarantine")),
                 f"SELECT _partition, _offset, reason_code FROM t WHERE _layer = '{layer}'")


def test_batch_flood_passes_through_quarantine_with_bounded_driver_memory(spark, make_config, observed):
    config = make_config()
    ds = config.dataset("job_views")
    flood(config, ds)
    summary = run_batch(spark, config, ds, plan_batch(config, ds), "flood")
    assert (summary.records, summary.quarantined) == (400, FLOOD)
    rows = quarantined(config, ds, "batch")
    assert len(rows) == len({(r["_partition"], r["_offset"]) for r in rows}) == FLOOD
    assert all(r["reason_code"] for r in rows)
    assert_bounded(observed)


def test_speed_flood_passes_through_quarantine_with_bounded_driver_memory(spark, make_config, observed):
    config = make_config()
    ds = config.dataset("job_views")
    flood(config, ds)
    run_speed(spark, config, ds, available_now=True)
    assert len(query(open_table(config.table_path(ds, "speed")), "SELECT _offset FROM t")) == 400
    rows = quarantined(config, ds, "speed")
    assert len(rows) == len({(r["_partition"], r["_offset"]) for r in rows}) == FLOOD
    assert all(r["reason_code"] for r in rows)
    assert_bounded(observed)
