"""`loglake query` reads; it never changes the lake (issue 11, item 8)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

import loglake
from loglake.serving.arrow import sql as arrow_sql
from loglake.cli.queries import render_rows
from loglake.core.config import load_config
from loglake.core.errors import ParamError
from loglake.batch.planning import plan_batch
from loglake.core.processes import free_port
from loglake.local.produce import produce
from loglake.testing import write_conf
from loglake.ledger.snapshots import DatasetSnapshot, served_ranges
from loglake.tables import snapshot
from loglake.quality.pipeline import recompute_and_publish
from loglake.serving.spark import query
from loglake.speed.stream import run_speed
from loglake.testing import run_loglake as cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lake(spark, kafka_bootstrap, tmp_path_factory):
    """job_views recomputed and published once for the module: the tests below only read it,
    but for the last, which adds a second batch run."""
    root = tmp_path_factory.mktemp("query-lake")
    config = load_config(write_conf(root, kafka_bootstrap), home=root / "state")
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
        for engine in (lambda: query(spark, config, sql), lambda: arrow_sql(config, sql)):
            with pytest.raises(ParamError) as e:
                engine()
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
    r = cli(config, "query", "SELECT * FROM batch.job_views", "--as-of", "999")
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


# --- reads without the broker, and the two engines -----------------------------------


@pytest.fixture(scope="module")
def both(spark, kafka_bootstrap, tmp_path_factory):
    """Both datasets with batch rows below the watermark and speed rows above it (and
    quarantined ones): job_views (events) and company_ceos (a changelog)."""
    root = tmp_path_factory.mktemp("query-both")
    config = load_config(write_conf(root, kafka_bootstrap, topic_suffix="qboth"), home=root / "state")
    datasets = [config.dataset("job_views"), config.dataset("company_ceos")]
    for seed, ds in enumerate(datasets, 91):
        produce(config, ds, 200, seed=seed, bad_fraction=0.02)
        run_speed(spark, config, ds, available_now=True)
        recompute_and_publish(spark, config, ds, plan_batch(config, ds), f"both-{ds.name}")
    time.sleep(1.0)  # Delta commit times are in milliseconds: a clear point between the two lots
    between = datetime.now(timezone.utc).isoformat()
    time.sleep(1.0)
    for seed, ds in enumerate(datasets, 95):
        produce(config, ds, 60, seed=seed, bad_fraction=0.02)
        run_speed(spark, config, ds, available_now=True)
    return config, between


def kafka_down() -> dict:
    """The environment of a loglake whose broker is gone: a port nobody listens on."""
    return {"LOGLAKE_KAFKA_BOOTSTRAP": f"localhost:{free_port()}"}


def test_queries_need_no_broker(spark, both, monkeypatch):
    config, _between = both
    sql = "SELECT source, count(*) AS n FROM job_views GROUP BY source ORDER BY source"
    expected = render_rows(query(spark, config, sql).toPandas(), "csv")
    assert expected.count("\n") == 6  # a header and the five sources
    r = cli(config, "query", sql, "--format", "csv", env=kafka_down())
    assert r.returncode == 0 and "did not answer" not in r.stderr, r.stderr
    assert r.stdout == expected

    monkeypatch.setenv(*kafka_down().popitem())
    lake = loglake.connect(config.conf_dir, home=config.home, spark=spark)
    assert lake.config.kafka.bootstrap_servers != config.kafka.bootstrap_servers
    served = lake.arrow("job_views")
    assert served.num_rows == query(spark, config, "SELECT count(*) FROM job_views").first()[0]
    assert render_rows(lake.sql(sql).toPandas(), "csv") == expected
    ceos = sorted(lake.arrow("company_ceos")["company_id"].to_pylist())
    assert ceos == sorted(r[0] for r in query(spark, config, "SELECT company_id FROM company_ceos").collect())

    # Only coverage that starts above offset 0 needs the log's earliest offset. Kafka answers:
    # [5, 9) of partition 1 does not start at the earliest offset (0), so speed serves it all;
    # Kafka down: batch serves exactly the offsets it covered, speed the rest.
    ledger = [{"partition": 0, "start": 0, "end": 9, "state": "published"},
              {"partition": 1, "start": 5, "end": 9, "state": "published"}]
    snap = DatasetSnapshot("job_views", {}, None, 0, ledger)
    assert served_ranges(config, config.dataset("job_views"), snap) == {0: (0, 9)}
    assert served_ranges(lake.config, config.dataset("job_views"), snap) == {0: (0, 9), 1: (5, 9)}


# Statements each engine runs; their rows are compared row for row in every output format.
SAME = [
    "SELECT source, count(*) AS n FROM job_views GROUP BY source ORDER BY source",
    "SELECT count(*) FROM job_views",
    "SELECT * FROM job_views ORDER BY _partition, _offset",
    "SELECT _partition, count(*) AS n, min(_offset) AS first, max(_offset) AS last FROM speed.job_views "
    "GROUP BY _partition ORDER BY _partition",
    "SELECT v.view_id, v.viewed_at, b._offset FROM job_views v JOIN `batch`.`job_views` b "
    "ON v._partition = b._partition AND v._offset = b._offset ORDER BY v.view_id LIMIT 20",
    "SELECT _layer, reason_code, count(*) AS n FROM quarantine.job_views GROUP BY _layer, reason_code ORDER BY 1, 2",
    "SELECT * FROM company_ceos ORDER BY company_id",
    "WITH c AS (SELECT company_id, ceo, since FROM company_ceos) "
    "SELECT count(*) AS n, min(company_id) AS first_id, max(since) AS newest FROM c",
    "SELECT company_id, ceo FROM speed.company_ceos_latest ORDER BY ceo DESC, company_id -- the latest state",
    "SELECT company_id, company FROM batch.company_ceos WHERE company LIKE '%a%' ORDER BY company NULLS FIRST, 1",
]


def test_both_engines_give_the_same_rows(spark, both):
    from loglake.cli.queries import arrow_rows, spark_rows

    config, between = both
    for sql, as_of in [(sql, None) for sql in SAME] + [(SAME[0], between), (SAME[7], between)]:
        by_spark = spark_rows(config, sql, as_of, spark=spark)
        assert len(by_spark) > 0, sql
        by_arrow = arrow_rows(config, sql, as_of)
        for fmt in ("csv", "json", "table"):
            assert render_rows(by_arrow, fmt) == render_rows(by_spark, fmt), (sql, as_of, fmt)
    # As of the time between the two lots: fewer rows than now.
    assert len(arrow_rows(config, SAME[2], between)) < len(arrow_rows(config, SAME[2]))


def test_the_default_engine_starts_no_jvm_for_a_query_and_spark_runs_the_rest(both):
    config, _between = both
    jvm = "JVM of pid"
    log = config.home / "logs" / "cli.log"
    log.unlink(missing_ok=True)
    r = cli(config, "query", "SELECT count(*) AS n FROM company_ceos", "--format", "json")
    assert r.returncode == 0 and r.stdout.startswith('{"n":'), r.stderr
    assert not log.exists() or jvm not in log.read_text()  # no Spark session was started
    # The same statement refused by both engines, without a JVM when it is plainly a write.
    for engine in ([], ["--engine", "arrow"]):
        r = cli(config, "query", "DELETE FROM batch.job_views", *engine)
        assert r.returncode == 2 and "sql: loglake query is read-only: DELETE FROM" in r.stderr, r.stderr
    r = cli(config, "query", "WITH x AS (SELECT * FROM job_views) INSERT INTO batch.job_views SELECT * FROM x",
            "--engine", "arrow")
    assert r.returncode == 2 and "read-only" in r.stderr, r.stderr
    assert not log.exists() or jvm not in log.read_text()
    # What the arrow engine leaves to Spark (a division; SHOW) runs there, as before.
    r = cli(config, "query", "SELECT count(*) / 4 AS quarter FROM job_views", "--format", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "quarter" and "." in r.stdout.splitlines()[1], r
    assert jvm in log.read_text() and "leaves this statement to Spark: a division" in log.read_text()
    r = cli(config, "query", "SHOW TABLES IN batch", "--engine", "arrow")
    assert r.returncode == 2 and r.stderr.startswith("loglake: error: --engine arrow: SHOW is not a query"), r.stderr
    assert "Traceback" not in r.stderr


def test_a_dataset_with_no_table_yet_is_said_without_starting_spark(kafka_bootstrap, tmp_path):
    """Issue 45 (4): against a lake where nothing has landed, the Arrow engine says so in loglake's
    words; it used to hand the statement to Spark, which on the compose stack failed with a stack trace."""
    config = load_config(write_conf(tmp_path, kafka_bootstrap, topic_suffix="qnone"), home=tmp_path / "state")
    r = cli(config, "query", "SELECT count(*) AS n FROM job_views")
    assert r.returncode != 0 and r.stdout == "", r
    assert "dataset job_views has no speed or batch table yet" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = cli(config, "query", "SELECT count(*) AS n FROM batch.job_views")
    assert r.returncode != 0 and "table batch.job_views does not exist yet" in r.stderr, r.stderr
    log = config.home / "logs" / "cli.log"
    assert not log.exists() or "JVM of pid" not in log.read_text()  # no Spark session was started
