"""``loglake up``, ``loglake status``, ``loglake down`` of the whole platform, as an operator
types them (the ``loglake`` command line in a subprocess).

One embedded broker, both speed streams, the shared Spark application and Airflow, on free
ports in a state directory of the test's own. While it is up, a batch run triggered
through the REST API goes through the real scheduler and LocalExecutor (not ``dags
test``), its Spark tasks run in the shared application, and it advances the watermark;
after ``down`` no process of any of them is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from urllib.parse import quote

import pytest
import yaml

from loglake.jobs import shared_app
from loglake.local.airflow_standalone import COMPONENTS, EmbeddedAirflow
from loglake.core.processes import alive, descendants
from loglake.core.config import load_config
from loglake.core.processes import free_port
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks, ledger_rows
from loglake.core.processes import Managed, wait_for
from loglake.local.produce import produce

from loglake.testing import write_conf
from loglake.testing.prometheus import start_prometheus
from loglake.testing.checks import spark_drivers
from tests.integration.test_cli import noise

pytestmark = pytest.mark.system


@pytest.fixture
def platform_config(tmp_path):
    # With a schema registry of its own, as the local profile has: up starts it too.
    conf = write_conf(tmp_path, f"localhost:{free_port()}",
                      registry={"url": f"http://localhost:{free_port()}/apis/ccompat/v7", "embedded": True},
                      metrics={"sample_interval": 2},
                      lineage={"transport": {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"),
                                             "append": True}, "namespace": "loglake-test"})
    data = yaml.safe_load((conf / "loglake.yaml").read_text())
    data["profiles"]["test"]["kafka"]["embedded"] = True  # up starts its own broker
    (conf / "loglake.yaml").write_text(yaml.safe_dump(data))
    # The DAGs' schedules never due (29 February, after their start date: 2028): up unpauses
    # them, and a scheduled batch and maintenance run at once would only slow the run this
    # test triggers (catchup=False runs the latest past trigger time at once).
    never = "0 0 29 2 *"
    env = {**os.environ, "LOGLAKE_CONF": str(conf), "LOGLAKE_HOME": str(tmp_path / "state"),
           "LOGLAKE_AIRFLOW_PORT": str(free_port()), "LOGLAKE_BATCH_SCHEDULE": never,
           "LOGLAKE_MAINTENANCE_SCHEDULE": never}
    env.pop("LOGLAKE_KAFKA_BOOTSTRAP", None)
    config = load_config(conf, home=tmp_path / "state")
    yield config, env
    platform(env, "down")  # whatever the test left running


def platform(env: dict, action: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``loglake up|status|down``, the command an operator types."""
    return subprocess.run([sys.executable, "-m", "loglake.cli", action, *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def all_processes(config) -> dict[int, int]:
    names = ["kafka", "registry", "spark-jobs", "speed", "metrics"] + [f"airflow-{c}" for c in COMPONENTS]
    tree: dict[int, int] = {}
    for name in names:
        pid = Managed(config.home, name).pid()
        assert pid, f"{name} is not running"
        tree.update(descendants(pid))
    return tree


def rest(af: EmbeddedAirflow, path: str, token: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{af.port}{path}", method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_up_status_batch_run_down(platform_config, tmp_path):
    config, env = platform_config
    t0 = time.monotonic()
    up = platform(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"up: {time.monotonic() - t0:.1f}s; {[l for l in up.stdout.splitlines() if 'airflow: healthy' in l]}")
    af = EmbeddedAirflow(config, int(env["LOGLAKE_AIRFLOW_PORT"]))
    assert f"at {af.url}" in up.stdout and f"log in as admin with password {af.password()}" in up.stdout

    assert "spark-jobs: started" in up.stdout and "registry: started in " in up.stdout
    # Started last, it answers a few seconds after `up` returned.
    wait_for(lambda: shared_app.ping(config), 180, "the shared Spark application to answer")
    status = platform(env, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "answering at 127.0.0.1:" in status.stdout, status.stdout
    assert f"registry: {config.registry.url} (answers)" in status.stdout, status.stdout
    for name in ["kafka", "registry", "spark-jobs", "speed-job_views", "speed-company_ceos"] + [
            f"airflow-{c}" for c in COMPONENTS]:
        assert any(line.split()[:2] == [name, "running"] for line in status.stdout.splitlines()), status.stdout
    assert f"{af.url} (healthy)" in status.stdout
    # Both datasets' streams in one Spark application: one driver JVM for the speed layer.
    from loglake.speed.streams import streams
    assert {s.pid() for s in streams(config)} == {Managed(config.home, "speed").pid()}
    assert len(spark_drivers(Managed(config.home, "speed").pid())) == 1
    ds = config.dataset("job_views")
    assert status.stdout.count("batch watermark -") >= ds.partitions  # nothing recomputed yet

    # A batch run through the scheduler and a LocalExecutor worker, as a user triggers it.
    produce(config, ds, 300, bad_fraction=0.1, seed=9, progress=False)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    token = af.token()
    wait_for(lambda: rest(af, "/api/v2/dags/loglake_batch", token).get("is_paused") is False, 60,
             "loglake_batch to be parsed, unpaused")
    run_id = rest(af, "/api/v2/dags/loglake_batch/dagRuns", token, {"logical_date": None})["dag_run_id"]
    t1 = time.monotonic()
    # A liveness bound (under the 900-s test timeout), not a speed target (P9 in `make bench`
    # is): the run's tasks are five spark-submits beside two streams and Airflow; on a loaded
    # 2-core machine that took >300 s.
    state = wait_for(lambda: (s := rest(af, f"/api/v2/dags/loglake_batch/dagRuns/{run_id}", token)["state"])
                     in ("success", "failed") and s, 600, "the triggered batch run to finish", interval=2)
    print(f"triggered batch run: {state} after {time.monotonic() - t1:.1f}s")
    assert state == "success"
    assert batch_watermarks(config, ds) == {p: e for p, e in ends.items() if e}
    # The triggered run recomputed them (no scheduled run is due), and the ledger names it. Its
    # Spark tasks ran in the shared application (no JVM of their own), its summaries say so.
    recomputed = {r["run_id"].split("/", 1)[1] for r in ledger_rows(config, ds) if r["state"] == "published"}
    assert recomputed == {run_id}, ledger_rows(config, ds)
    for rid in recomputed:
        path = f"/api/v2/dags/loglake_batch/dagRuns/{quote(rid, safe='')}"
        assert wait_for(lambda: (s := rest(af, path, token)["state"]) in ("success", "failed") and s, 600,
                        f"batch run {rid} to finish", interval=2) == "success"
        for task in ("recompute", "quality"):
            value = rest(af, f"{path}/taskInstances/dataset.{task}/xcomEntries/return_value?map_index=0",
                         token)["value"]
            assert value["shared_application"] is True and value["start_seconds"] == 0, value
    assert shared_app.ping(config)["served"] >= 2
    lineage(tmp_path / "lineage.jsonl", config, run_id)

    scraped(config, env, tmp_path, ends)

    tree = all_processes(config)
    t2 = time.monotonic()
    down = platform(env, "down")
    print(f"down: {time.monotonic() - t2:.1f}s")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "kafka: stopped" in down.stdout and "speed job_views: stopped" in down.stdout
    assert "spark-jobs: stopped" in down.stdout and "registry: stopped" in down.stdout
    assert alive(tree) == {}, f"left behind: {sorted(alive(tree))}"

    after = platform(env, "status")
    assert after.returncode == 1
    assert "running (pid" not in after.stdout
    # The commands printed loglake's own words; the processes' output went to their logs.
    for out in (up, status, down, after):
        assert not noise(out.stdout + out.stderr), out.stdout + out.stderr


def scraped(config, env: dict, tmp_path, ends: dict[int, int]) -> None:
    """A monitoring system's view of the running platform (issue 27): a real Prometheus reads
    the targets file ``up`` keeps and scrapes the platform's exporter, the speed application and
    the shared Spark application; what it gets is what ``loglake status --json`` says."""
    status = platform(env, "status")
    url = next(line.split(" ", 1)[1] for line in status.stdout.splitlines() if line.startswith("metrics: "))
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), status.stdout
    prom = start_prometheus(tmp_path, config.home / "metrics" / "targets.json")
    try:
        def up() -> set[str]:
            return {t["labels"]["loglake_process"] for t in prom.targets() if t["health"] == "up"}

        wait_for(lambda: up() >= {"metrics", "speed", "spark-jobs"}, 120, "Prometheus to scrape the three targets")
        assert [t["scrapeUrl"] for t in prom.targets() if t["labels"]["loglake_process"] == "metrics"] == [url]
        # The exporter serves its last sample: one read after the batch run, then compared.
        since = time.time()
        wait_for(lambda: [v for _l, v in prom.query("loglake_sample_timestamp_seconds") if v > since], 60,
                 "a sample after the batch run")
        r = platform(env, "status", "--json")
        assert r.returncode == 0 and r.stderr == "", r.stdout[-2000:] + r.stderr
        js = json.loads(r.stdout)
        assert js["metrics"] == url
        processes = {labels["process"]: v for labels, v in prom.query("loglake_process_up")}
        assert processes == {p["name"]: float(p["running"]) for p in js["processes"]}
        assert all(processes.values()), processes
        d = js["datasets"]["job_views"]
        for metric, key in (("loglake_log_end_offset", "end"), ("loglake_batch_watermark_offset", "watermark"),
                            ("loglake_speed_position_offset", "speed_position")):
            got = {int(labels["partition"]): v for labels, v in prom.query(f'{metric}{{dataset="job_views"}}')}
            assert got == {p["partition"]: p[key] for p in d["partitions"] if p[key] is not None}, metric
        assert {p["partition"]: p["watermark"] for p in d["partitions"] if p["end"]} == {
            p: e for p, e in ends.items() if e}
        records = {labels["layer"]: v for labels, v in prom.query('loglake_records_total{dataset="job_views"}')}
        assert records == d["totals"]["records"] and records["batch"] == 270
        runs = {labels["kind"]: v for labels, v in prom.query('loglake_job_runs_total{dataset="job_views"}')}
        assert runs == {k: j["runs"] for k, j in d["totals"]["jobs"].items()} and runs["batch"] >= 1
        # The speed application's and the shared application's own metrics, as they run.
        assert {labels["dataset"]: v for labels, v in prom.query("loglake_stream_active")} == {
            "job_views": 1.0, "company_ceos": 1.0}
        assert prom.query("loglake_shared_jobs_served_total")[0][1] >= 2
        assert prom.query('process_resident_memory_bytes{loglake_process="speed"}')[0][1] > 0
        # Airflow's own metrics (its StatsD), served by the same exporter.
        assert prom.query('airflow_scheduler_heartbeat_total{loglake_process="metrics"}')[0][1] > 0
        print("exporter: sample {:.3f}s; scrapes {}".format(
            prom.query("loglake_sample_duration_seconds")[0][1],
            {labels["loglake_process"]: round(v, 4) for labels, v in prom.query("scrape_duration_seconds")}))
    finally:
        prom.stop()


def lineage(events_file, config, dag_run_id: str) -> None:
    """The run's OpenLineage events (issue 27), all in the profile's file transport: Airflow's
    provider's of the DAG run and its tasks, loglake's jobs' with the topic's offset ranges the
    run recomputed and the tables' versions it left."""
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    names = {(e["job"]["namespace"], e["job"]["name"]) for e in events}
    assert ("loglake-test", "loglake_batch") in names, sorted(names)
    assert ("loglake-test", "loglake_batch.dataset.recompute") in names, sorted(names)
    ds = config.dataset("job_views")
    published = [r for r in ledger_rows(config, ds) if r["state"] == "published"]
    run_id = published[0]["run_id"]
    assert run_id.endswith(dag_run_id)
    done = [e for e in events if e["job"]["name"] == "loglake.batch.job_views" and e["eventType"] == "COMPLETE"]
    assert [e["run"]["facets"]["loglake_run"]["runId"] for e in done] == [run_id]
    # Under the Airflow task that ran it: its parent is that task's run, as the provider names it.
    parent = done[0]["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("loglake-test", "loglake_batch.dataset.recompute")
    assert parent["run"]["runId"] in {e["run"]["runId"] for e in events
                                      if e["job"]["name"] == "loglake_batch.dataset.recompute"}
    [topic] = done[0]["inputs"]
    assert topic["name"] == ds.topic
    assert sorted((r["partition"], r["start"], r["end"]) for r in topic["inputFacets"]["loglake_offsetRanges"]["ranges"]) \
        == sorted((r["partition"], r["start"], r["end"]) for r in published)
    gate = [e for e in events if e["job"]["name"] == "loglake.quality.job_views" and e["eventType"] == "COMPLETE"]
    from loglake.ledger.tables import snapshot
    versions = {o["outputFacets"]["loglake_table"]["layer"]: o["facets"]["version"]["datasetVersion"]
                for o in gate[0]["outputs"]}
    assert versions["batch"] == str(snapshot(config.table_path(ds, "batch")).version)
