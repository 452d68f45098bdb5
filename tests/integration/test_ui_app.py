"""The loglake UI app (plugins/loglake_airflow/ui.py) over a real broker and real Delta tables.

The app runs in-process through FastAPI's TestClient; what it shows must be exactly
what ``loglake.ops.status.dataset_status`` computes for the same config. The page inside
a running Airflow, logged in, is tested in tests/system/test_ui.py.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from html.parser import HTMLParser

import pytest

from loglake.core import paths
from loglake.core.config import load_config
from loglake.kafka.admin import ensure_topic, log_bounds
from loglake.batch.planning import plan_backfill
from loglake.local.produce import produce
from loglake.core.contracts import QUALITY_RESULTS
from loglake.ledger.results import data_docs_dir
from loglake.ops.status import dataset_status, format_status
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed

from loglake.testing import write_conf

pytestmark = pytest.mark.integration

WEEK_MS = 7 * 24 * 3600 * 1000


@pytest.fixture
def ui(monkeypatch, tmp_path):
    """``create_app`` importable as the api-server has it (plugins/ on sys.path)."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
    from fastapi.testclient import TestClient
    from loglake_airflow.ui import create_app

    return lambda config, **kw: TestClient(create_app(lambda: config, **kw))


class Cells(HTMLParser):
    """Every element with data-field: (dataset, partition or table, field) → data-value."""

    def __init__(self):
        super().__init__()
        self.values: dict[tuple, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-field" in a:
            where = a.get("data-partition", a.get("data-table"))
            self.values[a["data-dataset"], where, a["data-field"]] = a.get("data-value")


def write_quality_row(config, ds, published: bool) -> None:
    """One ``_quality_results`` row, as the contract in loglake/ledger/results.py describes it."""
    import pyarrow as pa
    from deltalake import write_deltalake

    now = datetime.now(timezone.utc)
    row = {"dataset": ds.name, "topic": ds.topic, "ranges": '[{"partition": 0, "start": 0, "end": 10}]',
           "run_id": "test-run", "expectation": "expect_column_values_to_not_be_null", "column": "user_id",
           "severity": "fail", "success": published, "element_count": 10, "unexpected_count": 0 if published else 3,
           "observed": "{}", "sample_offsets": "", "published": published, "validated_at": now}
    write_deltalake(config.system_table_path(QUALITY_RESULTS), pa.Table.from_pylist([row]), mode="append")


@pytest.fixture(scope="module")
def state(spark, kafka_bootstrap, tmp_path_factory):
    """job_views with a week's retention: speed caught up then 300 records behind, batch on
    partition 0 only up to half of what speed had; company_ceos compacted and empty.
    Read-only for the tests that use it."""
    root = tmp_path_factory.mktemp("ui-state")
    config = load_config(write_conf(root, kafka_bootstrap), home=root / "state")
    ds = config.dataset("job_views")
    ensure_topic(config, ds, extra={"retention.ms": str(WEEK_MS)})
    ensure_topic(config, config.dataset("company_ceos"))
    t0 = time.time()
    produce(config, ds, 600, seed=71)
    run_speed(spark, config, ds, available_now=True)
    end0 = log_bounds(config, ds.topic)[0][1]
    recompute_and_publish(spark, config, ds, plan_backfill(config, ds, ranges=[f"0:0-{end0 // 2}"]), "ui-test")
    produce(config, ds, 300, seed=72)
    write_quality_row(config, ds, published=True)
    return config, ds, t0


def test_status_reads_ages_and_retention_from_the_log(spark, state):
    config, ds, t0 = state
    st = dataset_status(config, ds)
    assert st.retention_ms == WEEK_MS and st.cleanup_policy == "delete"
    speed = spark.read.format("delta").load(config.table_path(ds, "speed"))
    ts = {(r["_partition"], r["_offset"]): r["_kafka_timestamp"].timestamp()
          for r in speed.select("_partition", "_offset", "_kafka_timestamp").collect()}
    marks = {p.partition: p.watermark for p in st.partitions}
    assert marks[0] is not None and all(w is None for p, w in marks.items() if p != 0)
    for p in st.partitions:
        assert p.speed_lag > 0 and 0 < p.lag_seconds <= st.at - t0  # the newer records wait for speed
        # Oldest offset a layer still needs: the watermark on partition 0, the earliest elsewhere.
        assert p.oldest_unprocessed == (p.watermark if p.partition == 0 else p.earliest)
        # Its deadline is its own Kafka timestamp (as the speed table recorded it) + retention.ms.
        expected = ts[p.partition, p.oldest_unprocessed] + WEEK_MS / 1000 - st.at
        assert p.retention_seconds == pytest.approx(expected, abs=0.002)
        # The oldest record batch has not published: at the watermark on partition 0, at the
        # earliest offset where batch never published (the alert LoglakeWatermarkStale reads it).
        unpublished = p.watermark if p.partition == 0 else p.earliest
        assert p.batch_lag_seconds == pytest.approx(st.at - ts[p.partition, unpublished], abs=0.002)
    assert st.quality.published is True and st.quality.run_id == "test-run"
    assert st.audit is None  # no audit table yet
    tables = {t.layer: t for t in st.tables}
    assert tables["speed"].version is not None and tables["speed"].files >= 1
    assert tables["batch"].version == 0 and tables["batch"].files >= 1
    ceos = dataset_status(config, config.dataset("company_ceos"))
    assert ceos.retention_ms is None and ceos.cleanup_policy == "compact"
    assert all(p.retention_seconds is None and p.lag_seconds is None for p in ceos.partitions)
    assert all(p.batch_lag_seconds == 0.0 for p in ceos.partitions)  # an empty log: nothing to publish
    assert [t.version for t in ceos.tables] == [None] * 4  # nothing written: no tables yet

    lines = format_status(ds, st)
    assert len([l for l in lines if "speed position" in l]) == ds.partitions
    assert "retention 7d 0h" in "\n".join(lines) and "quality: published" in "\n".join(lines)
    assert "cleanup.policy compact" in "\n".join(format_status(ds, ceos))


def test_page_and_json_show_what_status_computes(state, ui):
    config, ds, _t0 = state
    client = ui(config, require_login=False)
    answer = client.get("/api/status")
    assert answer.status_code == 200
    shown = {d["name"]: d for d in answer.json()["datasets"]}
    assert set(shown) == set(config.datasets)
    st = dataset_status(config, ds)  # nothing writes in between: offsets are stable
    got = shown[ds.name]
    assert [(p["partition"], p["end"], p["speed_position"], p["watermark"], p["speed_lag"], p["batch_lag"],
             p["oldest_unprocessed"]) for p in got["partitions"]] == [
        (p.partition, p.end, p.speed_position, p.watermark, p.speed_lag, p.batch_lag, p.oldest_unprocessed)
        for p in st.partitions]
    for p, q in zip(got["partitions"], st.partitions):
        # Read at another moment: the ages differ by exactly the time between the reads.
        assert got["at"] - p["lag_seconds"] == pytest.approx(st.at - q.lag_seconds, abs=1e-3)
        assert p["retention_seconds"] + got["at"] == pytest.approx(q.retention_seconds + st.at, abs=1e-3)
    assert got["quality"]["published"] is True and got["audit"] is None
    assert [(t["layer"], t["version"], t["files"]) for t in got["tables"]] == [
        (t.layer, t.version, t.files) for t in st.tables]

    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    cells = Cells()
    cells.feed(page.text)
    for p in st.partitions:
        for fld in ("end", "speed_position", "watermark", "speed_lag", "batch_lag", "oldest_unprocessed"):
            value = getattr(p, fld)
            assert cells.values[ds.name, str(p.partition), fld] == ("" if value is None else str(value)), fld
        assert float(cells.values[ds.name, str(p.partition), "lag_seconds"]) > 0
        assert float(cells.values[ds.name, str(p.partition), "retention_seconds"]) > 0
    assert cells.values[ds.name, None, "quality"] == "published"
    assert cells.values[ds.name, None, "audit"] == "none"
    assert cells.values["company_ceos", None, "retention_ms"] == ""
    for t in st.tables:
        assert cells.values[ds.name, t.layer, "version"] == str(t.version)
        assert cells.values[ds.name, t.layer, "files"] == str(t.files)
    for dag in ("loglake_batch", "loglake_backfill", "loglake_maintenance"):
        assert f'href="/dags/{dag}"' in page.text
    assert 'href="/loglake/docs/"' in page.text or 'href="/docs/"' in page.text


def test_data_docs_are_served_or_explained(make_config, ui):
    config = make_config()
    client = ui(config, require_login=False)
    missing = client.get("/docs/")
    assert missing.status_code == 200 and "No validation yet" in missing.text
    site = data_docs_dir(config)
    (site / "validations").mkdir(parents=True)
    (site / "index.html").write_text("<html>gx index</html>")
    (site / "validations" / "run.html").write_text("<html>one run</html>")
    assert client.get("/docs/").text == "<html>gx index</html>"
    assert client.get("/docs/validations/run.html").text == "<html>one run</html>"
    assert client.get("/docs/nope.html").status_code == 404
    assert client.get("/docs/..%2F..%2Fconf%2Floglake.yaml").status_code == 404
    assert client.get("/docs", follow_redirects=False).status_code in (307, 308)


def test_every_route_requires_a_logged_in_user(make_config, ui):
    client = ui(make_config())
    for path in ("/", "/api/status", "/docs/"):
        assert client.get(path).status_code == 401, path

