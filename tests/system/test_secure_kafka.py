"""Authenticated Kafka (profile local-secure): the embedded broker with SASL/SCRAM-SHA-512 over
TLS, started by ``loglake kafka start``, and the whole pipeline through it — the CLI as an
operator runs it, and a batch DAG run by a real Airflow. Real broker, Spark, Delta; no mocks.

One broker for the module, started through the CLI with the shipped profile's
``kafka.security`` block. While the module runs, a thread reads the command line of every
process on the machine: neither the client's password nor the broker's own may appear in one;
at the end no log (loglake's, the jobs', the broker's, Airflow's) and no file of the state
directory may hold them, except the broker's own password in its two 0600 files.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import ssl
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml
from confluent_kafka import Producer

from loglake.core import paths
from loglake.core.config import Config, load_config
from loglake.kafka.admin import ensure_topic, group_offsets, list_topics, log_bounds
from loglake.ledger.ranges import batch_watermarks
from loglake.core.processes import free_port
from loglake.testing import write_conf
from loglake.tables import open_table, query

pytestmark = pytest.mark.system

USER = "loglake-test"
# A token no other text holds (what the scans look for), inside characters that need escaping
# in a JAAS setting, a properties file or a shell.
TOKEN = f"tok{secrets.token_hex(12)}"
PASSWORD = f'{TOKEN} "q\\b,=]$x'
NOISE = ["Traceback", "WARN ", "FAIL ", "%", "rdkafka", "Exception"]


class CommandLineWatch(threading.Thread):
    """Reads every process's command line ~10 times a second; keeps those holding a secret."""

    def __init__(self, secrets_now):
        super().__init__(daemon=True, name="cmdline-watch")
        self.secrets_now = secrets_now  # () -> the secrets to look for (the broker's appears at its start)
        self.hits: list[tuple[int, str]] = []
        self.seen: set[str] = set()  # kinds of process seen, to show the watch looked at the right ones
        self.scans = 0
        self._done = threading.Event()

    def run(self) -> None:
        kinds = {"kafka.Kafka": "broker", "StorageTool": "storage-format", "SparkSubmit": "spark-submit",
                 "spark-submit": "spark-submit", "airflow": "airflow", "loglake.cli": "loglake-cli"}
        while not self._done.is_set():
            wanted = [s for s in self.secrets_now() if s]
            for proc in psutil.process_iter(["pid", "cmdline"]):
                cmd = " ".join(proc.info.get("cmdline") or [])
                self.seen.update(k for marker, k in kinds.items() if marker in cmd)
                for s in wanted:
                    if s in cmd:
                        self.hits.append((proc.info["pid"], cmd.replace(s, "<SECRET>")[:300]))
            self.scans += 1
            self._done.wait(0.1)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


@dataclass
class SecureBroker:
    root: Path
    conf: Path
    home: Path
    port: int
    watch: CommandLineWatch
    started: subprocess.CompletedProcess | None = None
    outputs: list[str] = field(default_factory=list)  # every command's output, for the final scan
    airflow_ran: bool = False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "LOGLAKE_CONF": str(self.conf), "LOGLAKE_HOME": str(self.home),
                "LOGLAKE_KAFKA_USERNAME": USER, "LOGLAKE_KAFKA_PASSWORD": PASSWORD}

    def loglake(self, *args, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env or self.env, capture_output=True,
                           text=True, timeout=timeout)
        self.outputs.append(r.stdout + r.stderr)
        return r

    def config(self) -> Config:
        return load_config(self.conf, home=self.home)

    @property
    def ca(self) -> str:
        return str(self.home / "kafka" / "security" / "ca.pem")

    def broker_password(self) -> str | None:
        f = self.home / "kafka" / "security" / "broker.password"
        return f.read_text().strip() if f.exists() else None


def shipped_security() -> dict:
    """The local-secure profile's ``kafka.security`` as conf/loglake.yaml ships it."""
    data = yaml.safe_load((paths.REPO_ROOT / "conf" / "loglake.yaml").read_text())
    return data["profiles"]["local-secure"]["kafka"]["security"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure")
    home = root / "state"
    holder: list[SecureBroker] = []
    watch = CommandLineWatch(lambda: [PASSWORD, TOKEN, holder[0].broker_password() if holder else None])
    watch.start()
    with pytest.MonkeyPatch.context() as mp:
        # In-process loads of the conf (and the Airflow runs' environment) see the same user.
        mp.setenv("LOGLAKE_KAFKA_USERNAME", USER)
        mp.setenv("LOGLAKE_KAFKA_PASSWORD", PASSWORD)
        broker = None
        try:
            for attempt in range(3):  # a free port can be taken before the broker binds it
                port = free_port()
                conf = write_conf(root, f"localhost:{port}", kafka={"embedded": True, "security": shipped_security()})
                broker = SecureBroker(root, conf, home, port, watch)
                holder[:] = [broker]
                broker.started = broker.loglake("kafka", "start", timeout=180)
                if broker.started.returncode == 0 or "already in use" not in broker.started.stderr:
                    break
            assert broker.started.returncode == 0, broker.started.stdout + broker.started.stderr
            yield broker
        finally:
            if broker is not None:
                stopped = broker.loglake("kafka", "stop", timeout=120)
                if stopped.returncode != 0:
                    from loglake.local.stack import broker as embedded

                    embedded(broker.config()).stop()
            watch.stop()


def test_kafka_start_runs_sasl_ssl_and_status_names_its_address(secure):
    assert "kafka: started in" in secure.started.stdout and f"at localhost:{secure.port}" in secure.started.stdout
    again = secure.loglake("kafka", "start")
    assert again.returncode == 0 and f"already running at localhost:{secure.port}" in again.stdout
    status = secure.loglake("kafka", "status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"kafka: answers at localhost:{secure.port} (SASL_SSL, SCRAM-SHA-512 as ")

    props = (secure.home / "kafka" / "server.properties").read_text()
    assert f"listeners=SASL_SSL://localhost:{secure.port},CONTROLLER://" in props
    assert "PLAINTEXT://" not in props.replace("SASL_PLAINTEXT", "")  # no port without TLS
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512" in props
    for f in (secure.home / "kafka" / "server.properties", secure.home / "kafka" / "security" / "broker.pem",
              secure.home / "kafka" / "security" / "broker.password", secure.home / "kafka" / "security" / "ca.key"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def _other_ca(tmp_path) -> str:
    from loglake.kafka.security import ensure_tls

    ensure_tls(tmp_path / "other")
    return str(tmp_path / "other" / "ca.pem")


REFUSED = {
    "no credentials (TLS only)": lambda s, t: {"security.protocol": "SSL", "ssl.ca.location": s.ca},
    "no credentials, no TLS": lambda s, t: {"security.protocol": "PLAINTEXT"},
    "right credentials without TLS": lambda s, t: {"security.protocol": "SASL_PLAINTEXT",
                                                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                                                   "sasl.password": PASSWORD},
    "wrong password": lambda s, t: {**good(s), "sasl.password": PASSWORD + "x"},
    "unknown user": lambda s, t: {**good(s), "sasl.username": "mallory"},
    "another mechanism": lambda s, t: {**good(s), "sasl.mechanism": "SCRAM-SHA-256"},
    "broker certificate not trusted": lambda s, t: {**good(s), "ssl.ca.location": _other_ca(t)},
}


def good(s: SecureBroker) -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": PASSWORD, "ssl.ca.location": s.ca}


def metadata(s: SecureBroker, settings: dict, timeout: float = 3.0):
    """Topic metadata with ``settings``, and the refusals the client reported meanwhile."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from loglake.core.errors import refusal_reason

    events = []
    client = AdminClient({"bootstrap.servers": f"localhost:{s.port}", "log_level": 0,
                          "error_cb": events.append, **settings})
    try:
        return client.list_topics(timeout=timeout), []
    except KafkaException:
        client.poll(0)
        return None, [r for r in map(refusal_reason, events) if r] + [e.str() for e in events]


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_client_without_the_right_credentials_or_tls_is_refused(secure, tmp_path, case):
    md, _ = metadata(secure, good(secure))
    assert md is not None and md.brokers  # the same client with the right settings is served
    md, why = metadata(secure, REFUSED[case](secure, tmp_path))
    assert md is None, f"{case}: the broker answered"
    expected = {"wrong password": "invalid credentials", "unknown user": "invalid credentials",
                "another mechanism": "Unsupported SASL mechanism",
                "broker certificate not trusted": "certificate verify failed"}.get(case)
    if expected:
        assert any(expected in w for w in why), why


def test_spark_kafka_source_is_refused_with_a_wrong_password(secure, spark, monkeypatch):
    """The Java client (Spark's Kafka source, settings from ``Config.kafka_java_conf``) too; its
    refusal is loglake's permanent KafkaAuthenticationError, so a stream is not restarted for ever."""
    from loglake.core.errors import KafkaAuthenticationError
    from loglake.jobs.entry import known_jvm_error
    from loglake.records.kafka_source import source_options

    config = secure.config()
    # A topic no dataset reads: the batch DAG run below then has job_views' offsets only to do.
    topic = f"{config.dataset('company_ceos').topic}-refusal"
    ensure_topic(config, config.dataset("company_ceos"), topic)
    producer = Producer(config.kafka_client_conf(**{"acks": "all"}))
    for i in range(20):
        producer.produce(topic, key=b"k%d" % i, value=b'{"n": %d}' % i)
    assert producer.flush(30) == 0
    assert spark.read.format("kafka").options(**source_options(config, topic)).load().count() == 20
    monkeypatch.setenv("LOGLAKE_KAFKA_PASSWORD", "not-the-password")
    with pytest.raises(Exception) as e:
        spark.read.format("kafka").options(**source_options(secure.config(), topic)).load().count()
    known = known_jvm_error(e.value)
    assert isinstance(known, KafkaAuthenticationError) and "invalid credentials" in str(known), str(e.value)[:500]


def test_the_controller_port_wants_a_certificate_the_local_ca_signed(secure):
    props = (secure.home / "kafka" / "server.properties").read_text()
    port = int(re.search(r"CONTROLLER://localhost:(\d+)", props)[1])

    def answer(cert: Path | None = None) -> str:
        context = ssl.create_default_context(cafile=secure.ca)
        if cert:
            context.load_cert_chain(cert)
        try:
            with socket.create_connection(("localhost", port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.settimeout(2)
                    return "closed" if tls.recv(1) == b"" else "data"  # TLS 1.3: a refusal is an alert after the handshake
        except TimeoutError:
            return "open"  # let in: the controller waits for a request
        except ssl.SSLError as e:
            return f"refused: {e}"

    assert answer().startswith("refused: [SSL: SSLV3_ALERT_BAD_CERTIFICATE]")
    assert answer(secure.home / "kafka" / "security" / "broker.pem") == "open"


def test_cli_with_wrong_or_missing_credentials_says_why_in_one_line(secure):
    wrong = {**secure.env, "LOGLAKE_KAFKA_PASSWORD": "not-the-password"}
    for args in (("kafka", "status"), ("produce", "job_views", "--count", "5", "--quiet")):
        r = secure.loglake(*args, env=wrong, timeout=60)
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert r.stderr.startswith(f"loglake: error: Kafka at localhost:{secure.port} refused loglake's client: "
                                   f"SASL authentication error"), r.stderr
        assert "LOGLAKE_KAFKA_PASSWORD" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not [w for w in NOISE if w in r.stderr], r.stderr

    unset = {k: v for k, v in secure.env.items() if k != "LOGLAKE_KAFKA_PASSWORD"}
    r = secure.loglake("kafka", "status", env=unset, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"loglake: error: {secure.conf / 'loglake.yaml'}: profiles.test.kafka.security.password: environment "
        f"variable LOGLAKE_KAFKA_PASSWORD is not set (referenced as ${{LOGLAKE_KAFKA_PASSWORD}})")
    r = secure.loglake("kafka", "status", env={**secure.env, "LOGLAKE_KAFKA_PASSWORD": ""}, timeout=60)
    assert r.returncode == 2 and "LOGLAKE_KAFKA_PASSWORD is empty" in r.stderr


def test_pipeline_through_the_secure_broker(secure):
    config = secure.config()
    ds = config.dataset("job_views")

    r = secure.loglake("produce", "job_views", "--count", "400", "--bad-fraction", "0.05", "--seed", "13", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "produced 400 records to" in r.stdout and "(380 good, 20 malformed)" in r.stdout
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    assert sum(ends.values()) == 400

    r = secure.loglake("speed", "run", "job_views", "--available-now")
    assert r.returncode == 0, r.stdout + r.stderr
    records, batches = map(int, re.search(r"speed job_views: (\d+) records in (\d+) micro-batch", r.stdout).groups())
    assert records == 400 and batches >= 1
    # Every offset exactly once: valid rows in speed, the malformed ones in quarantine.
    rows = [(row["_partition"], row["_offset"]) for layer in ("speed", "quarantine")
            for row in query(open_table(config.table_path(ds, layer)), "SELECT _partition, _offset FROM t")]
    assert sorted(rows) == [(p, o) for p, e in sorted(ends.items()) for o in range(e)]
    assert len(query(open_table(config.table_path(ds, "speed")), "SELECT _offset FROM t")) == 380
    # The speed position was committed through the secured broker too.
    assert group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends

    r = secure.loglake("status")  # exit 1: no Airflow runs here; the broker and the datasets show
    assert re.search(rf"kafka\s+running \(pid \d+\)\s+localhost:{secure.port}", r.stdout), r.stdout
    for p, e in ends.items():
        assert f"[{p}] end {e}  speed position {e} (lag 0" in r.stdout, r.stdout
        assert f"batch watermark - (behind {e})" in r.stdout, r.stdout
    assert not [w for w in ("Traceback", "refused") if w in r.stdout + r.stderr], r.stdout + r.stderr



# make test-long only; make test covers its parts: the batch DAG end to end through the scheduler, its
# tasks in the shared application, in test_demo; Spark's Kafka source through the secured broker
# (the same options the batch job's read takes, loglake.records.kafka_source) in the pipeline test above.
@pytest.mark.long
def test_a_batch_dag_run_by_airflow_through_the_secure_broker(secure, airflow_db):
    """The batch layer through the secured broker: the DAG's recompute of every offset so far,
    then loglake audit from the command line."""
    config = secure.config()
    ds = config.dataset("job_views")
    if ds.topic not in list_topics(config) or not any(hi for _lo, hi in log_bounds(config, ds.topic).values()):
        # Run alone (make test-long): the pipeline test's records first.
        r = secure.loglake("produce", "job_views", "--count", "400", "--bad-fraction", "0.05", "--seed", "13",
                           "--quiet")
        assert r.returncode == 0, r.stderr
    r = secure.loglake("produce", "job_views", "--count", "200", "--seed", "14", "--quiet")
    assert r.returncode == 0, r.stderr
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    assert sum(ends.values()) == 600

    run = airflow_db.dags_test(config, "loglake_batch")
    secure.outputs.append(run.output)
    secure.airflow_ran = True
    assert run.returncode == 0 and run.state == "success", run.output[-4000:]
    # One mapped task per dataset with offsets to recompute: job_views only.
    labels = {v["label"]: k[1] for k, v in run.tasks.items() if k[0] == "dataset.recompute"}
    assert set(labels) == {"job_views"}, labels
    index = labels["job_views"]
    for task in ("dataset.recompute", "dataset.quality", "dataset.audit"):
        assert run.tasks[task, index]["state"] == "success", (task, run.tasks)
    # Every offset: 400 with 20 malformed, then 200 good.
    assert run.xcom["dataset.recompute", index]["records"] == 580
    assert batch_watermarks(config, ds) == ends
    audit = run.xcom["dataset.audit", index]
    assert audit["ok"] and audit["offsets_checked"] == 600

    r = secure.loglake("audit", "job_views")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK: 600 offsets checked, 0 missing, 0 duplicated, 0 unexpected" in r.stdout
    assert "Traceback" not in r.stderr, r.stderr


def test_no_secret_in_conf_command_lines_or_logs(secure, airflow_db):
    """Run last in the module: everything above ran while the watch looked."""
    broker_password = secure.broker_password()
    assert broker_password and secure.watch.scans > 10
    assert {"broker", "storage-format", "spark-submit", "loglake-cli"} <= secure.watch.seen, secure.watch.seen
    assert "airflow" in secure.watch.seen or not secure.airflow_ran
    assert secure.watch.hits == [], secure.watch.hits[:5]

    for conf_dir in (paths.REPO_ROOT / "conf", secure.conf):
        for f in conf_dir.rglob("*"):
            if f.is_file():
                assert TOKEN not in f.read_text(errors="replace"), f

    def holders(root: Path, secret: str) -> list[Path]:
        return sorted(f for f in root.rglob("*") if f.is_file() and secret.encode() in f.read_bytes())

    logs = [*secure.home.joinpath("logs").rglob("*.log"), *(airflow_db.home / "logs").rglob("*")]
    # Logs to look in: the command line's, the broker's and a Spark job's at least.
    names = {f.name for f in logs if f.is_file()}
    assert {"cli.log", "kafka.log"} <= names and any("jobs" in f.parts for f in logs), names
    # The client's password: in no file under the state dir (logs, checkpoints, tables, the
    # broker's data keeps only a salted SCRAM credential), not in Airflow's home, not in any output.
    assert holders(secure.home, TOKEN) == []
    assert holders(airflow_db.home, TOKEN) == []
    assert not [o for o in secure.outputs if TOKEN in o]
    # The broker's own password: only in its file and the broker's properties, both 0600.
    assert holders(secure.home, broker_password) == sorted(
        [secure.home / "kafka" / "server.properties", secure.home / "kafka" / "security" / "broker.password"])
    assert holders(airflow_db.home, broker_password) == []
    assert not [o for o in secure.outputs if broker_password in o]
