"""The compose stack of docker/compose.yaml from this host (`make compose-up`, `make compose-down`).

    python docker/stack.py up [--timeout S]   secrets and images made if missing, the stack started,
                                              every health check waited for, the endpoints printed
    python docker/stack.py endpoints          where the UI, the brokers, the master, the store and Prometheus answer
    python docker/stack.py services [--json]  each container's health (--json: as `loglake status` reads it)
    python docker/stack.py env                `export` lines for `loglake` on this host (profile cluster)
    python docker/stack.py loglake ARGS...    `loglake ARGS` on this host against the stack
    python docker/stack.py token [USER]       an Airflow API token (POST /auth/token, FAB user of airflow_users.json)
    python docker/stack.py compose ARGS...    `docker compose -f docker/compose.yaml ARGS`
    python docker/stack.py down [--volumes]   stop and remove the containers (the volumes too with --volumes)

Compose is the `docker compose` plugin when the docker CLI has it, else Compose v2 built from the Go
module proxy by docker/build-compose.py (Debian's docker-compose 1.29 is not used: it predates
the Compose Specification this file is written in).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DOCKER_DIR = Path(__file__).resolve().parent
REPO = DOCKER_DIR.parent
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
SECRETS = DOCKER_DIR / "secrets"
# Another project name and other published ports (the variables compose.yaml reads) run a second
# stack beside the first: `make test-compose` starts its own this way.
PROJECT = os.environ.get("LOGLAKE_COMPOSE_PROJECT", "loglake")
PUBLISH = os.environ.get("LOGLAKE_PUBLISH_ADDRESS", "127.0.0.1")
AIRFLOW_URL = f"http://{PUBLISH}:{os.environ.get('LOGLAKE_AIRFLOW_PORT', '8080')}"
S3_URL = f"http://{PUBLISH}:{os.environ.get('LOGLAKE_S3_PORT', '7070')}"
PROMETHEUS_URL = f"http://{PUBLISH}:{os.environ.get('LOGLAKE_PROMETHEUS_PORT', '9090')}"
HOST_BROKERS = ",".join(f"localhost:{os.environ.get(f'LOGLAKE_KAFKA_{n}_PORT', str(port))}"
                        for n, port in ((1, 19093), (2, 19094), (3, 19095)))


def _docker() -> str:
    return shutil.which("docker") or "/usr/bin/docker"


def compose_cmd() -> list[str]:
    """``docker compose`` if the CLI has the plugin, else the plugin built into the cache."""
    docker = _docker()
    if subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    out = subprocess.run([sys.executable, str(DOCKER_DIR / "build-compose.py")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"stack: no docker compose, and building it failed:\n{out.stdout}{out.stderr}")
    os.environ["DOCKER_CONFIG"] = str(Path(out.stdout.strip()).parent.parent)
    return [docker, "compose"]


def compose(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [*compose_cmd(), "-f", str(COMPOSE_FILE), "-p", PROJECT, *args]
    return subprocess.run(cmd, check=check, text=True, capture_output=capture)


def services() -> list[dict]:
    """``docker compose ps -a`` as records (one per container)."""
    out = compose("ps", "-a", "--format", "json", capture=True).stdout.strip()
    if not out:
        return []
    if out.startswith("["):
        return json.loads(out)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def container_ip(name: str) -> str | None:
    out = subprocess.run([_docker(), "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                          name], capture_output=True, text=True)
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.split() else None


def host_env() -> dict[str, str]:
    """The cluster profile's variables for a `loglake` on this host: the published ports, the
    secret files of docker/secrets/, and a state directory of its own."""
    bucket = os.environ.get("S3_BUCKET", "loglake")
    master_ip = container_ip(f"{PROJECT}-spark-master-1")
    return {
        "LOGLAKE_PROFILE": "cluster",
        # `loglake status` reports the containers' health (their own checks), not this host's processes.
        "LOGLAKE_SERVICES_COMMAND": shlex.join([sys.executable, str(DOCKER_DIR / "stack.py"), "services", "--json"]),
        "LOGLAKE_COMPOSE_PROJECT": PROJECT,
        "LOGLAKE_HOME": str(REPO / ".loglake" / f"compose-host-{PROJECT}"),
        "LOGLAKE_KAFKA_BOOTSTRAP": HOST_BROKERS,
        "LOGLAKE_KAFKA_USERNAME": "loglake",
        "LOGLAKE_KAFKA_PASSWORD_FILE": str(SECRETS / "kafka_loglake_password"),
        "LOGLAKE_KAFKA_CA_FILE": str(SECRETS / "kafka_ca.pem"),
        "LOGLAKE_SPARK_MASTER": f"spark://{master_ip or 'spark-master'}:7077",
        "LOGLAKE_LAKE_ROOT": f"s3a://{bucket}/lake",
        "LOGLAKE_CHECKPOINT_ROOT": f"s3a://{bucket}/checkpoints",
        "LOGLAKE_S3_ENDPOINT": S3_URL,
        "LOGLAKE_AWS_REGION": os.environ.get("S3_REGION", "us-east-1"),
        "LOGLAKE_S3_CREDENTIALS_FILE": str(SECRETS / "s3_credentials"),
    }


def endpoints() -> str:
    users = json.loads((SECRETS / "airflow_users.json").read_text()) if (SECRETS / "airflow_users.json").exists() else {}
    master_ip = container_ip(f"{PROJECT}-spark-master-1")
    who = ", ".join(f"{name} ({spec['role']})" for name, spec in users.items())
    rows = [
        ("Airflow UI and REST API", f"{AIRFLOW_URL}  (loglake page: {AIRFLOW_URL}/plugin/loglake; users "
                                    f"{who}: "
                                    f"docker/secrets/airflow_users.json; token: python docker/stack.py token)"),
        ("Kafka, from this host", f"{HOST_BROKERS}  (SASL_SSL, SCRAM-SHA-512, user loglake, password "
                                  "docker/secrets/kafka_loglake_password, CA docker/secrets/kafka_ca.pem)"),
        ("Kafka, on the network", "kafka-1:9093,kafka-2:9093,kafka-3:9093  (the same, as the containers reach it)"),
        ("Spark master", f"spark://spark-master:7077 on network {PROJECT}_default"
                         + (f" ({master_ip}:7077 from this host)" if master_ip else "")
                         + "; RPC authenticated (docker/secrets/spark-defaults.conf); its UI is not published"),
        ("S3 (versitygw)", f"{S3_URL}  (bucket {os.environ.get('S3_BUCKET', 'loglake')}; keys: "
                           "docker/secrets/s3_credentials; no console)"),
        ("Prometheus", f"{PROMETHEUS_URL}  (UI and API, read-only, no login; scrapes loglake's metrics at "
                       "metrics:9464, Airflow's at statsd-exporter:9102 and the speed containers'; loglake's "
                       f"alerts: {PROMETHEUS_URL}/alerts)"),
        ("loglake on this host", "python docker/stack.py loglake status   (or: eval \"$(python docker/stack.py env)\")"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"  {name:<{width}}  {where}" for name, where in rows)


def service_states() -> list[dict]:
    """Each container of the project's services (not a `compose run`'s) as ``loglake status``
    takes a deployment's (``deployment.services_command``): name, running (healthy, or a one-shot
    service that finished with 0), state, detail. A replica past the first is named with its number."""
    out = []
    for s in sorted(services(), key=lambda s: (s.get("Service", ""), s.get("Name", ""))):
        if "com.docker.compose.oneoff=True" in s.get("Labels", ""):
            continue  # a `compose run` of a command, not a service of the stack
        state, health = s.get("State", ""), s.get("Health", "")
        one_shot = state == "exited" and "(0)" in s.get("Status", "")
        number = str(s.get("Name", "")).rsplit("-", 1)[-1]
        name = s.get("Service", "?") + (f"-{number}" if number.isdigit() and number != "1" else "")
        out.append({"name": name, "running": health == "healthy" or one_shot,
                    "state": health or ("done" if one_shot else state) or "-",
                    "detail": f"{state}: {s.get('Status', '')}"})
    return out


def health_table() -> tuple[str, bool]:
    rows = service_states()
    lines = [f"  {s['name']:<24} {s['state']:<10} {s['detail']}" for s in rows]
    return "\n".join(lines), all(s["running"] for s in rows)


def up(timeout: int) -> int:
    t0 = time.monotonic()
    subprocess.run(["bash", str(DOCKER_DIR / "make-dev-secrets.sh")], check=True)
    subprocess.run(["bash", str(DOCKER_DIR / "images.sh")], check=True)
    built = time.monotonic()
    res = compose("up", "-d", "--no-build", "--pull", "never", "--wait", "--wait-timeout", str(timeout), check=False)
    ready = time.monotonic()
    table, ok = health_table()
    print(table)
    if res.returncode != 0 or not ok:
        print(f"stack: not every service is healthy after {ready - built:.0f} s "
              "(python docker/stack.py compose logs SERVICE)", file=sys.stderr)
        return 1
    print(f"stack: images {built - t0:.0f} s, up and healthy in {ready - built:.0f} s\n")
    print(endpoints())
    return 0


def token(user: str) -> str:
    users = json.loads((SECRETS / "airflow_users.json").read_text())
    body = json.dumps({"username": user, "password": users[user]["password"]}).encode()
    req = urllib.request.Request(f"{AIRFLOW_URL}/auth/token", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["access_token"]


def main(argv: list[str]) -> int:
    cmd, rest = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "up":
        timeout = int(rest[rest.index("--timeout") + 1]) if "--timeout" in rest else 900
        return up(timeout)
    if cmd == "down":
        return compose("down", *(["--volumes"] if "--volumes" in rest else []), check=False).returncode
    if cmd == "endpoints":
        table, ok = health_table()
        print(table + "\n\n" + endpoints())
        return 0 if ok else 1
    if cmd == "services":
        states = service_states()
        if "--json" in rest:  # the records say each one's health; the exit says they were read
            print(json.dumps(states))
            return 0
        print(health_table()[0])
        return 0 if states and all(s["running"] for s in states) else 1
    if cmd == "env":
        print("\n".join(f"export {k}='{v}'" for k, v in host_env().items()))
        return 0
    if cmd == "loglake":
        exe = REPO / ".venv" / "bin" / "loglake"
        return subprocess.run([str(exe), *rest], env={**os.environ, **host_env()}).returncode
    if cmd == "token":
        print(token(rest[0] if rest else "admin"))
        return 0
    if cmd == "compose":
        return compose(*rest, check=False).returncode
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
