"""`loglake query` reads; it never changes the lake (issue 11, item 8)."""

from __future__ import annotations

import pytest

from loglake.errors import ParamError
from loglake.planning import plan_batch
from loglake.produce import produce
from loglake.tables import snapshot
from spark_jobs.pipeline import recompute_and_publish
from spark_jobs.serving import query

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 200, seed=81)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "q")
    return config, ds


def writes(path: str) -> list[str]:
    t = f"delta.`{path}`"
    return [
        f"DELETE FROM {t} WHERE true",
        f"delete from {t}",
        f"UPDATE {t} SET duration_ms = 0",
        f"INSERT INTO {t} SELECT * FROM {t}",
        f"WITH x AS (SELECT * FROM {t}) INSERT INTO {t} SELECT * FROM x",
        f"MERGE INTO {t} AS a USING {t} AS b ON a._offset = b._offset WHEN MATCHED THEN DELETE",
        f"INSERT OVERWRITE {t} SELECT * FROM {t} LIMIT 1",
        f"TRUNCATE TABLE {t}",
        f"DROP TABLE IF EXISTS {t}",
        f"RESTORE TABLE {t} TO VERSION AS OF 0",
        f"OPTIMIZE {t}",
        f"VACUUM {t} RETAIN 0 HOURS",
        f"ALTER TABLE {t} ADD COLUMNS (x int)",
        f"CREATE TABLE elsewhere USING delta AS SELECT * FROM {t}",
        "CREATE OR REPLACE TEMP VIEW job_views AS SELECT 1",
        "SET spark.sql.shuffle.partitions = 1",
    ]


def test_write_statements_are_refused_and_change_nothing(spark, lake):
    config, ds = lake
    path = config.table_path(ds, "batch")
    before = snapshot(path)
    for sql in writes(path):
        with pytest.raises(ParamError) as e:
            query(spark, config, sql)
        assert e.value.field == "sql" and "read-only" in str(e.value), sql
    after = snapshot(path)
    assert (after.version, after.files) == (before.version, before.files)


def test_reads_pass(spark, lake):
    config, ds = lake
    path = config.table_path(ds, "batch")
    assert query(spark, config, "SELECT count(*) AS n FROM batch.job_views").first()["n"] > 0
    assert query(spark, config, "WITH v AS (SELECT * FROM job_views) SELECT count(*) AS n FROM v").first()["n"] > 0
    assert query(spark, config, "SHOW TABLES IN batch").count() >= 1
    assert query(spark, config, f"DESCRIBE HISTORY delta.`{path}`").count() >= 1
    assert query(spark, config, "DESCRIBE batch.job_views").count() > 0
    before = snapshot(path).version
    assert query(spark, config, f"EXPLAIN DELETE FROM delta.`{path}`").count() == 1
    assert snapshot(path).version == before  # explained, not run
