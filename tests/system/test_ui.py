"""The embedded Airflow as a user meets it: health, REST login, the backfill trigger form,
the loglake page.

One Airflow (api-server, scheduler, dag-processor, triggerer) for the module, on a free
port with its own state directory and the test broker; DAGs stay paused, so nothing
runs. Pages are rendered by headless Chromium logged in with the ``_token`` cookie;
their screenshots are kept in ``test-artifacts/``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request

import pytest

from loglake.core import paths
from loglake.local.airflow_standalone import COMPONENTS, EmbeddedAirflow
from loglake.core.processes import alive, descendants
from loglake.core.config import load_config
from loglake.core.processes import free_port
from loglake.core.processes import wait_for

from loglake.testing import write_conf
from tests.system.browser import Browser

pytestmark = pytest.mark.system

ARTIFACTS = paths.REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, kafka_bootstrap):
    root = tmp_path_factory.mktemp("ui")
    # The DAGs are only parsed and shown, never run; the loglake page reads the broker.
    config = load_config(write_conf(root, kafka_bootstrap), home=root / "state")
    af = EmbeddedAirflow(config, free_port())
    seconds = af.start(timeout=120)
    print(f"Airflow healthy {seconds:.1f}s after start (migration included)")
    try:
        yield af
    finally:
        af.stop()


def api(af: EmbeddedAirflow, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{af.port}{path}", method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def parsed_dags(af: EmbeddedAirflow, token: str) -> set[str]:
    status, body = api(af, "/api/v2/dags?tags=loglake", token)
    return {d["dag_id"] for d in body.get("dags", [])} if status == 200 else set()


def test_every_component_is_alive_and_healthy(airflow):
    st = airflow.status()
    assert st["healthy"], st
    assert set(st["components"]) == set(COMPONENTS)
    assert all(c["alive"] and c["health"] == "healthy" for c in st["components"].values()), st
    assert st["url"] == f"http://localhost:{airflow.port}"


def test_rest_login_lists_the_loglake_dags(airflow):
    token = airflow.token()
    assert wait_for(lambda: parsed_dags(airflow, token) >= {"loglake_batch", "loglake_backfill"}, 60,
                    "the dag-processor to parse dags/")
    status, _ = api(airflow, "/api/v2/dags", "not-a-token")
    assert status in (401, 403)


def test_rest_rejects_invalid_params_naming_the_field(airflow):
    """A malformed Param is refused when the run is triggered: no run is made."""
    token = airflow.token()
    wait_for(lambda: {"loglake_backfill", "loglake_replay"} <= parsed_dags(airflow, token), 60,
             "loglake_backfill and loglake_replay to be parsed")
    for dag, conf, field in [
        ("loglake_backfill", {"dataset": "nope"}, "dataset"),
        ("loglake_backfill", {"dataset": "job_views", "ranges": ["0:100"]}, "ranges"),
        ("loglake_backfill", {"dataset": "job_views", "ranges": ["-1:0-5"]}, "ranges"),
        ("loglake_backfill", {"dataset": "job_views", "dry_run": "yes"}, "dry_run"),
        ("loglake_replay", {"dataset": "job_views", "reason_code": "Out-Of-Domain"}, "reason_code"),
    ]:
        status, body = api(airflow, f"/api/v2/dags/{dag}/dagRuns", token, {"logical_date": None, "conf": conf})
        assert status == 400 and field in json.dumps(body), (dag, conf, status, body)
        status, runs = api(airflow, f"/api/v2/dags/{dag}/dagRuns", token)
        assert status == 200 and runs["total_entries"] == 0, (dag, runs)


def test_backfill_trigger_form_shows_the_loglake_fields(airflow):
    token = airflow.token()
    wait_for(lambda: "loglake_backfill" in parsed_dags(airflow, token), 60, "loglake_backfill to be parsed")
    base = f"http://localhost:{airflow.port}"
    with Browser() as b:
        b.send("Network.enable")
        b.send("Network.setCookie", name="_token", value=token, url=f"{base}/")
        b.send("Page.enable")
        b.send("Page.navigate", url=f"{base}/dags/loglake_backfill")
        b.wait_for("[...document.querySelectorAll('button')].some(x => x.getAttribute('aria-label') === 'Trigger Dag')")
        b.eval("[...document.querySelectorAll('button')].find(x => x.getAttribute('aria-label') === 'Trigger Dag')"
               ".click()")
        form = ("[...document.querySelectorAll('[role=dialog]')].map(d => d.innerText)"
                ".find(t => t.includes('Run Parameters') && t.includes('Dry run'))")
        text = b.wait_for(form, timeout=30)
        time.sleep(0.5)  # let the last field finish rendering before the picture
        shot = b.screenshot(ARTIFACTS / "airflow-backfill-trigger-form.png")
    assert "Trigger Dag - loglake_backfill" in text
    for label in ("Dataset", "Offset ranges", "From (time)", "To (time)", "Dry run"):
        assert label in text, f"{label!r} not in the form:\n{text}"
    assert "job_views" in text  # the dataset field's default, from the enum
    assert "PARTITION:START-END" in text  # the ranges field's description
    assert shot.stat().st_size > 10_000


def loglake_page_values(b: Browser) -> dict[tuple, str]:
    """(dataset, partition or table, field) → data-value of every cell of the loglake page
    embedded in the Airflow UI (the iframe of ``/plugin/loglake``; same origin)."""
    doc = "document.querySelector('iframe') && document.querySelector('iframe').contentDocument"
    b.wait_for(f"({doc}) && ({doc}).querySelectorAll('[data-field]').length > 0", timeout=60)
    cells = b.eval(f"[...({doc}).querySelectorAll('[data-field]')].map(e => [e.dataset.dataset, "
                   "e.dataset.partition ?? e.dataset.table ?? null, e.dataset.field, e.dataset.value ?? null])")
    return {(d, w, f): v for d, w, f, v in cells}


def test_loglake_page_shows_what_loglake_status_computes(airflow, spark):
    from loglake.kafka.admin import ensure_topic, log_bounds
    from loglake.batch.planning import plan_backfill
    from loglake.local.produce import produce
    from loglake.ops.status import dataset_status, format_status
    from loglake.quality.pipeline import recompute_and_publish
    from loglake.speed.stream import run_speed

    config = airflow.config
    ds = config.dataset("job_views")
    for d in config.datasets.values():
        ensure_topic(config, d)
    from loglake.local.metrics import Sampler
    from loglake.observe import series

    sampler = Sampler(config)  # the platform's exporter's sampler: the page's lag charts draw its samples
    produce(config, ds, 400, bad_fraction=0.05, seed=81)
    sampler.sample()
    run_speed(spark, config, ds, available_now=True)
    sampler.sample()
    end0 = log_bounds(config, ds.topic)[0][1]
    recompute_and_publish(spark, config, ds, plan_backfill(config, ds, ranges=[f"0:0-{end0 // 2}"]), "ui-system")
    from loglake.ops.audit import audit_dataset
    assert audit_dataset(config, ds, "ui-audit").ok
    produce(config, ds, 100, seed=82)  # speed and batch behind: every number is non-trivial
    time.sleep(1.5)
    sampler.sample()
    # From here on nothing writes: offsets, watermarks and versions stay as read.
    expected = {d.name: dataset_status(config, d) for d in config.datasets.values()}
    print("\n".join(line for d in config.datasets.values() for line in format_status(d, expected[d.name])))

    token = airflow.token()
    base = f"http://localhost:{airflow.port}"
    with Browser() as b:
        b.send("Network.enable")
        b.send("Network.setCookie", name="_token", value=token, url=f"{base}/")
        b.send("Page.enable")
        b.send("Page.navigate", url=f"{base}/plugin/loglake")  # the UI's route for the view
        shown = loglake_page_values(b)
        nav = b.eval("document.body.innerText")
        # The charts: inline SVG drawn on the server from the metrics series, each with a size on
        # the page (no script, nothing fetched from elsewhere).
        doc = "document.querySelector('iframe').contentDocument"
        drawn = b.eval(f"[...{doc}.querySelectorAll('svg.chart')].map(e => [e.closest('[data-dataset]').dataset"
                       ".dataset, e.dataset.chart, +e.dataset.points, e.getBoundingClientRect().width, "
                       "[...e.querySelectorAll('[data-value]')].map(p => +p.dataset.value)])")
        foreign = b.eval(f"[...{doc}.querySelectorAll('script[src], link[href], img[src]')].length")
        b.eval(f"{doc}.querySelector('.charts[data-dataset=job_views]').scrollIntoView()")
        time.sleep(0.5)
        charts_shot = b.screenshot(ARTIFACTS / "airflow-loglake-charts.png")
        time.sleep(0.5)  # let the frame finish painting before the picture
        shot = b.screenshot(ARTIFACTS / "airflow-loglake-page.png")
    print(f"screenshots: {shot}, {charts_shot}")
    assert shot.stat().st_size > 10_000
    assert "loglake" in nav
    for name, st in expected.items():
        for p in st.partitions:
            for fld in ("earliest", "end", "speed_position", "watermark", "speed_lag", "batch_lag",
                        "oldest_unprocessed"):
                value = getattr(p, fld)
                assert shown[name, str(p.partition), fld] == ("" if value is None else str(value)), (name, p, fld)
            for fld in ("lag_seconds", "retention_seconds"):  # ages move with the clock: present or absent
                assert (shown[name, str(p.partition), fld] == "") == (getattr(p, fld) is None), (name, p, fld)
        for t in st.tables:
            assert shown[name, t.layer, "version"] == ("" if t.version is None else str(t.version))
            assert shown[name, t.layer, "files"] == ("" if t.files is None else str(t.files))
        q, a = st.quality, st.audit
        assert shown[name, None, "quality"] == ("none" if q is None else "published" if q.published else "failed")
        assert shown[name, None, "audit"] == ("none" if a is None else "ok" if a.ok else "failed")
    assert (shown["job_views", None, "quality"], shown["job_views", None, "audit"]) == ("published", "ok")
    charts = {(d, c): (n, w, values) for d, c, n, w, values in drawn}
    assert {c for d, c in charts if d == "job_views"} == {"speed_lag_seconds", "batch_lag_records",
                                                          "records_per_minute", "micro_batch_seconds"}
    assert all(w > 100 for _n, w, _v in charts.values()) and foreign == 0
    evts = series.events(config, "job_views")
    micro = [e for e in evts if e["kind"] == "micro_batch"]
    samples = [e for e in evts if e["kind"] == "sample"]
    assert charts["job_views", "micro_batch_seconds"][:1] == (len(micro),) and micro
    assert charts["job_views", "micro_batch_seconds"][2] == [e["seconds"] for e in micro]
    assert charts["job_views", "batch_lag_records"][2] == [e["batch_lag_records"] for e in samples]
    assert len(samples) == 3 and samples[0]["batch_lag_records"] == 400  # before the speed run: all of it
    # Records and quarantined records per minute: the bars add up to what the stream wrote.
    assert sum(charts["job_views", "records_per_minute"][2]) == 400
    assert any(p.speed_lag and p.lag_seconds for p in expected["job_views"].partitions)

    # The same app, straight: JSON with a Bearer token; nothing without a login.
    status, body = api(airflow, "/loglake/api/status", token)
    assert status == 200 and {d["name"] for d in body["datasets"]} == set(config.datasets)
    status, _ = api(airflow, "/loglake/api/status", "not-a-token")
    assert status in (401, 403)
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{airflow.port}/loglake/", timeout=10)
        raise AssertionError("the loglake page answered without a login")
    except urllib.error.HTTPError as e:
        assert e.code == 401


def test_a_trigger_waits_out_a_busy_metadata_db(airflow):
    """The scheduler, the task runners and the api-server share one SQLite file; under load a
    write waits for another's lock. A trigger that waits longer than sqlite3's default 5 s
    must still create its run, not answer 500 ("database is locked")."""
    token = airflow.token()
    wait_for(lambda: "loglake_maintenance" in parsed_dags(airflow, token), 60, "loglake_maintenance to be parsed")
    held, hold = threading.Event(), 8.0

    def writer():
        db = sqlite3.connect(airflow.home / "airflow.db", isolation_level=None)
        db.execute("BEGIN IMMEDIATE")  # the write lock, as a long scheduler transaction holds it
        held.set()
        time.sleep(hold)
        db.execute("COMMIT")
        db.close()

    t = threading.Thread(target=writer)
    t.start()
    held.wait(10)
    t0 = time.monotonic()
    status, body = api(airflow, "/api/v2/dags/loglake_maintenance/dagRuns", token, {"logical_date": None})
    waited = time.monotonic() - t0
    t.join()
    assert status == 200, (status, body, f"after {waited:.1f}s")
    assert waited > hold - 1, f"answered in {waited:.1f}s while the lock was held for {hold}s"
    req = urllib.request.Request(f"http://127.0.0.1:{airflow.port}/api/v2/dags/loglake_maintenance/dagRuns/"
                                 f"{body['dag_run_id']}", method="DELETE", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 204


def test_stop_leaves_no_process_behind(airflow):
    pids = {c: p.pid() for c, p in airflow.processes.items()}
    assert all(pids.values()), pids
    tree = {}
    for pid in pids.values():
        tree.update(descendants(pid))
    t0 = time.monotonic()
    assert set(airflow.stop()) == set(COMPONENTS)
    print(f"Airflow stopped in {time.monotonic() - t0:.1f}s")
    assert alive(tree) == {}
    assert not any(c["alive"] for c in airflow.status()["components"].values())
    assert airflow.health() is None
