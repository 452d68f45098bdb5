"""The README's first command as a newcomer types it: ``loglake demo`` (what ``make demo`` runs
after ``make setup``) on a fresh state directory, with the repo's own ``conf/`` — its datasets,
their sample data and quality suites — and its report read line by line; then ``loglake
status``, a real Prometheus scraping what ``up`` started, the run's OpenLineage events, and
``loglake down`` leaving no process behind.

The one change to the repo's conf: the ports its local profile names move to free ones (and a
lineage file is added), so the suite's other worker and a platform a developer runs are not in
the way. Everything else is what a user gets: the demo's own `up` (broker, speed application,
shared Spark application, exporter, Airflow), its wait for the *scheduled* ``loglake_batch`` run,
its maintenance run while the streams write, its serving-view query against a full recompute.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from loglake.core.config import load_config
from loglake.core.paths import REPO_ROOT
from loglake.core.processes import Managed, alive, descendants, free_port, wait_for
from loglake.jobs import shared_app
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks, ledger_rows
from loglake.tables import snapshot
from loglake.local.airflow_standalone import COMPONENTS, EmbeddedAirflow
from loglake.testing.checks import spark_drivers
from loglake.testing.prometheus import start_prometheus
from tests.integration.test_cli import noise

pytestmark = pytest.mark.system

# The demo's own sizes (``loglake demo``'s defaults): an events dataset gets COUNT records, a
# changelog a tenth of them; BAD of each are malformed.
COUNT, BAD = 20_000, 0.02


@pytest.fixture
def demo(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(REPO_ROOT / "conf", conf)
    data = yaml.safe_load((conf / "loglake.yaml").read_text())
    assert data["default_profile"] == "local"
    local = data["profiles"]["local"]
    local["kafka"]["bootstrap_servers"] = f"localhost:{free_port()}"
    local["registry"]["url"] = f"http://localhost:{free_port()}/apis/ccompat/v7"
    local["metrics"].update(port=free_port(), statsd_port=0, sample_interval=2)
    local["lineage"] = {"transport": {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"),
                                      "append": True}, "namespace": "loglake-demo"}
    (conf / "loglake.yaml").write_text(yaml.safe_dump(data))
    home = tmp_path / "state"
    env = {**os.environ, "LOGLAKE_CONF": str(conf), "LOGLAKE_HOME": str(home),
           "LOGLAKE_AIRFLOW_PORT": str(free_port())}
    for key in ("LOGLAKE_PROFILE", "LOGLAKE_KAFKA_BOOTSTRAP", "LOGLAKE_REGISTRY_URL", "LOGLAKE_METRICS_PORT",
                "LOGLAKE_BATCH_SCHEDULE", "LOGLAKE_MAINTENANCE_SCHEDULE"):
        env.pop(key, None)
    config = load_config(conf, home=home)
    yield config, env
    loglake(env, "down")  # whatever the test left running


def loglake(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The ``loglake`` command, as installed in the venv (``make setup``)."""
    command = Path(sys.executable).parent / "loglake"
    return subprocess.run([str(command), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=REPO_ROOT)


def lines_like(out: str, pattern: str) -> list[re.Match]:
    return [m for m in map(re.compile(pattern).fullmatch, out.splitlines()) if m]


def test_the_readme_first_command_on_a_fresh_state(demo, tmp_path):
    config, env = demo
    t0 = time.monotonic()
    r = loglake(env, "demo", timeout=1500)
    out = r.stdout
    print(f"loglake demo: exit {r.returncode} in {time.monotonic() - t0:.1f}s\n{out}")
    assert r.returncode == 0, out + r.stderr
    assert not noise(out + r.stderr), out + r.stderr
    assert "Traceback" not in out + r.stderr

    # The platform came up on the profile's own processes.
    af = EmbeddedAirflow(config, int(env["LOGLAKE_AIRFLOW_PORT"]))
    assert f"at {af.url}" in out and f"log in as admin with password {af.password()}" in out
    assert "spark-jobs: started" in out
    # JSON datasets only: the embedded registry is neither fetched nor started.
    assert "registry: not started (no dataset reads a registry format" in out

    # Produced, and the speed layer exact against the log.
    names = sorted(config.datasets)
    for name, ds in config.datasets.items():
        n = COUNT if ds.kind == "events" else COUNT // 10
        [m] = lines_like(out, rf"produced {n} records to {ds.topic}: (\d+) good, (\d+) malformed \(.*\)")
        assert int(m[1]) + int(m[2]) == n and int(m[2]) > 0
        [m] = lines_like(out, rf"  {name}: log {n} records = speed (\d+) \+ speed quarantine (\d+): yes")
    assert "speed layer: every stream at the log end" in out

    # The scheduled batch run: written, validated (with the sample data's quality warnings),
    # diffed and audited, per dataset.
    [run] = lines_like(out, r"loglake_batch run (scheduled__\S+): success in [\d.]+s, of which Spark jobs [\d.]+s.*")
    written = {m[1]: (int(m[2]), int(m[3])) for m in lines_like(
        out, r"  write   (\w+): (\d+) rows, (\d+) quarantined in [\d.]+s \(.*\), in the shared Spark application [\d.]+s.*")}
    assert sorted(written) == names, out
    quality = {m[1]: m for m in lines_like(
        out, r"  quality (\w+): (\d+) expectation\(s\) on (\d+) rows: published(?:; warnings: (.*))?")}
    assert sorted(quality) == names, out
    assert int(quality["job_views"][3]) == written["job_views"][0]
    # job_views' suite warns of views over ten minutes: the sample data has some.
    assert re.fullmatch(r"expect_column_values_to_be_between\(duration_ms\) \d+ unexpected",
                        quality["job_views"][4] or ""), quality["job_views"][0]
    diffs = lines_like(out, r"  diff    (\w+)\[(\d+)\] \[(\d+), (\d+)\): (\d+) missing in speed, (\S+) missing in batch, "
                            r"(\d+) changed")
    assert {m[1] for m in diffs} == set(names)
    assert all(m[5] == "0" and m[7] == "0" for m in diffs), out
    audits = {m[1]: m for m in lines_like(out, r"  audit   (\w+): (ok|FAILED): ([\d,]+) offsets checked, (\d+) missing, "
                                                r"(\d+) duplicated, (\d+) unexpected")}
    assert sorted(audits) == names and all(m[2] == "ok" and m.group(4, 5, 6) == ("0", "0", "0") for m in audits.values()), out

    # Maintenance while the streams write, audited again; then the query against a full recompute.
    assert lines_like(out, r"loglake_maintenance run \S+: success in [\d.]+s \(Spark jobs [\d.]+s\), while the streams write:")
    assert "full recompute from the log: identical" in out
    assert re.search(r"^demo: OK in [\d.]+s; the platform is still up", out, re.M), out

    # The tables agree with the report: each dataset's watermark at its log end.
    for name, ds in config.datasets.items():
        ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items() if hi}
        assert batch_watermarks(config, ds) == ends, name

    status = loglake(env, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ["kafka", "spark-jobs", *(f"speed-{n}" for n in names), *(f"airflow-{c}" for c in COMPONENTS)]:
        assert any(line.split()[:2] == [name, "running"] for line in status.stdout.splitlines()), status.stdout
    assert f"{af.url} (healthy)" in status.stdout
    # Not started, so not listed as a process (nor counted down); the registry line says so.
    assert not any(line.split()[:1] == ["registry"] for line in status.stdout.splitlines()), status.stdout
    assert f"registry: {config.registry.url} (not running)" in status.stdout
    # Both datasets' streams in one Spark application: one driver JVM for the speed layer.
    assert len(spark_drivers(Managed(config.home, "speed").pid())) == 1
    assert shared_app.ping(config)["served"] >= 2 * len(names)

    run_id = run[1]
    lineage(tmp_path / "lineage.jsonl", config, run_id)
    scraped(config, env, tmp_path)

    tree = all_processes(config)
    down = loglake(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "kafka: stopped" in down.stdout and "speed job_views: stopped" in down.stdout
    assert "spark-jobs: stopped" in down.stdout
    assert alive(tree) == {}, f"left behind: {sorted(alive(tree))}"
    after = loglake(env, "status")
    assert after.returncode == 1 and "running (pid" not in after.stdout
    for res in (status, down, after):
        assert not noise(res.stdout + res.stderr), res.stdout + res.stderr


def all_processes(config) -> dict[int, int]:
    names = ["kafka", "spark-jobs", "speed", "metrics", "statsd"] + [f"airflow-{c}" for c in COMPONENTS]
    tree: dict[int, int] = {}
    for name in names:
        pid = Managed(config.home, name).pid()
        assert pid, f"{name} is not running"
        tree.update(descendants(pid))
    return tree


def scraped(config, env: dict, tmp_path) -> None:
    """A monitoring system's view of the running platform (issue 27): a real Prometheus reads
    the targets file ``up`` keeps and scrapes the platform's exporter, the speed application,
    the shared Spark application and statsd_exporter (Airflow's metrics); what it gets is what
    ``loglake status --json`` says."""
    status = loglake(env, "status")
    url = next(line.split(" ", 1)[1] for line in status.stdout.splitlines() if line.startswith("metrics: "))
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), status.stdout
    prom = start_prometheus(tmp_path, config.home / "metrics" / "targets.json")
    try:
        def up() -> set[str]:
            return {t["labels"]["loglake_process"] for t in prom.targets() if t["health"] == "up"}

        wait_for(lambda: up() >= {"metrics", "speed", "spark-jobs", "statsd"}, 120,
                 "Prometheus to scrape the four targets")
        assert [t["scrapeUrl"] for t in prom.targets() if t["labels"]["loglake_process"] == "metrics"] == [url]
        since = time.time()
        wait_for(lambda: [v for _l, v in prom.query("loglake_sample_timestamp_seconds") if v > since], 60,
                 "a sample after the runs")
        r = loglake(env, "status", "--json")
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
        records = {labels["layer"]: v for labels, v in prom.query('loglake_records_total{dataset="job_views"}')}
        assert records == d["totals"]["records"] and records["batch"] > 0
        runs = {labels["kind"]: v for labels, v in prom.query('loglake_job_runs_total{dataset="job_views"}')}
        assert runs == {k: j["runs"] for k, j in d["totals"]["jobs"].items()} and runs["batch"] >= 1
        assert {labels["dataset"]: v for labels, v in prom.query("loglake_stream_active")} == {
            name: 1.0 for name in config.datasets}
        assert prom.query("loglake_shared_jobs_served_total")[0][1] >= 2
        assert prom.query('process_resident_memory_bytes{loglake_process="speed"}')[0][1] > 0
        # Airflow's own metrics (its StatsD), served by statsd_exporter under the mapping's names:
        # the scheduled run's tasks by dag_id, task_id and state, no name per DAG or task.
        assert prom.query('airflow_heartbeat_total{component="scheduler",loglake_process="statsd"}')[0][1] > 0
        finished = prom.query('airflow_ti_finish_total{dag_id="loglake_batch",state="success"}')
        assert finished and all(labels["loglake_process"] == "statsd" and labels.get("task_id") and v > 0
                                for labels, v in finished), finished
        assert prom.query('airflow_dagrun_duration_seconds_count{dag_id="loglake_batch",state="success"}'), (
            "the scheduled run's duration")
        names = {labels["__name__"] for labels, _v in prom.query('{__name__=~"airflow_.+"}')}
        assert not [n for n in names if "loglake" in n], names
        assert not prom.query('{__name__=~"airflow_.+",loglake_process="metrics"}')  # loglake's exporter: its own
    finally:
        prom.stop()


def lineage(events_file, config, dag_run_id: str) -> None:
    """The scheduled run's OpenLineage events, all in the profile's file transport: Airflow's
    provider's of the DAG run and its tasks, loglake's jobs' with the topic's offset ranges the
    run recomputed and the tables' versions it left."""
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    names = {(e["job"]["namespace"], e["job"]["name"]) for e in events}
    assert ("loglake-demo", "loglake_batch") in names, sorted(names)
    assert ("loglake-demo", "loglake_batch.dataset.recompute") in names, sorted(names)
    ds = config.dataset("job_views")
    published = [r for r in ledger_rows(config, ds) if r["state"] == "published"]
    run_id = published[0]["run_id"]
    assert run_id.endswith(dag_run_id)
    done = [e for e in events if e["job"]["name"] == "loglake.batch.job_views" and e["eventType"] == "COMPLETE"]
    assert [e["run"]["facets"]["loglake_run"]["runId"] for e in done] == [run_id]
    # Under the Airflow task that ran it: its parent is that task's run, as the provider names it.
    parent = done[0]["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("loglake-demo", "loglake_batch.dataset.recompute")
    assert parent["run"]["runId"] in {e["run"]["runId"] for e in events
                                      if e["job"]["name"] == "loglake_batch.dataset.recompute"}
    [topic] = done[0]["inputs"]
    assert topic["name"] == ds.topic
    assert sorted((r["partition"], r["start"], r["end"]) for r in topic["inputFacets"]["loglake_offsetRanges"]["ranges"]) \
        == sorted((r["partition"], r["start"], r["end"]) for r in published)
    gate = [e for e in events if e["job"]["name"] == "loglake.quality.job_views" and e["eventType"] == "COMPLETE"]
    versions = {o["outputFacets"]["loglake_table"]["layer"]: o["facets"]["version"]["datasetVersion"]
                for o in gate[0]["outputs"]}
    # The maintenance run since then made newer versions: the gate's is one the table had.
    assert int(versions["batch"]) <= snapshot(config.table_path(ds, "batch")).version
