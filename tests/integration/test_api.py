"""The Python API (issue 12): ``loglake.connect()``, ``lake.sql``, ``lake.arrow`` without a JVM."""

from __future__ import annotations

import pytest

import loglake
from loglake.core.errors import ParamError
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.maintenance.job import run_maintenance
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def fill(spark, config, ds, seed: int) -> None:
    produce(config, ds, 200, seed=seed, bad_fraction=0.02)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), f"first-{seed}")
    produce(config, ds, 100, seed=seed + 1)
    run_speed(spark, config, ds, available_now=True)


# make test-long only; make test covers its parts: loglake.connect() and both engines giving the same rows, writes
# refused, in test_query; a view read while a batch run publishes and maintenance expires, in test_snapshots.
@pytest.mark.long
def test_connect_sql_and_arrow_agree_and_views_stay_exact(spark, make_config):
    config = make_config(topic_suffix="api")
    jv, ceos = config.dataset("job_views"), config.dataset("company_ceos")
    fill(spark, config, jv, 41)
    produce(config, ceos, 200, seed=43, bad_fraction=0.02)  # a changelog served from its speed side only
    run_speed(spark, config, ceos, available_now=True)
    lake = loglake.connect(config.conf_dir, home=config.home, spark=spark)
    assert "job_views" in lake.tables() and "batch.job_views" in lake.tables()

    offsets = lake.sql("SELECT _partition, _offset FROM job_views")
    assert offsets.count() == 296
    # A batch run publishes and maintenance expires the speed rows below the new watermark:
    # the DataFrame made before reads what it read; a new call sees the new point, as exact.
    recompute_and_publish(spark, config, jv, plan_batch(config, jv), "second")
    assert run_maintenance(spark, config, jv).rows_expired > 0
    assert offsets.count() == 296
    assert lake.sql("SELECT count(*) AS n FROM job_views").first()["n"] == 296

    # Arrow without a JVM gives the same rows as Spark: a serving view, a raw table, a changelog's view.
    served = sorted(tuple(r) for r in lake.sql("SELECT _partition, _offset, view_id FROM job_views").collect())
    arrow = lake.arrow("job_views")
    assert sorted(zip(*(arrow[c].to_pylist() for c in ("_partition", "_offset", "view_id")))) == served
    assert lake.arrow("batch.job_views").num_rows == lake.table("batch.job_views").count()
    state = sorted(tuple(r) for r in lake.sql("SELECT company_id, ceo FROM company_ceos").collect())
    ceo_arrow = lake.arrow("company_ceos")
    assert sorted(zip(ceo_arrow["company_id"].to_pylist(), ceo_arrow["ceo"].to_pylist())) == state and state

    with pytest.raises(ParamError, match="unknown table or view 'nope'"):
        lake.arrow("nope")
    with pytest.raises(ParamError, match="read-only"):
        lake.sql("DELETE FROM batch.job_views")
