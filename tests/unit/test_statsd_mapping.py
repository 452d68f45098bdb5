"""Airflow's StatsD through the real statsd_exporter and the shipped mapping (conf/statsd-mapping.yml),
started as ``loglake up`` starts it (``loglake.local.statsd_exporter``): Airflow's names become a
few names with labels, and a line that is not Airflow's (a ``loglake_*`` series sent to the UDP
port by anyone) makes nothing. The binary is built from the Go module proxy on first use
(``make setup-test`` builds it beforehand)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loglake.core.config import load_config
from loglake.core.errors import PortInUseError
from loglake.local import statsd_exporter
from loglake.local.airflow_env import statsd_env
from loglake.observe import exporter
from loglake.testing import write_conf

# Lines as Airflow 3 sends them with loglake's settings (statsd_influxdb_enabled, no legacy names).
AIRFLOW = [
    "airflow.scheduler_heartbeat:1|c",
    "airflow.scheduler_heartbeat:1|c",
    "airflow.triggerer_heartbeat:1|c",
    "airflow.ti.finish,dag_id=loglake_batch,task_id=dataset.recompute,state=success:1|c",
    "airflow.ti.finish,dag_id=loglake_batch,task_id=dataset.publish,state=failed:1|c",
    "airflow.task.duration,dag_id=loglake_batch,task_id=dataset.recompute:1500.000000|ms",
    "airflow.dagrun.duration.success,dag_id=loglake_batch,run_type=scheduled:62000.000000|ms",
    "airflow.pool.open_slots,pool_name=default_pool:4|g",
    "airflow.pool.running_slots,pool_name=default_pool:2|g",
    "airflow.executor.open_slots,status=open,executor_class_name=LocalExecutor:3|g",
]
# Anyone on the host (or, in compose, the network) writing to the UDP port.
INTRUDERS = [
    "loglake_records_total:5|c",
    "loglake_records_total,dataset=job_views,layer=batch:5|c",
    "loglake.records:5|c",
    "airflow_heartbeat_total:7|c",                        # the served name, sent as is
    "airflow.ti.finish:9|g",                              # an Airflow name with another type
    "airflow.dagrun.duration.success.loglake_batch:1|ms",  # a legacy name, the DAG in it
    "airflow.something_new:1|c",
    "up:1|g",
]
# Every name the mapping may serve (conf/statsd-mapping.yml), counters with their _total.
MAPPED = {"airflow_heartbeat_total", "airflow_ti_finish_total", "airflow_task_duration_seconds",
          "airflow_dagrun_duration_seconds", "airflow_pool_slots", "airflow_executor_open_slots"}


@pytest.fixture
def running(tmp_path):
    """statsd_exporter of a throwaway config, started as ``loglake up`` starts it; stopped after."""
    config = load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")
    assert config.profile.metrics.statsd_port == 0  # a free UDP port
    pid, new = statsd_exporter.start(config, say=lambda line: None)
    try:
        yield config
    finally:
        statsd_exporter.stop(config)


def send(config, lines: list[str]) -> None:
    host, port = statsd_exporter.address(config)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for line in lines:
            s.sendto(line.encode(), (host, port))


def scrape(config) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value of what statsd_exporter serves."""
    with urllib.request.urlopen(statsd_exporter.url(config), timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def handled(got: dict) -> float:
    """Events statsd_exporter has mapped or dropped so far."""
    return sum(v for (name, _), v in got.items() if name == "statsd_exporter_events_actions_total")


def wait_handled(config, n: int, action: str | None = None) -> dict:
    """A scrape once ``n`` events were handled (``action``: mapped, or dropped, only)."""
    def count(got: dict) -> float:
        return handled(got) if action is None else sum(
            v for (name, labels), v in got.items()
            if name == "statsd_exporter_events_actions_total" and dict(labels)["action"] == action)

    deadline = time.monotonic() + 20
    got = scrape(config)
    while count(got) < n and time.monotonic() < deadline:
        time.sleep(0.1)
        got = scrape(config)
    assert count(got) == n, {k: v for k, v in got.items() if k[0].startswith("statsd_exporter_")}
    return got


def value(got: dict, name: str, **labels) -> float:
    matches = [v for (n, ls), v in got.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(matches) == 1, (name, labels, sorted(k for k in got if k[0] == name))
    return matches[0]


def served_names(got: dict) -> set[str]:
    """The sample names of what was sent (statsd_exporter's, Go's and the process's own aside)."""
    own = ("statsd_exporter_", "statsd_metric_mapper_", "go_", "process_", "promhttp_")
    return {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
            for (n, _), _v in got.items() if not n.startswith(own)}


def test_airflows_lines_become_labelled_metrics_and_anything_else_makes_nothing(running):
    config = running
    send(config, AIRFLOW + INTRUDERS)
    got = wait_handled(config, len(AIRFLOW) + len(INTRUDERS))

    assert value(got, "airflow_heartbeat_total", component="scheduler") == 2
    assert value(got, "airflow_heartbeat_total", component="triggerer") == 1
    assert value(got, "airflow_ti_finish_total", dag_id="loglake_batch", task_id="dataset.recompute",
                 state="success") == 1
    assert value(got, "airflow_ti_finish_total", task_id="dataset.publish", state="failed") == 1
    # Timers in seconds (sent in milliseconds), as histograms.
    assert value(got, "airflow_task_duration_seconds_count", dag_id="loglake_batch",
                 task_id="dataset.recompute") == 1
    assert value(got, "airflow_task_duration_seconds_sum", task_id="dataset.recompute") == 1.5
    assert value(got, "airflow_task_duration_seconds_bucket", task_id="dataset.recompute", le="2.5") == 1
    assert value(got, "airflow_dagrun_duration_seconds_sum", dag_id="loglake_batch", state="success",
                 run_type="scheduled") == 62
    assert value(got, "airflow_pool_slots", pool_name="default_pool", state="open") == 4
    assert value(got, "airflow_pool_slots", pool_name="default_pool", state="running") == 2
    assert value(got, "airflow_executor_open_slots", executor_class_name="LocalExecutor") == 3

    # The intruders: each arrived and was dropped; no series of theirs, no loglake_* at all.
    assert value(got, "statsd_exporter_events_actions_total", action="drop") == len(INTRUDERS)
    assert value(got, "statsd_exporter_events_unmapped_total") == 0
    assert served_names(got) == MAPPED
    assert not [k for k in got if k[0].startswith("loglake") or "loglake_records" in str(k)]
    assert value(got, "airflow_heartbeat_total", component="scheduler") == 2  # not 9: airflow_heartbeat_total:7
    assert [v for (n, _), v in got.items() if n == "airflow_ti_finish_total"] == [1, 1]  # not the gauge's 9


def test_it_runs_as_a_process_of_the_platform_listed_for_prometheus(running):
    config = running
    pid = statsd_exporter.process(config).pid()
    assert pid and statsd_exporter.start(config) == (pid, False)  # running: not started again
    host, port = statsd_exporter.address(config)
    assert host == "127.0.0.1" and port > 0
    web = statsd_exporter.url(config)
    # Its own web port on loopback, listed as statsd in Prometheus's file_sd targets.
    groups = json.loads((config.home / "metrics" / "targets.json").read_text())
    assert [g for g in groups if g["labels"] == {"loglake_process": "statsd"}] == [
        {"targets": [web.removeprefix("http://").removesuffix("/metrics")], "labels": {"loglake_process": "statsd"}}]
    assert web.startswith("http://127.0.0.1:") and web != exporter.url(config)
    # Airflow is told to send there, its variables as tags and no legacy names.
    env = statsd_env(statsd_exporter.statsd_address(config))
    assert (env["AIRFLOW__METRICS__STATSD_HOST"], env["AIRFLOW__METRICS__STATSD_PORT"]) == (host, str(port))
    assert env["AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED"] == "True"
    assert env["AIRFLOW__METRICS__LEGACY_NAMES_ON"] == "False"

    assert statsd_exporter.stop(config)
    assert statsd_exporter.process(config).pid() is None and statsd_exporter.url(config) is None
    assert not [g for g in json.loads((config.home / "metrics" / "targets.json").read_text())
                if g["labels"] == {"loglake_process": "statsd"}]
    assert not statsd_exporter.stop(config)


# What Airflow's scheduler and task runner do: initialize its stats from [metrics] (here from the
# environment loglake gives Airflow) and emit through it.
AIRFLOW_CLIENT = """
import datetime
from airflow.configuration import conf
from airflow.observability import stats
from airflow.observability.metrics import stats_utils
stats.initialize(factory=stats_utils.get_stats_factory(),
                 export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))
stats.incr("scheduler_heartbeat", 1, 1)
stats.incr("ti.finish", tags={"dag_id": "loglake_batch", "task_id": "dataset.recompute", "state": "success"})
stats.timing("task.duration", 1500.0, tags={"dag_id": "loglake_batch", "task_id": "dataset.recompute"})
stats.timing("dagrun.duration.success", datetime.timedelta(seconds=62),
             tags={"dag_id": "loglake_batch", "run_type": "scheduled"})
stats.gauge("pool.open_slots", 4, tags={"pool_name": "default_pool"})
stats.timing("dag_processing.last_duration", 0.25, tags={"bundle_name": "dags-folder", "file_name": "loglake_batch"})
"""


def test_airflows_own_client_with_loglakes_settings_sends_what_the_mapping_takes(running, tmp_path):
    config = running
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), **statsd_env(statsd_exporter.address(config))}
    done = subprocess.run([sys.executable, "-c", AIRFLOW_CLIENT], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Each of the six mapped (Airflow also times the loading of its serializers when imported,
    # `serde.load_serializers`, which the mapping leaves out: dropped).
    got = wait_handled(config, 6, action="map")
    assert value(got, "airflow_heartbeat_total", component="scheduler") == 1
    assert value(got, "airflow_ti_finish_total", dag_id="loglake_batch", task_id="dataset.recompute",
                 state="success") == 1
    assert value(got, "airflow_task_duration_seconds_sum", task_id="dataset.recompute") == 1.5
    assert value(got, "airflow_dagrun_duration_seconds_sum", dag_id="loglake_batch", state="success") == 62
    assert value(got, "airflow_pool_slots", pool_name="default_pool", state="open") == 4
    # Airflow times a DAG file's parse in seconds through a milliseconds timer: the mapping scales it.
    assert value(got, "airflow_dag_processing_last_duration_seconds_sum", file_name="loglake_batch",
                 bundle_name="dags-folder") == 0.25


def test_a_fixed_udp_port_taken_by_another_process_is_named(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        config = load_config(write_conf(tmp_path, "localhost:9", metrics={"statsd_port": port}),
                             home=tmp_path / "state")
        try:
            with pytest.raises(PortInUseError, match=rf"UDP port 127\.0\.0\.1:{port} \(metrics\.statsd_port\)") as e:
                statsd_exporter.start(config, say=lambda line: None)
            assert e.value.port == port
            assert statsd_exporter.process(config).pid() is None and statsd_exporter.url(config) is None
        finally:
            statsd_exporter.stop(config)


def test_first_use_builds_it_in_the_background_and_it_starts_on_the_fixed_port(tmp_path, monkeypatch):
    """``loglake up`` on a machine that never built statsd_exporter does not wait for Go (a
    minute of a fresh machine's ``make demo``): Airflow is told the fixed port at once, and
    statsd_exporter takes it once built (here the build finds the suite's binary current)."""
    udp = statsd_exporter.free_udp_port("127.0.0.1")
    config = load_config(write_conf(tmp_path, "localhost:9", metrics={"statsd_port": udp}), home=tmp_path / "state")
    host = config.profile.metrics.host
    assert statsd_exporter.build_then_start(config) is None  # built: `up` starts it itself
    monkeypatch.setattr(type(statsd_exporter.STATSD_EXPORTER), "is_current", lambda self: False)
    try:
        t0 = time.monotonic()
        log = statsd_exporter.build_then_start(config)
        assert log is not None and time.monotonic() - t0 < 5
        assert statsd_exporter.statsd_address(config) == (host, udp)  # what Airflow is told, before it runs
        deadline = time.monotonic() + 60
        while statsd_exporter.url(config) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert statsd_exporter.address(config) == (host, udp), log.read_text()
        send(config, AIRFLOW[:1])
        assert value(wait_handled(config, 1, "map"), "airflow_heartbeat_total", component="scheduler") == 1
        assert "statsd: started" in log.read_text()
    finally:
        statsd_exporter.stop(config)
