"""The embedded broker's files: its ``server.properties`` (KRaft, one node or a local cluster's
voters, the security of its listeners), its log4j2 configuration, its cluster id, and the
storage formatted once. ``self`` below is the broker (``loglake.local.broker.EmbeddedKafka``), which
writes them on every start."""

from __future__ import annotations

import base64
import subprocess
import uuid

from loglake.core.errors import ProcessError
from loglake.kafka.security import write_private

# Console appender -> the JVM's stdout, which start() redirects into kafka.log: one
# writer for the file, so JVM crashes and log4j2 lines interleave in order.
LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="stdout"/></Root>
    <!-- Per-request lines: far too chatty at INFO. -->
    <Logger name="kafka.request.logger" level="WARN"/>
  </Loggers>
</Configuration>
"""


def new_cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 random bytes, no padding. Kafka itself
    # avoids ids starting with '-', which CLI parsers would take for an option.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def write_config(self) -> None:
    """Write the broker's ``server.properties`` (every start: the ports may change) and log4j2.xml."""
    self.data_dir.mkdir(parents=True, exist_ok=True)
    if self.security is not None:
        self.security.prepare()
    voters = self.voters or {self.node_id: self.controller_port}
    rf, isr = str(min(3, len(voters))), str(min(2, len(voters)))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(self.node_id),
        # Static quorum: the voter set comes from this file, not from the formatted
        # storage, so ports may change between restarts.
        "controller.quorum.voters": ",".join(f"{n}@localhost:{p}" for n, p in sorted(voters.items())),
        "listeners": f"PLAINTEXT://localhost:{self.port},CONTROLLER://localhost:{self.controller_port}",
        "advertised.listeners": f"PLAINTEXT://localhost:{self.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(self.data_dir),
        # Topics are created on purpose, with their partition count; a typo must fail.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        # Replicas as the nodes allow (one broker cannot hold the default 3): every partition
        # on up to three nodes, a write acknowledged once up to two hold it, and a replica
        # that missed writes never becomes leader (it would drop them).
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        # Consumers join at once instead of waiting 3 s for more members.
        "group.initial.rebalance.delay.ms": "0",
        # The internal topics made on first use (group offsets, transactions) with 5 partitions,
        # not 50: a development broker has few groups and producers, and each partition costs
        # time when the topic is made. (It applies when a topic is made; one made before keeps
        # its count, which the coordinators read from the metadata.)
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
    }
    if self.security is not None:
        props.update(self.security.server_properties(self.port, self.controller_port,
                                                     props["controller.quorum.voters"]))
    text = "# Written by loglake.local.broker on every start; edits are lost.\n"
    text += "".join(f"{k}={escape_property(v)}\n" for k, v in props.items())
    if self.security is not None:
        # The inter-broker listener's JAAS holds the broker user's password: owner only.

        write_private(self.props_path, text.encode())
    else:
        self.props_path.write_text(text)
    self.log4j_path.write_text(LOG4J2_XML)

def format_storage(self, java: str, classpath: str) -> None:
    """Format the storage once; the cluster id is generated once and kept."""
    if self.cluster_id:
        cluster_id = self.cluster_id
    elif self.cluster_id_path.exists():
        cluster_id = self.cluster_id_path.read_text().strip()
    else:
        cluster_id = new_cluster_id()
        self.cluster_id_path.write_text(cluster_id + "\n")
    cmd = [java, f"-Xmx{self.heap}", *self._java_options(), f"-Dlog4j2.configurationFile={self.log4j_path}",
           "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.props_path)]
    if self.security is None:
        res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    else:
        # The broker user's SCRAM credential: in an argument file, not on the command line.
        with self.security.format_arguments() as argfile:
            res = subprocess.run(cmd + [argfile], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if res.returncode == 0:
            self.security.formatted.touch()
    if res.returncode != 0:
        raise ProcessError(f"formatting Kafka storage in {self.data_dir} failed:\n{res.stdout}{res.stderr}")


def escape_property(value: str) -> str:
    """``value`` as a Java properties file reads it back (backslashes are escapes there)."""
    return value.replace("\\", "\\\\")
