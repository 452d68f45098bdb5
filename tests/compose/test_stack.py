"""The docker/ stack on this machine (issue 25): built, started, driven across containers, then
faults, each followed by loglake's audit and an independent count of the log against the
tables (0 lost, 0 duplicated). The tests run in order on one stack; each records its figures
(recovery times, memory) in the results file (conftest.RESULTS)."""

from __future__ import annotations

import os
import re
import textwrap
import threading
import time
from pathlib import Path

import pytest

from loglake.core.processes import ProcessError, wait_for
from tests.compose.conftest import REPO, count_against_log

pytestmark = pytest.mark.compose

EXACT = {"lost": 0, "duplicated": 0, "unexpected": 0, "malformed_in_table": 0, "wrongly_quarantined": 0}


def _exact(counted: dict) -> dict:
    return {k: counted[k] for k in EXACT}


def speed_exact(stack, ds_name: str, timeout: float = 600) -> float:
    """Wait until every offset of the log is in the speed layer exactly once; seconds waited."""
    config = stack.config()
    ds = config.dataset(ds_name)
    started = time.monotonic()

    seen: dict = {}

    def exact() -> bool:
        seen.update(count_against_log(config, ds, "speed", malformed=stack.malformed.get(ds.topic, set())))
        return _exact(seen) == EXACT

    try:
        wait_for(exact, timeout, f"speed {ds_name} exact against the log", interval=5)
    except ProcessError as e:
        raise AssertionError(f"{e} (last count: {seen})") from None
    return round(time.monotonic() - started, 1)


def audit_ok(stack, ds_name: str) -> None:
    r = stack.loglake("audit", ds_name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 missing, 0 duplicated" in r.stdout, r.stdout


def batch_exact(stack, ds_name: str) -> dict:
    from loglake.ledger.ranges import batch_watermarks

    config = stack.config()
    ds = config.dataset(ds_name)
    counted = count_against_log(config, ds, "batch", below=batch_watermarks(config, ds),
                                malformed=stack.malformed.get(ds.topic, set()))
    assert _exact(counted) == EXACT, counted
    return counted


def produce(stack, ds_name: str, count: int, seed: int, rate: float | None = None,
            acked: list | None = None) -> None:
    from loglake.local.produce import produce as produce_records

    config = stack.config()
    ds = config.dataset(ds_name)
    malformed: list = []
    try:
        produce_records(config, ds, count, bad_fraction=0.05, seed=seed, rate=rate, acked=acked, malformed=malformed)
    finally:  # what reached the log, also when a fault cut the produce short
        stack.malformed.setdefault(ds.topic, set()).update(malformed)


def test_a_container_without_credentials_is_refused_everywhere(stack, tmp_path):
    """From a container on the stack's network with no secret of its own: Kafka, Spark's master,
    Airflow's API, the object store and the schema registry all refuse it, each refusal of its
    kind (a login refused, an authorizer's answer, a protocol the port does not speak), not any
    error: in the same script loglake's own logins are answered, so a service that is down
    fails this test instead of passing it. Kafka's user ``guest`` (a password, no ACL)
    authenticates and is refused by the authorizer on loglake's topic and group."""
    config = stack.config()
    topic = config.dataset("job_views").topic
    secrets = REPO / "docker" / "secrets"
    script = textwrap.dedent('''
        import base64, json, os, ssl, time, urllib.error, urllib.request
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient
        out = {}
        insecure = ssl._create_unverified_context()  # an intruder does not check; the servers must refuse

        def status(url, login=None):
            request = urllib.request.Request(url)
            if login:
                request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
            try:
                return urllib.request.urlopen(request, timeout=20, context=insecure).status
            except urllib.error.HTTPError as e:
                return e.code
            except urllib.error.URLError as e:  # no HTTP answer: why, by kind
                return type(e.reason).__name__

        out["airflow"] = status("http://airflow-api-server:8080/api/v2/dags")
        out["s3"] = status("http://s3:7070/loglake")
        registry = "https://schema-registry:8443"
        out["registry"] = status(registry + "/apis/ccompat/v7/subjects")
        out["registry_admin"] = status(registry + "/apis/registry/v2/admin/config/properties")
        out["registry_wrong_password"] = status(registry + "/apis/ccompat/v7/subjects", "loglake:guess")
        out["registry_plain_http"] = status("http://schema-registry:8443/apis/ccompat/v7/subjects")
        out["registry_backend"] = status("http://schema-registry-backend:8081/apis/ccompat/v7/subjects")
        out["registry_loglake"] = status(registry + "/apis/ccompat/v7/subjects",
                                         "loglake:" + os.environ["REGISTRY_PASSWORD"])

        topic = os.environ["TOPIC"]
        sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "enable.ssl.certificate.verification": False}

        class Lines(__import__("logging").Handler):  # librdkafka's log lines of one client
            def __init__(self):
                super().__init__()
                self.lines = []

            def emit(self, record):
                self.lines.append(record.getMessage())

        def client(conf):
            lines = Lines()
            log = __import__("logging").getLogger("quiet." + str(id(lines)))
            log.propagate, log.level = False, 10
            log.addHandler(lines)
            return {"bootstrap.servers": "kafka-1:9093", "socket.timeout.ms": 5000, "logger": log, **conf}, lines

        def kafka(name, conf):
            """What the broker says to a client of ``conf``: the error codes it met (their names)
            and whether its log says its login was refused, or the topics it may see."""
            errors = []
            settings, _lines = client(conf)
            admin = AdminClient({**settings, "error_cb": errors.append})
            try:
                topics = admin.list_topics(timeout=10).topics
                out[name] = {"sees_topic": topic in topics}
            except KafkaException as e:
                admin.poll(0)  # the client's error events are served here (error_cb)
                out[name] = {"errors": sorted({x.name() for x in errors} | {e.args[0].name()}),
                             "said": sorted({x.str() for x in errors})}

        kafka("kafka_plaintext", {"security.protocol": "PLAINTEXT"})
        kafka("kafka_tls_only", {"security.protocol": "SSL", "enable.ssl.certificate.verification": False})
        kafka("kafka_wrong_password", {**sasl, "sasl.username": "loglake", "sasl.password": "guess"})
        for user in ("guest", "loglake"):
            login = {**sasl, "sasl.username": user, "sasl.password": os.environ[user.upper() + "_PASSWORD"]}
            kafka("kafka_" + user, login)
            settings, _lines = client(login)
            consumer = Consumer({**settings, "group.id": "loglake-intruder", "enable.auto.commit": False,
                                 "enable.partition.eof": True})
            consumer.assign([TopicPartition(topic, 0, 0)])
            read, deadline = None, time.time() + 30
            while read is None and time.time() < deadline:
                msg = consumer.poll(1)
                if msg is not None:
                    read = msg.error().name() if msg.error() else "record"
            out["kafka_" + user]["read"] = read
            consumer.close()
        # guest writing to loglake's topic: refused (nothing lands, so the later counts hold).
        settings, _lines = client({**sasl, "sasl.username": "guest", "sasl.password": os.environ["GUEST_PASSWORD"]})
        producer = Producer({**settings, "message.timeout.ms": 20000})
        delivered = []
        producer.produce(topic, b"intruder", on_delivery=lambda err, msg: delivered.append(err.name() if err else "written"))
        producer.flush(30)
        out["kafka_guest"]["write"] = delivered[0] if delivered else None

        # Spark's master: an application without the shared secret is not registered. The context
        # is made either way (its client registers in the background); a refused one gives up after
        # its retries and stops itself ("All masters are unresponsive! Giving up").
        from pyspark import SparkConf, SparkContext
        sc = SparkContext(conf=SparkConf().setMaster("spark://spark-master:7077").setAppName("intruder")
                          .set("spark.authenticate", "false").set("spark.ui.enabled", "false"))
        deadline = time.time() + 150
        while time.time() < deadline and not sc._jsc.sc().isStopped():
            time.sleep(1)
        out["spark"] = "refused" if sc._jsc.sc().isStopped() else "registered"
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)
    ''')
    env = {"TOPIC": topic, "GUEST_PASSWORD": (secrets / "kafka_guest_password").read_text().strip(),
           "LOGLAKE_PASSWORD": (secrets / "kafka_loglake_password").read_text().strip(),
           "REGISTRY_PASSWORD": (secrets / "registry_loglake_password").read_text().strip()}
    env_file = tmp_path / "intruder.env"  # the passwords off the docker command line
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    r = stack.docker("run", "--rm", "--network", stack.network, "-e", "SPARK_CONF_DIR=/nonexistent",
                     "--env-file", str(env_file), "loglake-spark:0.1.0", "/opt/loglake/.venv/bin/python", "-c", script, check=False, timeout=360)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, r.stdout + r.stderr
    import json
    got = json.loads(line[0][7:])
    stack.record("intruder", got)
    stack.record("intruder_spark_says", [x for x in r.stderr.splitlines() if "Giving up" in x or "Reason" in x][:2])
    # loglake's own logins answered: each service below is up, and what it refused was the intruder.
    assert got["registry_loglake"] == 200, got
    assert got["kafka_loglake"] == {"sees_topic": True, "read": "_PARTITION_EOF"}, got
    # Airflow and the store ask for a login; the registry's front does too, on each of its APIs,
    # speaks only TLS, and its backend is not on this network at all.
    assert (got["airflow"], got["s3"]) == (401, 403), got
    assert (got["registry"], got["registry_admin"], got["registry_wrong_password"]) == (401, 401, 401), got
    assert got["registry_plain_http"] == 400, got  # nginx: "plain HTTP request was sent to HTTPS port"
    assert got["registry_backend"] == "gaierror", got  # the name does not resolve here
    # Kafka: a client that does not speak SASL over TLS is disconnected; a wrong password is refused
    # by SCRAM (the broker answers loglake's own login meanwhile: it is up); guest, logged in, sees no
    # topic of loglake's and is refused loglake's group and topic by the authorizer.
    for name in ("kafka_plaintext", "kafka_tls_only", "kafka_wrong_password"):
        assert "sees_topic" not in got[name] and "_TRANSPORT" in got[name]["errors"], got
    assert "_AUTHENTICATION" in got["kafka_wrong_password"]["errors"], got
    assert any("invalid credentials" in x for x in got["kafka_wrong_password"]["said"]), got
    assert "_AUTHENTICATION" not in got["kafka_plaintext"]["errors"] + got["kafka_tls_only"]["errors"], got
    assert got["kafka_guest"] == {"sees_topic": False, "read": "GROUP_AUTHORIZATION_FAILED",
                                  "write": "TOPIC_AUTHORIZATION_FAILED"}, got
    assert got["spark"] == "refused", got


def test_produce_speed_across_containers_and_a_scheduled_batch_run_on_celery(stack):
    from datetime import datetime, timezone

    from loglake.kafka.admin import log_bounds
    from loglake.ledger.ranges import batch_watermarks

    produce(stack, "job_views", 20_000, seed=1)
    produce(stack, "company_ceos", 2_000, seed=2)
    produced = datetime.now(timezone.utc).isoformat()
    stack.record("speed_catch_up_seconds_20k", speed_exact(stack, "job_views"))
    speed_exact(stack, "company_ceos")
    status_reports_the_deployment(stack)
    airflow = stack.airflow()

    def scheduled_success_after_produce():
        runs = airflow.call("GET", "/dags/loglake_batch/dagRuns?run_type=scheduled&limit=20&order_by=-start_date")
        done = [r for r in runs["dag_runs"] if r["state"] == "success" and (r["start_date"] or "") > produced]
        return done or None

    # The first scheduled run that started after the records were produced recomputes them.
    runs = wait_for(scheduled_success_after_produce, 900, "a scheduled loglake_batch run after the produce to succeed",
                    interval=10)
    stack.record("scheduled_batch_run", {"run_id": runs[0]["dag_run_id"], "start": runs[0]["start_date"],
                                         "end": runs[0]["end_date"]})
    # Only the runs this test starts from here on.
    airflow.call("PATCH", "/dags/loglake_batch", {"is_paused": True})
    config = stack.config()
    for name in ("job_views", "company_ceos"):
        ds = config.dataset(name)
        ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items() if hi}
        assert batch_watermarks(config, ds) == ends, name  # the scheduled run covered the whole log
        audit_ok(stack, name)
        assert batch_exact(stack, name)["log"] == sum(ends.values())
    log = Path(stack.env()["LOGLAKE_HOME"]) / "logs" / "cli.log"
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    served = stack.loglake("query", "SELECT count(*) AS n FROM job_views", "--format", "csv")
    stack.record("host_query_seconds", round(time.monotonic() - t0, 1))
    assert served.returncode == 0, served.stderr
    # Read from the host by the Arrow engine (delta-rs on the object store): no Spark session started.
    assert "JVM of pid" not in (log.read_text() if log.exists() else ""), log.read_text()
    config = stack.config()
    from tests.compose.conftest import table_offsets
    valid = len(table_offsets(config, config.table_path(config.dataset("job_views"), "speed")))
    assert served.stdout == f"n\n{valid}\n"


def status_reports_the_deployment(stack) -> None:
    """Issue 45 (4): `loglake status` from the host reports the stack's services by their own health
    checks (it listed them as this host's stopped processes and exited 1) and each stream's
    position at the log end once it has caught up (it showed none)."""
    from loglake.kafka.admin import log_bounds

    config = stack.config()
    ends = {name: log_bounds(config, config.dataset(name).topic) for name in ("job_views", "company_ceos")}
    said: dict = {}

    def at_the_end() -> bool:
        t0 = time.monotonic()
        r = said["r"] = stack.loglake("status")
        said["seconds"] = round(time.monotonic() - t0, 1)
        assert r.returncode == 0, r.stdout + r.stderr
        # The group's record follows the micro-batches by a moment: the last one's shows within seconds.
        return all(f"[{p}] end {hi}  speed position {hi} (lag 0" in r.stdout.split(f"\n{name} (")[1]
                   .split("\n  counted:")[0] for name, bounds in ends.items() for p, (_lo, hi) in bounds.items())

    try:
        wait_for(at_the_end, 90, "loglake status to show every stream at the log end", interval=10)
    except ProcessError:
        raise AssertionError((ends, said["r"].stdout)) from None
    stack.record("host_status_seconds", said["seconds"])
    processes = said["r"].stdout.split("datasets (")[0]
    for service in ("kafka-1", "kafka-3", "spark-master", "spark-worker-2", "speed-job-views", "speed-company-ceos",
                    "airflow-scheduler", "airflow-worker-1", "metrics", "schema-registry", "s3", "prometheus"):
        assert re.search(rf"^  {service} +healthy ", processes, re.M), (service, processes)
    assert "stopped" not in processes and "airflow UI" not in processes, processes  # nothing of this host's
    json_status = stack.loglake("status", "--json")
    assert json_status.returncode == 0, json_status.stderr


def prometheus(stack, path: str, **params) -> dict:
    """Prometheus's HTTP API on its published port (``data`` of a successful answer)."""
    import json
    import urllib.parse
    import urllib.request

    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{stack.m.PROMETHEUS_URL}/api/v1/{path}{query}", timeout=30) as r:
        body = json.loads(r.read())
    assert body.get("status") == "success", body
    return body["data"]


def prometheus_query(stack, expr: str) -> list[tuple[dict, float]]:
    """An instant query: (labels, value) per series."""
    return [(r["metric"], float(r["value"][1])) for r in prometheus(stack, "query", query=expr)["result"]]


def test_prometheus_scrapes_every_target_and_loads_the_rules(stack):
    """The stack's Prometheus, from the host: every target of docker/prometheus/prometheus.yml up,
    the rules of loglake-alerts.yml loaded, and what it scraped saying what `loglake status`
    says (the log end), the speed containers' streams running, and Airflow's StatsD arriving
    through statsd-exporter under the mapping's labelled names, while a `loglake_*` line a
    container sends to its UDP port makes no series. After the produce test: records and a batch
    run exist, and nothing is produced meanwhile."""
    import json

    import yaml

    from tests.compose.conftest import REPO

    started = time.monotonic()
    seen: dict = {}

    def waited(predicate, what: str, timeout: float = 120):
        try:
            return wait_for(predicate, timeout, what, interval=3)
        except ProcessError as e:
            raise AssertionError(f"{e} (last seen: {seen.get(what)})") from None

    wanted = {"metrics:9464", "statsd-exporter:9102", "speed-job-views:9465", "speed-company-ceos:9465"}

    def targets_up():
        active = prometheus(stack, "targets")["activeTargets"]
        seen["every target up"] = {t["labels"]["instance"]: (t["health"], t["lastError"]) for t in active}
        return wanted <= seen["every target up"].keys() and all(t["health"] == "up" for t in active)

    waited(targets_up, "every target up")
    stack.record("prometheus_targets_up_seconds", round(time.monotonic() - started, 1))
    stack.record("prometheus_targets", sorted(seen["every target up"]))

    alerts = yaml.safe_load((REPO / "docker" / "prometheus" / "loglake-alerts.yml").read_text())
    names = {r["alert"] for g in alerts["groups"] for r in g["rules"]}
    rules = [r for g in prometheus(stack, "rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} == names and len(names) == 8, sorted(r["name"] for r in rules)
    assert not [r for r in rules if r.get("health") == "err"], [(r["name"], r.get("lastError")) for r in rules]

    # The exporter samples every metrics.sample_interval (30 s) and Prometheus scrapes every
    # 15 s: the log end a scrape says reaches what `loglake status` reads now.
    # (Exit 1 on the host: the processes it lists are this host's, and none runs here.)
    r = stack.loglake("status", "--json")
    snap = json.loads(r.stdout)
    assert "job_views" not in snap["errors"], snap["errors"]
    status = snap["datasets"]["job_views"]
    end = sum(p["end"] for p in status["partitions"])

    def log_end_agrees():
        got = prometheus_query(stack, 'sum(loglake_log_end_offset{dataset="job_views"})')
        seen["the log end scraped"] = got
        return got and got[0][1] == end

    waited(log_end_agrees, "the log end scraped")
    stack.record("prometheus_log_end_job_views", end)

    active = prometheus_query(stack, 'loglake_stream_active{dataset="job_views"}')
    assert [(labels["instance"], v) for labels, v in active] == [("speed-job-views:9465", 1.0)], active
    # The counters the speed containers and the Airflow workers' jobs wrote to the series on the
    # object store, folded by the metrics service: as `status --json` (on this host) folds them.
    counted = status["totals"]["records"]
    assert counted["speed"] > 0 and counted["batch"] > 0, counted

    def records_agree():
        got = {layer: prometheus_query(stack, f'loglake_records_total{{dataset="job_views",layer="{layer}"}}')
               for layer in ("speed", "batch")}
        seen["the records counted"] = got
        return all(len(v) == 1 and v[0][1] == counted[layer] for layer, v in got.items())

    waited(records_agree, "the records counted")
    stack.record("prometheus_records_job_views", counted)

    def airflow_metrics():
        got = prometheus_query(stack, 'airflow_heartbeat_total{component="scheduler",loglake_process="statsd"}')
        seen["Airflow's StatsD scraped"] = got
        return got and got[0][1] > 0

    waited(airflow_metrics, "Airflow's StatsD scraped")
    # The scheduled batch run's tasks, ended on the Celery workers, by their labels (not one name
    # per DAG and task: conf/statsd-mapping.yml).
    finished = prometheus_query(stack, 'airflow_ti_finish_total{dag_id="loglake_batch",state="success"}')
    assert finished and all(labels.get("task_id") and labels["loglake_process"] == "statsd" and v > 0
                            for labels, v in finished), finished
    durations = prometheus_query(stack, 'airflow_task_duration_seconds_count{dag_id="loglake_batch"}')
    assert durations and all(labels.get("task_id") for labels, _v in durations), durations
    names = prometheus_query(stack, 'count by (__name__) ({__name__=~"airflow_.+"})')
    stack.record("prometheus_airflow_metric_names", sorted(labels["__name__"] for labels, _v in names))
    assert all(not any(ds in labels["__name__"] for ds in ("loglake_batch", "loglake_maintenance"))
               for labels, _v in names), names

    # Anyone on the network may write to statsd-exporter's UDP port: what is not Airflow's is dropped.
    def dropped() -> float:
        got = prometheus_query(stack, 'statsd_exporter_events_actions_total{action="drop",loglake_process="statsd"}')
        return got[0][1] if got else 0.0

    before = dropped()
    lines = ["loglake_records_total:5|c", "loglake_records_total,dataset=job_views,layer=batch:5|c",
             "loglake.records.job_views:5|c", "airflow_heartbeat_total:1000|c"]
    sender = ("import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
              "[s.sendto(line.encode(), ('statsd-exporter', 9125)) for line in sys.argv[1:]]")
    stack.docker("run", "--rm", "--network", stack.network, "loglake-spark:0.1.0", "/opt/loglake/.venv/bin/python",
                 "-c", sender, *lines, timeout=120)
    waited(lambda: dropped() >= before + len(lines), "the intruder's lines dropped by statsd-exporter", timeout=90)
    assert prometheus_query(stack, '{__name__=~"loglake.*",loglake_process="statsd"}') == []
    assert records_agree(), seen["the records counted"]  # loglake's own counters untouched


def test_the_partition_leader_killed_during_ingest(stack):
    from confluent_kafka.admin import AdminClient

    config = stack.config()
    ds = config.dataset("job_views")
    admin = AdminClient(config.kafka_client_conf())
    leader = admin.list_topics(ds.topic, timeout=30).topics[ds.topic].partitions[0].leader
    acked: list = []
    producer = threading.Thread(target=produce, args=(stack, "job_views", 10_000, 3), kwargs={"rate": 2000.0,
                                                                                              "acked": acked})
    producer.start()
    time.sleep(2)
    killed = time.monotonic()
    stack.docker("kill", stack.container(f"kafka-{leader}"))
    producer.join(timeout=600)
    stack.docker("start", stack.container(f"kafka-{leader}"))
    assert len(acked) == 10_000
    speed_exact(stack, "job_views")
    stack.record("leader_kill_recovery_seconds", round(time.monotonic() - killed, 1))
    audit_ok(stack, "job_views")


def test_a_broker_cut_off_the_network_for_60s(stack):
    broker = stack.container("kafka-2")
    stack.docker("network", "disconnect", stack.network, broker)
    cut = time.monotonic()
    try:
        produce(stack, "job_views", 5_000, seed=4, rate=1000.0)
        time.sleep(max(0.0, 60 - (time.monotonic() - cut)))
    finally:
        stack.docker("network", "connect", "--alias", "kafka-2", stack.network, broker)
    back = time.monotonic()
    speed_exact(stack, "job_views")
    stack.record("broker_partition_recovery_seconds", round(time.monotonic() - back, 1))
    audit_ok(stack, "job_views")


def _running_task(airflow, dag_id: str, run_id: str, suffix: str):
    for ti in airflow.task_instances(dag_id, run_id):
        if ti["task_id"].endswith(suffix) and ti["state"] == "running":
            return ti
    return None


WORKER_APPS = textwrap.dedent('''
    import json, urllib.request
    for w in ("spark-worker-1", "spark-worker-2"):
        try:
            state = json.load(urllib.request.urlopen(f"http://{w}:8081/json/", timeout=10))
        except OSError:
            continue
        print(w, *sorted({e["appdesc"]["name"] for e in state.get("executors", [])}))
''')


def _worker_running(stack, app_prefix: str) -> str | None:
    """The Spark worker that runs an executor of an application named ``app_prefix…`` (asked of
    the workers' read-only JSON pages from inside the network)."""
    r = stack.docker("exec", stack.container("spark-master"), "/opt/loglake/.venv/bin/python", "-c", WORKER_APPS,
                     check=False, timeout=60)
    for line in r.stdout.splitlines():
        worker, *apps = line.split()
        if any(a.startswith(app_prefix) for a in apps):
            return worker
    return None


def test_a_spark_worker_killed_during_a_batch_recompute(stack):
    produce(stack, "job_views", 20_000, seed=5)
    speed_exact(stack, "job_views")
    airflow = stack.airflow()
    run_id = airflow.trigger("loglake_batch")
    wait_for(lambda: _running_task(airflow, "loglake_batch", run_id, "recompute"), 600, "the recompute task to run",
             interval=2)
    # The worker that runs the recompute's executor.
    worker = wait_for(lambda: _worker_running(stack, "loglake-batch-"), 300, "the recompute's executor", interval=2)
    killed = time.monotonic()
    stack.docker("kill", stack.container(worker))
    # Down for 30 s, then back, as a host's supervisor brings it back: the two speed streams may
    # hold every core of the other worker, and the recompute then waits for this one.
    time.sleep(30)
    stack.docker("start", stack.container(worker))
    stack.record("spark_worker_killed", worker)
    run = airflow.wait_run("loglake_batch", run_id, timeout=1200)
    assert run["state"] == "success", run
    stack.record("spark_worker_kill_recovery_seconds", round(time.monotonic() - killed, 1))
    audit_ok(stack, "job_views")
    batch_exact(stack, "job_views")


def test_an_airflow_worker_killed_during_a_backfill_each_range_once(stack):
    config = stack.config()
    ds = config.dataset("job_views")
    from loglake.kafka.admin import log_bounds

    bounds = log_bounds(config, ds.topic)
    ranges = [f"{p}:{lo}-{hi}" for p, (lo, hi) in sorted(bounds.items()) if hi > lo][:4]
    airflow = stack.airflow()
    run_id = airflow.trigger("loglake_backfill", {"dataset": "job_views", "ranges": ranges})
    ti = wait_for(lambda: _running_task(airflow, "loglake_backfill", run_id, "recompute"), 600,
                  "the backfill's recompute task to run", interval=2)
    worker = next(s for s in ("airflow-worker-1", "airflow-worker-2") if s in (ti.get("hostname") or ""))
    time.sleep(10)
    killed = time.monotonic()
    stack.docker("kill", stack.container(worker))
    run = airflow.wait_run("loglake_backfill", run_id, timeout=1800)
    stack.docker("start", stack.container(worker))
    assert run["state"] == "success", run
    stack.record("airflow_worker_kill_recovery_seconds", round(time.monotonic() - killed, 1))
    audit_ok(stack, "job_views")
    batch_exact(stack, "job_views")


# The two writers start together (at the host's START; the containers share its clock) once each
# is ready (the Spark session up); delta-rs appends until the table holds Spark's n rows, so the
# two overlap for Spark's whole run.
SPARK_WRITER = textwrap.dedent('''
    import os, sys, time
    from loglake.core.config import load_config
    from loglake.jobs.launch import spark_conf
    from pyspark.sql import SparkSession
    config = load_config("/opt/loglake/conf", profile="cluster")
    b = SparkSession.builder.master("local[1]").appName("race-spark")
    for k, v in spark_conf(config).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    path = config.lake_root.replace("/lake", "/race/t")
    rows = [spark.createDataFrame([("spark", i)], "who string, i int") for i in range({n})]
    late = time.time() - {start}
    time.sleep(max(0.0, {start} - time.time()))
    for df in rows:
        df.write.format("delta").mode("append").save(path)
    print(f"DONE spark (ready {{-late:.1f}} s before the start)", flush=True)
''')

DELTA_RS_WRITER = textwrap.dedent('''
    import time
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake, DeltaTable
    from loglake.core.config import load_config
    from loglake.core.objectstore import delta_location
    config = load_config("/opt/loglake/conf", profile="cluster")
    uri, options = delta_location(config.lake_root.replace("/lake", "/race/t"), config.object_store)
    time.sleep(max(0.0, {start} - time.time()))
    i, deadline = 0, time.time() + 600
    while time.time() < deadline:
        write_deltalake(uri, pa.table({{"who": ["delta-rs"], "i": pa.array([i], pa.int32())}}), mode="append",
                        storage_options=options)
        i += 1
        who = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=["who"])["who"]
        if pc.sum(pc.equal(who, "spark")).as_py() >= {n}:
            break
        time.sleep(1.0)  # paced: appends all along Spark's run without starving its commits
    print(f"DONE delta-rs {{i}}", flush=True)
''')


def test_concurrent_commits_from_a_spark_and_a_delta_rs_container(stack):
    from tests.integration.test_object_store_commits import spark_retried

    n = 15
    config = stack.config()
    # The table made first by one writer, so both append to it from the start.
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from loglake.core.objectstore import delta_location
    table_path = config.lake_root.replace("/lake", "/race/t")
    uri, options = delta_location(table_path, config.object_store)
    write_deltalake(uri, pa.table({"who": ["init"], "i": pa.array([0], pa.int32())}), storage_options=options)
    results: dict = {}
    start = time.time() + 150  # both containers started and Spark's session up by then

    def run(name, script):
        results[name] = stack.run_in("loglake-init", script.format(n=n, start=start), timeout=900)

    threads = [threading.Thread(target=run, args=("spark", SPARK_WRITER)),
               threading.Thread(target=run, args=("delta-rs", DELTA_RS_WRITER))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, r in results.items():
        assert f"DONE {name}" in r.stdout, (name, r.stdout[-2000:], r.stderr[-4000:])
    spark_said = next(x for x in results["spark"].stdout.splitlines() if x.startswith("DONE spark"))
    assert "ready -" not in spark_said, spark_said  # Spark's session was up before the start: a race
    k = int(next(x for x in results["delta-rs"].stdout.splitlines() if x.startswith("DONE delta-rs")).split()[-1])
    table = DeltaTable(uri, storage_options=options)
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted((r["who"], r["i"]) for r in rows if r["who"] != "init") == sorted(
        [("spark", i) for i in range(n)] + [("delta-rs", i) for i in range(k)])
    history = sorted(h["version"] for h in table.history())
    assert history == list(range(n + k + 1)), history  # every commit present, versions contiguous
    # A race indeed: Spark's commits found their versions taken by delta-rs and were made again.
    retried = spark_retried(table_path, config.object_store)
    assert retried, "no Spark commit was refused and retried: the writers did not overlap"
    stack.record("concurrent_commits", {"spark_appends": n, "delta_rs_appends": k, "versions": len(history),
                                        "spark_retried": len(retried), "spark_said": spark_said})


def _replicas(stack, service: str) -> dict[str, str]:
    """The running containers of ``service``: name → its pid namespace (``pid:[inode]``, read on
    this host from the container's first process)."""
    names = stack.docker("ps", "--filter", f"label=com.docker.compose.project={stack.project}", "--filter",
                         f"label=com.docker.compose.service={service}", "--format", "{{.Names}}").stdout.split()
    out = {}
    for name in names:
        pid = stack.docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
        out[name] = os.readlink(f"/proc/{pid}/ns/pid")
    return out


def test_two_replicas_of_one_speed_service_land_every_offset_once(stack):
    """``docker compose up --scale``: two replicas of the job_views speed service, one host name
    (the service's ``hostname``), a pid namespace each, one lease on the object store. One streams,
    the other is refused while the first renews (its supervisor tries again); the holder killed,
    the other takes over once it has seen the lease unchanged for its life. Each offset lands once."""
    from loglake.leases import DatasetLock

    service = "speed-job-views"
    config = stack.config()
    ds = config.dataset("job_views")
    stack.compose("up", "-d", "--no-recreate", "--scale", f"{service}=2", service)
    try:
        replicas = wait_for(lambda: (r := _replicas(stack, service)) and len(r) == 2 and r, 300,
                            f"two replicas of {service}", interval=5)
        produce(stack, "job_views", 10_000, seed=7, rate=1000.0)
        speed_exact(stack, "job_views")
        held = DatasetLock(config, ds.name, "stream").holder()
        assert held is not None and held["host"] == service, held  # one host name for both replicas
        holder = next(name for name, ns in replicas.items() if held["where"].endswith(ns))
        stack.docker("kill", holder)
        killed = time.monotonic()
        produce(stack, "job_views", 5_000, seed=8, rate=1000.0)
        speed_exact(stack, "job_views")
        stack.record("speed_replica_takeover_seconds", round(time.monotonic() - killed, 1))
        taken = DatasetLock(config, ds.name, "stream").holder()
        assert taken is not None and taken["token"] != held["token"], taken
        audit_ok(stack, "job_views")
    finally:
        stack.compose("up", "-d", "--scale", f"{service}=1", service, check=False)
    speed_exact(stack, "job_views")


def test_the_whole_stack_restarted_with_its_volumes(stack):
    stopped = time.monotonic()
    stack.compose("down")  # volumes kept
    assert stack.m.up(900) == 0
    stack.record("restart_up_seconds", round(time.monotonic() - stopped, 1))
    produce(stack, "job_views", 5_000, seed=6)
    speed_exact(stack, "job_views")
    stack.record("restart_recovery_seconds", round(time.monotonic() - stopped, 1))
    audit_ok(stack, "job_views")
    stack.record("memory_mib_end", stack.memory_mib())
