"""What loglake's containers run besides the `loglake` and `airflow` commands (docker/compose.yaml).

  kafka-init        as Kafka's admin user (the secret kafka_admin_password): give the users loglake
                    and guest their SCRAM credentials, and loglake its ACLs (ACLS); guest gets none
  init              make the lake's bucket if missing, check the datasets' schemas against the
                    lake and create the topics that are missing (as loglake.kafka.admin.ensure_topic
                    does for `loglake up`); a one-shot service that the speed streams and Airflow wait for
  airflow-init      migrate Airflow's metadata database and create the users of the secret
                    airflow_users.json ({"name": {"role": "Admin|Op|User|Viewer", "password": "…"}})
  speed DATASET     the dataset's speed stream in the foreground: the container's main process is
                    loglake's supervisor (restarts with backoff, no restart after a permanent
                    error); SIGTERM from `docker stop` stops it and its spark-submit
  health [ROLE]     exit 0 when this container's service is healthy; ROLE (spark-master,
                    spark-worker, schema-registry, speed, metrics, api-server, scheduler,
                    dag-processor, triggerer, celery-worker) is found from the running processes
                    when not given

Configuration comes from the environment, as for any loglake command (LOGLAKE_PROFILE,
LOGLAKE_CONF, LOGLAKE_HOME and the variables conf/loglake.yaml names); secrets from the files
under /run/secrets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

SECRETS = Path("/run/secrets")
SCRAM_ITERATIONS = 8192
# Another SCRAM user, with no ACL: the authorizer refuses it everything (a check of the lockdown).
GUEST_USER = "guest"


def _secret(name: str) -> str:
    return (SECRETS / name).read_text().strip()


# What loglake's user may do, besides its datasets' topics (ALL on each, by literal name: loglake
# creates them, writes, reads, describes their configs): its consumer groups (the speed layer's
# positions loglake-speed-<dataset>, loglake-audit, loglake-admin) and Spark's Kafka source's own
# (spark-kafka-source-…, spark-kafka-relation-…), and the transactional ids of `loglake produce`.
# (Idempotent producers need no IdempotentWrite on the cluster since Kafka 3.0: Write on the topic.)
ACLS = (("GROUP", "loglake-", "PREFIXED", "ALL"),
        ("GROUP", "spark-kafka-", "PREFIXED", "ALL"),
        ("TRANSACTIONAL_ID", "loglake-", "PREFIXED", "ALL"))


def kafka_init(wait_seconds: float = 300.0) -> int:
    """SCRAM users and ACLs, as admin (a super user the brokers' storage was formatted with)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
        ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    )

    from loglake.core.config import load_config
    from loglake.core.retrying import retry_transient

    config = load_config()
    security = config.kafka.security
    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": security.mechanism, "sasl.username": "admin",
                         "sasl.password": _secret("kafka_admin_password"), "ssl.ca.location": security.ca_file,
                         "log_level": 3})
    mechanism = getattr(ScramMechanism, security.mechanism.replace("-", "_"))
    users = {security.username: security.password.get_secret_value(), GUEST_USER: _secret("kafka_guest_password")}
    upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(mechanism, SCRAM_ITERATIONS), p.encode())
               for u, p in users.items()]
    principal = f"User:{security.username}"
    wanted = [("TOPIC", ds.topic, "LITERAL", "ALL") for ds in config.datasets.values()] + list(ACLS)
    bindings = [AclBinding(getattr(ResourceType, rtype), name, getattr(ResourcePatternType, pattern), principal, "*",
                           getattr(AclOperation, op), AclPermissionType.ALLOW) for rtype, name, pattern, op in wanted]
    def apply() -> None:
        for fut in admin.alter_user_scram_credentials(upserts, request_timeout=30).values():
            fut.result(timeout=30)
        for fut in admin.create_acls(bindings, request_timeout=30).values():
            fut.result(timeout=30)

    try:  # the brokers may still be starting
        retry_transient(apply, what="kafka-init", seconds=wait_seconds, only=KafkaException, base_delay=2, max_delay=5)
    except KafkaException as e:
        print(f"kafka-init: Kafka refused or did not answer within {wait_seconds:.0f}s: {e}", file=sys.stderr)
        return 1
    print(f"kafka-init: users {', '.join(users)}; {principal} allowed: "
          + "; ".join(f"{op} on {rtype.lower()} {name}{'*' if pattern == 'PREFIXED' else ''}"
                      for rtype, name, pattern, op in wanted))
    return 0


def ensure_bucket(config) -> None:
    """The bucket of the lake and the checkpoints, made if missing (versitygw starts empty)."""
    from botocore.exceptions import ClientError

    from loglake.core import objectstore

    for root in {config.lake_root, config.checkpoint_root}:
        if not objectstore.is_remote(root):
            continue
        bucket, _ = objectstore.split(root)
        s3 = objectstore.client(config.object_store, root)
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError:
            s3.create_bucket(Bucket=bucket)
            print(f"init: bucket {bucket} made")


def _json_after_logs(out: str) -> list:
    """The JSON list an Airflow command printed (``--output json``) after any log lines it printed
    before it on the same stream (they may hold a "[" too)."""
    import json

    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("["):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
    return []


def airflow_init() -> int:
    """``airflow db migrate``, then each user of airflow_users.json that does not exist yet."""
    import json

    subprocess.run(["airflow", "db", "migrate"], check=True)
    users = json.loads(_secret("airflow_users"))
    listed = subprocess.run(["airflow", "users", "list", "--output", "json"], check=True, capture_output=True,
                            text=True).stdout
    have = {u["username"] for u in _json_after_logs(listed)}
    for name, spec in users.items():
        if name in have:
            continue
        # The password on standard input (asked twice), not on the command line.
        password = spec["password"]
        subprocess.run(["airflow", "users", "create", "--username", name, "--role", spec["role"],
                        "--firstname", name, "--lastname", spec["role"], "--email", f"{name}@loglake.invalid"],
                       input=f"{password}\n{password}\n", text=True, check=True, stdout=subprocess.DEVNULL)
        print(f"airflow-init: user {name} ({spec['role']}) created")
    return 0


def init(wait_seconds: float = 300.0) -> int:
    from loglake.core.config import load_config
    from loglake.core.errors import KafkaUnavailableError
    from loglake.core.retrying import retry_transient
    from loglake.kafka.admin import ensure_topic
    from loglake.schema_versions import check_all

    config = load_config()
    ensure_bucket(config)
    check_all(config)
    for ds in config.datasets.values():
        try:  # the brokers may still be starting
            name = retry_transient(lambda: ensure_topic(config, ds), what="init", seconds=wait_seconds,
                                   only=KafkaUnavailableError, base_delay=2, max_delay=5)
        except KafkaUnavailableError as e:
            print(f"init: Kafka did not answer within {wait_seconds:.0f}s: {e}", file=sys.stderr)
            return 1
        print(f"init: topic {name} ({ds.partitions} partitions) ready for dataset {ds.name}")
    return 0


def speed(dataset: str) -> int:
    from loglake.core.config import load_config
    from loglake.jobs.launch import job_env, spark_submit
    from loglake.jobs.supervisor import supervise
    from loglake.schema_versions import check_all
    from loglake.speed.control import SpeedStream

    config = load_config()
    check_all(config)
    stream = SpeedStream(config, config.dataset(dataset))
    stream.progress_file.parent.mkdir(parents=True, exist_ok=True)
    stream.summary_file.unlink(missing_ok=True)
    request = stream.request(False).with_summary_file(stream.summary_file)
    os.environ.update(job_env(config))  # what `loglake speed start` gives the supervised job
    # Executors connect back to this driver (client mode) at its own address, not the service's
    # name: scaled (`docker compose up --scale`), a service's replicas share that name, and only
    # one of them streams (the dataset's stream lease); the others wait their turn.
    os.environ["SPARK_LOCAL_HOSTNAME"] = socket.gethostbyname(socket.gethostname())
    return supervise(spark_submit(config, request))


# --- health --------------------------------------------------------------------------

def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def _exporter_answers() -> bool:
    """The platform's exporter (python -m loglake.local.metrics) serves a scrape: from its first
    sample on, on the profile's metrics.port of every address (the cluster profile's host 0.0.0.0)."""
    from loglake.core.config import load_config
    from loglake.observe.exporter import url

    config = load_config()
    port = config.profile.metrics.platform_port
    # A free port (0) is found where the exporter listed itself.
    return _get(f"http://127.0.0.1:{port}/metrics" if port else url(config))


def _cmdlines() -> list[str]:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        out.append(" ".join(p.info["cmdline"] or []))
    return out


def _airflow_job_alive(job_type: str) -> bool:
    cmd = ["airflow", "jobs", "check", "--job-type", job_type, "--hostname", socket.gethostname()]
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=25).returncode == 0


CHECKS = {
    "spark-master": lambda: _get("http://localhost:8080/json/"),
    "spark-worker": lambda: _get("http://localhost:8081/json/"),
    "schema-registry": lambda: _get("http://localhost:8081/apis/ccompat/v7/subjects"),
    # The supervisor lives as long as the container; healthy while its spark-submit runs.
    "speed": lambda: any("org.apache.spark.deploy.SparkSubmit" in c for c in _cmdlines()),
    "metrics": _exporter_answers,
    "api-server": lambda: _get("http://localhost:8080/api/v2/monitor/health"),
    "scheduler": lambda: _get("http://localhost:8974/health"),
    "dag-processor": lambda: _airflow_job_alive("DagProcessorJob"),
    "triggerer": lambda: _airflow_job_alive("TriggererJob"),
    "celery-worker": lambda: subprocess.run(
        ["celery", "--app", "airflow.providers.celery.executors.celery_executor.app", "inspect", "ping",
         "--destination", f"celery@{socket.gethostname()}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=25).returncode == 0,
}

# How each role shows in a process's command line (for `health` without a ROLE).
SIGNS = [
    ("spark-master", "org.apache.spark.deploy.master.Master"),
    ("spark-worker", "org.apache.spark.deploy.worker.Worker"),
    ("schema-registry", "quarkus-run.jar"),
    ("speed", "loglake-container.py speed"),
    ("metrics", "-m loglake.local.metrics"),
    ("api-server", "airflow api-server"),
    ("scheduler", "airflow scheduler"),
    ("dag-processor", "airflow dag-processor"),
    ("triggerer", "airflow triggerer"),
    ("celery-worker", "airflow celery worker"),
]


def health(role: str | None) -> int:
    if role is None:
        lines = _cmdlines()
        role = next((r for r, sign in SIGNS if any(sign in c for c in lines)), None)
        if role is None:
            return 0  # a one-shot command (init, a `loglake` command): nothing long-running to check
    if role not in CHECKS:
        print(f"health: unknown role {role!r}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    ok = CHECKS[role]()
    if not ok:
        print(f"health: {role} is not healthy", file=sys.stderr)
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv == ["init"]:
        return init()
    if argv == ["kafka-init"]:
        return kafka_init()
    if argv == ["airflow-init"]:
        return airflow_init()
    if argv[:1] == ["speed"] and len(argv) == 2:
        return speed(argv[1])
    if argv[:1] == ["health"] and len(argv) <= 2:
        return health(argv[1] if len(argv) == 2 else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
