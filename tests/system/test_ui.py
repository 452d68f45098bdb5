"""The embedded Airflow as a user meets it: health, REST login, the backfill trigger form.

One Airflow (api-server, scheduler, dag-processor, triggerer) for the module, on a free
port with its own state directory; DAGs stay paused, so nothing runs. The form is
rendered by headless Chromium logged in with the ``_token`` cookie; its screenshot is
kept in ``test-artifacts/``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from loglake import paths
from loglake.airflow_embedded import COMPONENTS, EmbeddedAirflow, _alive, _descendants
from loglake.config import load_config
from loglake.embedded_kafka import free_port
from loglake.processes import wait_for

from tests.conftest import write_conf
from tests.system.browser import Browser

pytestmark = pytest.mark.system

ARTIFACTS = paths.REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    # No broker needed: the DAGs are only parsed and shown, never run.
    config = load_config(write_conf(root, "localhost:9"), home=root / "state")
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
        with urllib.request.urlopen(req, timeout=10) as r:
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


def test_rest_rejects_invalid_backfill_params_naming_the_field(airflow):
    token = airflow.token()
    wait_for(lambda: "loglake_backfill" in parsed_dags(airflow, token), 60, "loglake_backfill to be parsed")
    status, body = api(airflow, "/api/v2/dags/loglake_backfill/dagRuns", token,
                       {"logical_date": None, "conf": {"dataset": "nope"}})
    assert status == 400, body
    assert "dataset" in json.dumps(body)
    status, body = api(airflow, "/api/v2/dags/loglake_backfill/dagRuns", token,
                       {"logical_date": None, "conf": {"dataset": "job_views", "ranges": ["0:100"]}})
    assert status == 400 and "ranges" in json.dumps(body), body


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


def test_stop_leaves_no_process_behind(airflow):
    pids = {c: p.pid() for c, p in airflow.processes.items()}
    assert all(pids.values()), pids
    tree = {}
    for pid in pids.values():
        tree.update(_descendants(pid))
    t0 = time.monotonic()
    assert set(airflow.stop()) == set(COMPONENTS)
    print(f"Airflow stopped in {time.monotonic() - t0:.1f}s")
    assert _alive(tree) == {}
    assert not any(c["alive"] for c in airflow.status()["components"].values())
    assert airflow.health() is None
