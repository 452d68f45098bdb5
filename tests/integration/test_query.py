"""`loglake query` reads; it never changes the lake (issue 11, item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from loglake.errors import ParamError
from loglake.planning import plan_batch
from loglake.produce import produce
from loglake.tables import snapshot
from spark_jobs.pipeline import recompute_and_publish
from loglake.cli import render_rows
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


def count(spark, config, sql: str, as_of: str | None = None) -> int:
    return query(spark, config, sql, as_of).first()[0]


def test_as_of_a_version_or_a_timestamp_and_the_output_formats(spark, lake):
    config, ds = lake
    first = count(spark, config, "SELECT count(*) FROM job_views")
    time.sleep(1.5)  # Delta commit timestamps are in milliseconds: a clear point between the two runs
    between = datetime.now(timezone.utc).isoformat()
    time.sleep(1.5)
    produce(config, ds, 100, seed=82)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "q2")
    now = count(spark, config, "SELECT count(*) FROM job_views")
    assert now > first

    # A raw table as of a Delta version; every table and serving view as of a timestamp.
    assert count(spark, config, "SELECT count(*) FROM batch.job_views", "0") == first
    assert count(spark, config, "SELECT count(*) FROM job_views", between) == first
    assert count(spark, config, "SELECT count(*) FROM batch.job_views", between) == first
    assert count(spark, config, "SELECT count(*) FROM job_views") == now  # no --as-of: the newest point

    # A version some table lacks: a clear error naming the table and what it has.
    newest = snapshot(config.table_path(ds, "batch")).version
    with pytest.raises(ParamError) as e:
        query(spark, config, "SELECT count(*) FROM batch.job_views", "999")
    assert e.value.field == "--as-of"
    assert f"version 999 of batch.job_views does not exist (its newest is {newest};" in str(e.value)
    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)}
    r = subprocess.run([sys.executable, "-m", "loglake.cli", "query", "SELECT * FROM batch.job_views",
                        "--as-of", "999"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.startswith("loglake: error: --as-of: version 999 of batch.job_views does not exist"), r.stderr
    assert "Traceback" not in r.stderr and "WARN" not in r.stderr

    # csv (a header line), json (one object per line), a table with its row count.
    df = query(spark, config, "SELECT _partition, _offset, viewed_at, source FROM job_views ORDER BY 1, 2 LIMIT 5")
    pdf = df.toPandas()
    csv = render_rows(pdf, "csv").splitlines()
    assert csv[0] == "_partition,_offset,viewed_at,source" and len(csv) == 6
    rows = [json.loads(line) for line in render_rows(pdf, "json").splitlines()]
    assert [(r["_partition"], r["_offset"]) for r in rows] == [(r[0], r[1]) for r in df.collect()]
    assert rows[0]["viewed_at"].endswith("Z") or "T" in rows[0]["viewed_at"]
    assert render_rows(pdf, "table").endswith("(5 rows)\n")
    assert render_rows(pdf.head(0), "table") == "(no rows)\n(0 rows)\n"
