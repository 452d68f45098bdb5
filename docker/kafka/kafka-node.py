"""One Kafka node of docker/compose.yaml (KRaft: broker and controller in one JVM).

    kafka-node.py run       write the node's configuration, format the storage on first start, run Kafka
    kafka-node.py health    exit 0 when the client listener completes a TLS handshake with the cluster's CA

Every listener is authenticated, over TLS (the keystore of the secret kafka_keystore):

    CLIENT     :9093    SASL_SSL, SCRAM-SHA-512: loglake's processes on the compose network
    EXTERNAL   :KAFKA_EXTERNAL_PORT   SASL_SSL, SCRAM-SHA-512, advertised as localhost:<port> for
                        the host (compose publishes it on 127.0.0.1 only)
    INTERNAL   :19092   SASL_SSL, SCRAM-SHA-512: broker to broker, as user kafka-broker
    CONTROLLER :9094    SASL_SSL, PLAIN: broker to controller and controller to controller, as user
                        controller (SCRAM cannot guard it: its credentials live in the metadata the
                        controllers serve; Kafka 4 takes PLAIN or GSSAPI there)

and the StandardAuthorizer allows nothing that no ACL allows, except to the super users
kafka-broker, controller and admin. The SCRAM credentials of kafka-broker and admin are written
into the metadata when the storage is formatted (the other users are added by admin: kafka-init).

Settings come from the environment (KAFKA_NODE_ID, KAFKA_CONTROLLER_QUORUM_VOTERS,
KAFKA_CLUSTER_ID, KAFKA_HOST, KAFKA_EXTERNAL_PORT, KAFKA_HEAP, KAFKA_SETTINGS: extra
`key=value` lines), the secrets from files in /run/secrets. The configuration, which holds
passwords, is written to /dev/shm (memory, mode 0600) on every start, never to the image or the volume.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

SECRETS = Path(os.environ.get("KAFKA_SECRETS_DIR", "/run/secrets"))
LIBS = Path("/opt/kafka/libs")
DATA = Path(os.environ.get("KAFKA_LOG_DIRS", "/var/lib/kafka/data"))
RUN = Path("/dev/shm/kafka")
CLIENT_PORT, INTERNAL_PORT, CONTROLLER_PORT = 9093, 19092, 9094
BROKER_USER, CONTROLLER_USER, ADMIN_USER = "kafka-broker", "controller", "admin"
MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192

LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="stdout"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.common.security.authenticator" level="INFO"/>
  </Loggers>
</Configuration>
"""


def secret(name: str) -> str:
    path = SECRETS / name
    try:
        value = path.read_text().strip()
    except OSError as e:
        sys.exit(f"kafka-node: cannot read the secret {path}: {e.strerror}")
    if not value:
        sys.exit(f"kafka-node: the secret {path} is empty")
    return value


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if not value:
        sys.exit(f"kafka-node: set {name}")
    return value


def jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def properties() -> dict[str, str]:
    host = env("KAFKA_HOST")
    external = int(env("KAFKA_EXTERNAL_PORT"))
    broker_pw, controller_pw, keystore_pw = (secret("kafka_broker_password"), secret("kafka_controller_password"),
                                             secret("kafka_keystore_password"))
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    mech = MECHANISM.lower()
    props = {
        "process.roles": "broker,controller",
        "node.id": env("KAFKA_NODE_ID"),
        "controller.quorum.voters": env("KAFKA_CONTROLLER_QUORUM_VOTERS"),
        "listeners": (f"CLIENT://:{CLIENT_PORT},EXTERNAL://:{external},INTERNAL://:{INTERNAL_PORT},"
                      f"CONTROLLER://:{CONTROLLER_PORT}"),
        "advertised.listeners": (f"CLIENT://{host}:{CLIENT_PORT},EXTERNAL://localhost:{external},"
                                 f"INTERNAL://{host}:{INTERNAL_PORT}"),
        "listener.security.protocol.map": "CLIENT:SASL_SSL,EXTERNAL:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        f"listener.name.client.{mech}.sasl.jaas.config": f"{scram};",
        f"listener.name.external.{mech}.sasl.jaas.config": f"{scram};",
        # The broker's own login on the inter-broker listener (and the SCRAM server there).
        f"listener.name.internal.{mech}.sasl.jaas.config":
            f"{scram} username={jaas_quote(BROKER_USER)} password={jaas_quote(broker_pw)};",
        # Server side: the one PLAIN user; client side (this node to the controllers): the same.
        "listener.name.controller.plain.sasl.jaas.config":
            (f"{plain} username={jaas_quote(CONTROLLER_USER)} password={jaas_quote(controller_pw)} "
             f"user_{CONTROLLER_USER}={jaas_quote(controller_pw)};"),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(SECRETS / "kafka_keystore"),
        "ssl.keystore.password": keystore_pw,
        "ssl.key.password": keystore_pw,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(SECRETS / "kafka_ca"),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{BROKER_USER};User:{CONTROLLER_USER};User:{ADMIN_USER}",
        "allow.everyone.if.no.acl.found": "false",
        "log.dirs": str(DATA),
        # Durability: every partition on 3 brokers, a write acknowledged (acks=all) once 2 hold
        # it, never a leader that missed acknowledged writes, and topics only as loglake creates them.
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    for line in os.environ.get("KAFKA_SETTINGS", "").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def escape(value: str) -> str:
    """``value`` as a Java properties file reads it back."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def java(heap: str, *args: str) -> list[str]:
    return ["java", f"-Xms{heap}", f"-Xmx{heap}", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={RUN / 'log4j2.xml'}", "-Dlog4j2.shutdownHookEnabled=false",
            "-cp", f"{LIBS}/*", *args]


def run() -> None:
    RUN.mkdir(mode=0o700, parents=True, exist_ok=True)
    props_path = RUN / "server.properties"
    write_private(props_path, "".join(f"{k}={escape(v)}\n" for k, v in properties().items()))
    (RUN / "log4j2.xml").write_text(LOG4J2_XML)
    heap = os.environ.get("KAFKA_HEAP", "512m")
    if not (DATA / "meta.properties").exists():
        # The SCRAM credentials of the brokers' own user and of admin go into the metadata here:
        # in an argument file (memory, 0600, deleted after), not on the command line.
        args = RUN / "format-args"
        write_private(args, "".join(
            f"--add-scram\n{MECHANISM}=[name={user},iterations={SCRAM_ITERATIONS},password={secret(pw)}]\n"
            for user, pw in ((BROKER_USER, "kafka_broker_password"), (ADMIN_USER, "kafka_admin_password"))))
        try:
            subprocess.run(java("256m", "kafka.tools.StorageTool", "format", "-t", env("KAFKA_CLUSTER_ID"),
                                "-c", str(props_path), f"@{args}"), check=True)
        finally:
            args.unlink(missing_ok=True)
    os.execvp("java", java(heap, "kafka.Kafka", str(props_path)))


def health() -> int:
    ctx = ssl.create_default_context(cafile=str(SECRETS / "kafka_ca"))
    try:
        with socket.create_connection(("127.0.0.1", CLIENT_PORT), timeout=5) as sock, \
                ctx.wrap_socket(sock, server_hostname=env("KAFKA_HOST")):
            return 0
    except (OSError, ssl.SSLError) as e:
        print(f"kafka-node: the client listener does not answer: {e}", file=sys.stderr)
        return 1


def main(argv: list[str]) -> int:
    if argv == ["run"]:
        run()
    if argv == ["health"]:
        return health()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
