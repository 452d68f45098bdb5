"""The same jobs past one machine's embedded mode: a 3-node KRaft Kafka cluster and a Spark
standalone master with 2 workers (``loglake cluster up``), as the local-cluster profile runs
them, on free ports in a state directory of the module's own.

The faults are the ones a cluster exists to survive: the leader of a partition SIGKILLed
while records arrive (the stream goes on with the new leader, every acknowledged record
lands exactly once), a Spark worker SIGKILLed during a batch recompute (the job completes
on the other worker, the table is exact); the audit passes after both.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from loglake.core.config import load_config
from loglake.core.errors import PortInUseError
from loglake.core.paths import REPO_ROOT
from loglake.core.processes import alive, descendants, free_ports, wait_for
from loglake.jobs.launch import code_archive, job_env, spark_conf, spark_submit_bin
from loglake.kafka.admin import admin, end_offsets, ensure_topic
from loglake.ledger.ranges import batch_watermarks
from loglake.ledger.results import last_maintenance
from loglake.local.cluster import LocalCluster
from loglake.local.produce import produce
from loglake.speed.control import SpeedStream
from loglake.testing import caught_up, count_exactly_once, write_conf
from tests.system.test_dags import covered

pytestmark = pytest.mark.system


def loglake(env, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A started local cluster (on fresh ports again if one was taken meanwhile)."""
    for attempt in range(3):
        root = tmp_path_factory.mktemp("cluster")
        *kafka_ports, master_port = free_ports(4)
        conf = write_conf(
            root, ",".join(f"localhost:{p}" for p in kafka_ports),
            kafka={"embedded": True, "replication_factor": 3, "min_insync_replicas": 2},
            spark={"master": f"spark://127.0.0.1:{master_port}", "executor_memory": "512m",
                   "conf": {"spark.cores.max": "1"}},
            speed={"trigger_interval": "1 second"},
            local_cluster={"spark_workers": 2, "worker_cores": 2, "worker_memory": "1g"})
        config = load_config(conf, home=root / "state")
        env = {**os.environ, "LOGLAKE_CONF": str(conf), "LOGLAKE_HOME": str(root / "state")}
        env.pop("LOGLAKE_KAFKA_BOOTSTRAP", None)
        try:
            LocalCluster(config).up(say=lambda _line: None)
            break
        except PortInUseError:
            LocalCluster(config).down(say=lambda _line: None)
            if attempt == 2:
                raise
    yield config, env
    LocalCluster(config).down(say=lambda _line: None)


def test_status_names_the_cluster_and_topics_are_replicated(cluster):
    config, env = cluster
    st = loglake(env, "cluster", "status")
    assert st.returncode == 0, st.stdout + st.stderr
    lines = st.stdout.splitlines()
    assert lines[0] == f"kafka bootstrap: {config.kafka.bootstrap_servers}"
    assert lines[1] == f"spark master: {config.profile.spark.master}"
    assert len([ln for ln in lines if re.search(r"kafka node \d\s+running \(pid \d+\)", ln)]) == 3, st.stdout
    assert len([ln for ln in lines if re.search(r"spark worker-\d\s+running \(pid \d+\)", ln)]) == 2, st.stdout
    assert "workers registered with the master: 2 of 2" in st.stdout

    ds = config.dataset("job_views")
    ensure_topic(config, ds)
    client = admin(config)
    md = client.list_topics(ds.topic, timeout=15).topics[ds.topic]
    assert {len(p.replicas) for p in md.partitions.values()} == {3}
    res = ConfigResource(ResourceType.TOPIC, ds.topic)
    entries = client.describe_configs([res], request_timeout=15)[res].result()
    assert entries["min.insync.replicas"].value == "2"


def test_executors_import_the_code_shipped_with_the_job(cluster, tmp_path):
    """Executors find loglake in the archive spark-submit shipped, not in the driver's checkout."""
    config, _env = cluster
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "def where(_):\n"
        "    import loglake\n"
        "    return (loglake.__file__, os.environ.get('PYTHONPATH', ''))\n"
        "print('PROBE ' + json.dumps(spark.sparkContext.parallelize(range(2), 2).map(where).collect()))\n")
    conf = spark_conf(config)
    cmd = [spark_submit_bin(), "--master", config.profile.spark.master, "--py-files", str(code_archive(config)),
           *[a for k in ("spark.pyspark.python", "spark.cores.max", "spark.executor.memory")
             for a in ("--conf", f"{k}={conf[k]}")], str(probe)]
    out = subprocess.run(cmd, env=job_env(config), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("PROBE "))[6:])
    archive = code_archive(config).name
    for file, pythonpath in found:
        # Relative to the executor's directory on its worker, where Spark fetched the archive.
        assert file == f"./{archive}/loglake/__init__.py", found
        assert str(REPO_ROOT) not in pythonpath.replace(str(REPO_ROOT / ".venv"), ""), found


@pytest.mark.long
def test_leader_killed_during_ingest_every_acknowledged_record_once(cluster):
    config, env = cluster
    ds = config.dataset("job_views")
    ensure_topic(config, ds)
    cluster_ = LocalCluster(config)
    acked: list[tuple[int, int]] = []
    errors: list[str] = []
    records = 4000

    def ingest():
        try:
            produce(config, ds, records, rate=200, bad_fraction=0.01, seed=7, acked=acked)
        except Exception as e:  # reported below: an unacknowledged record is not promised
            errors.append(f"{type(e).__name__}: {e}")

    stream = SpeedStream(config, ds)
    stream.start()
    try:
        stream.wait_first_batch(240)
        producer = threading.Thread(target=ingest, daemon=True)
        producer.start()
        time.sleep(5)
        node = cluster_.leader(ds.topic, 0)
        node.kill()
        killed = time.monotonic()
        ends_then = end_offsets(config, ds.topic)
        wait_for(lambda: caught_up(config, ds, ends_then), 240, "the stream to pass the log end at the kill",
                 interval=0.5, log=stream.process)
        recovery = time.monotonic() - killed
        assert cluster_.leader(ds.topic, 0).node_id != node.node_id
        producer.join(120)
        assert not producer.is_alive() and not errors, errors
        ends = end_offsets(config, ds.topic)
        wait_for(lambda: caught_up(config, ds, ends), 240, "the stream to reach the log end", interval=0.5,
                 log=stream.process)
        assert stream.pid(), f"the speed stream did not survive: {stream.state()}"
    finally:
        stream.stop()
        cluster_.up(say=lambda _line: None)  # the killed node back
    assert len(acked) == records and sum(ends.values()) == records
    assert all(o < ends[p] for p, o in acked)
    assert count_exactly_once(config, ds, ends) == (0, 0)
    print(f"recovery after the leader's SIGKILL: {recovery:.1f}s")


def _app_executors(cluster_: LocalCluster, app_name: str) -> dict[int, set[str]]:
    """Worker index → ids of active applications named ``app_name…`` with an executor there."""
    try:
        with urllib.request.urlopen(f"{cluster_.master_ui}/json/", timeout=2) as r:
            apps = [a["id"] for a in json.load(r).get("activeapps", []) if a.get("name", "").startswith(app_name)]
    except OSError:
        return {}
    found = {}
    for i, _w in enumerate(cluster_.workers()):
        work = cluster_.root / "spark" / f"worker-{i + 1}-work"
        ids = {app for app in apps if (work / app).is_dir() and any((work / app).iterdir())}
        if ids:
            found[i] = ids
    return found


@pytest.mark.long
def test_worker_killed_during_batch_recompute_completes_exact(cluster):
    config, env = cluster
    ds = config.dataset("job_views")
    cluster_ = LocalCluster(config)
    ensure_topic(config, ds)
    produce(config, ds, 3000, bad_fraction=0.01, seed=8)
    ends = end_offsets(config, ds.topic)
    batch = subprocess.Popen([sys.executable, "-m", "loglake.cli", "batch", ds.name], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        placed = wait_for(lambda: _app_executors(cluster_, "loglake-batch"), 240,
                          "an executor of the batch job on a worker", interval=0.2)
        worker, apps = next(iter(placed.items()))
        before = descendants(cluster_.workers()[worker].pid())
        cluster_.workers()[worker].kill()
        wait_for(lambda: not alive(before), 30, "the killed worker and its executor to be gone")
        # The master gives the application a new executor on the surviving worker.
        survivor = 1 - worker
        wait_for(lambda: apps & _app_executors(cluster_, "loglake-batch").get(survivor, set()) or batch.poll() is not None,
                 240, "the batch job's new executor on the surviving worker", interval=0.2)
        moved = bool(apps & _app_executors(cluster_, "loglake-batch").get(survivor, set()))
        out, _ = batch.communicate(timeout=600)
    finally:
        if batch.poll() is None:
            batch.kill()
        cluster_.up(say=lambda _line: None)
    assert batch.returncode == 0, out[-4000:]
    assert moved, "the job ended before the master placed an executor on the surviving worker"
    assert batch_watermarks(config, ds) == ends
    audit = loglake(env, "audit", ds.name)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def _apps(cluster_: LocalCluster) -> Counter:
    """Names of the applications the master has run to completion (how many of each)."""
    with urllib.request.urlopen(f"{cluster_.master_ui}/json/", timeout=5) as r:
        return Counter(a["name"] for a in json.load(r).get("completedapps", []))


# make test-long only; make test covers its parts: Airflow's batch DAG: test_dags; jobs on the cluster: the
# executors test here and test_secure_cluster; maintenance jobs: test_maintenance. The maintenance DAG itself
# runs only here.
@pytest.mark.long
def test_airflow_runs_batch_and_maintenance_on_the_cluster(cluster, airflow_db):
    """Airflow's tasks spark-submit to the standalone master: the batch run's recompute and
    quality gate, and maintenance, are applications of the cluster; the tables stay exact."""
    config, env = cluster
    ds = config.dataset("company_ceos")
    ensure_topic(config, ds)
    produce(config, ds, 300, bad_fraction=0.05, seed=9)
    # One dataset is enough to show the tasks submit to the master (job_views has records only
    # when `make test-long` ran the kill tests above first; then its tasks run here too).
    ends = end_offsets(config, ds.topic)
    before = _apps(LocalCluster(config))
    run = airflow_db.dags_test(config, "loglake_batch")
    assert run.returncode == 0 and run.state == "success", run.output[-4000:]
    assert batch_watermarks(config, ds) == ends
    ran = _apps(LocalCluster(config)) - before
    assert "loglake-batch-company_ceos" in ran and "loglake-quality-company_ceos" in ran, ran
    # Maintenance covers every dataset with a Delta table (read from the lake's folders here).
    written = [name for name, d in sorted(config.datasets.items())
               if any((Path(config.table_path(d, layer)) / "_delta_log").is_dir()
                      for layer in ("speed", "batch", "quarantine", "latest") if getattr(d.tables, layer))]

    rows_before = covered(config, ds)
    before = _apps(LocalCluster(config))
    run = airflow_db.dags_test(config, "loglake_maintenance")
    assert run.returncode == 0 and run.state == "success", run.output[-4000:]
    ran = _apps(LocalCluster(config)) - before
    assert sorted(ran.elements()) == [f"loglake-maintenance-{name}" for name in written], ran
    # Each dataset maintained, then audited (the DAG's own audit task); no row changed.
    labels = {v["label"]: k[1] for k, v in run.tasks.items() if k[0] == "dataset.maintain"}
    assert sorted(labels) == written, labels
    for name, index in labels.items():
        assert run.tasks["dataset.audit", index]["state"] == "success", (name, run.tasks)
    ops = {(r["table"], r["operation"]) for r in last_maintenance(config, ds)}
    assert ("batch.company_ceos", "optimize") in ops and ("batch.company_ceos", "vacuum") in ops, ops
    assert covered(config, ds) == rows_before


def test_down_leaves_no_process(cluster):
    config, env = cluster
    cluster_ = LocalCluster(config)
    procs = {}
    for pid in cluster_.pids():
        procs.update(descendants(pid))
    assert len(cluster_.pids()) == 6
    down = loglake(env, "cluster", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert alive(procs) == {}
    st = loglake(env, "cluster", "status")
    assert st.returncode == 1 and st.stdout.count("stopped") == 6, st.stdout
