"""A Kafka cluster and a Spark standalone cluster on this machine: ``loglake cluster up|down|status``.

A profile with a ``local_cluster`` section (conf/loglake.yaml: ``local-cluster``) names
them: one KRaft node (broker + controller) per server of ``kafka.bootstrap_servers``, all
voters of one quorum, and a Spark standalone master at ``spark.master`` with
``local_cluster.spark_workers`` workers — from the same jars as the embedded mode (the
Kafka jars of ``make setup``, the Spark of the pyspark wheel), all on loopback, all under
``<state>/cluster``, each in a process group of its own so a stop leaves nothing behind.

The workers start with an environment that does not carry the repo: the jobs' code
reaches their executors only the way Spark ships it (``--py-files``, ``loglake.jobs.launch``).

With ``kafka.security`` the nodes run as the secured embedded broker does (SASL_SSL client
and inter-broker listeners, the controller quorum over TLS with client certificates), all
three from one CA, certificate and broker password under ``<state>/cluster/kafka/security``
(``loglake.kafka.security``), generated once before the nodes start; the client user is
set once the quorum answers.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loglake.core.config import Config
from loglake.core.errors import ConfigError, KafkaUnavailableError, PortInUseError
from loglake.core.paths import java_executable
from loglake.core.processes import (
    Managed, descendants, free_port, free_ports, port_open, pss_bytes, state_label, wait_for
)
from loglake.jobs.launch import log4j_file, spark_home
from loglake.kafka.admin import admin
from loglake.kafka.security import BrokerSecurity
from loglake.local.broker import EmbeddedKafka
from loglake.local.broker_files import new_cluster_id

_MASTER = re.compile(r"^spark://(localhost|127\.0\.0\.1):(\d+)$")

class LocalCluster:
    """The Kafka nodes and the Spark master and workers of ``config``'s ``local_cluster``."""

    def __init__(self, config: Config):
        settings = config.profile.local_cluster
        if settings is None:
            raise ConfigError(f"profile {config.profile_name!r} has no local_cluster section: `loglake cluster` "
                              f"runs the Kafka and Spark clusters a profile such as local-cluster names",
                              key=f"profiles.{config.profile_name}.local_cluster")
        m = _MASTER.match(config.profile.spark.master)
        if not m:
            raise ConfigError(f"{config.profile.spark.master!r} is not a master this machine can run: expected "
                              f"spark://127.0.0.1:PORT (or localhost)", key=f"profiles.{config.profile_name}.spark.master")
        ports = config.kafka.ports
        if len(set(ports)) != len(ports):
            raise ConfigError(f"{config.kafka.bootstrap_servers!r} names a port twice: each node of the local "
                              f"cluster needs its own", key=f"profiles.{config.profile_name}.kafka.bootstrap_servers")
        self.config, self.settings = config, settings
        self.root = config.home / "cluster"
        self.master_host, self.master_port = "127.0.0.1", int(m.group(2))
        self._state = self._load_state()
        self.security = None
        if config.kafka.security is not None:

            # Shared by the nodes: one CA, one broker certificate, one broker password.
            self.security = BrokerSecurity(config.broker_home, config.kafka.security)

    # -- what it is made of ----------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    def _load_state(self) -> dict:
        """Cluster id, controller and web UI ports: chosen once, kept (a static quorum's voters
        must not move between restarts)."""
        try:
            state = json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        ports = self.config.kafka.ports
        if state.get("broker_ports") != ports or len(state.get("controller_ports", [])) != len(ports):
            # A spare few: a broker's port (not listening yet) may be among those free now.
            chosen = [p for p in free_ports(len(ports) + 4) if p not in ports]
            state = {"cluster_id": new_cluster_id(), "broker_ports": ports,
                     "controller_ports": chosen[:len(ports)], "master_ui_port": chosen[len(ports)]}
        return state

    def _save_state(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state, indent=1))
        tmp.replace(self.state_file)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"localhost:{p}" for p in self.config.kafka.ports)

    @property
    def master_url(self) -> str:
        return f"spark://{self.master_host}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.master_host}:{self._state['master_ui_port']}"

    def kafka_nodes(self) -> list[EmbeddedKafka]:
        ports, controllers = self._state["broker_ports"], self._state["controller_ports"]
        voters = {i + 1: c for i, c in enumerate(controllers)}
        return [EmbeddedKafka(self.root / f"kafka-{i + 1}", port=p, controller_port=controllers[i],
                              heap=self.settings.kafka_heap, node_id=i + 1, voters=voters,
                              cluster_id=self._state["cluster_id"], security=self.security)
                for i, p in enumerate(ports)]

    def leader(self, topic: str, partition: int) -> EmbeddedKafka:
        """The node that leads ``topic``'s ``partition`` now (as the cluster's metadata says)."""

        leader = admin(self.config).list_topics(topic, timeout=15).topics[topic].partitions[partition].leader
        if leader < 1:
            raise KafkaUnavailableError(f"{topic}[{partition}] has no leader now")
        return self.kafka_nodes()[leader - 1]

    def master(self) -> Managed:
        return Managed(self.root / "spark", "master")

    def workers(self) -> list[Managed]:
        return [Managed(self.root / "spark", f"worker-{i + 1}") for i in range(self.settings.spark_workers)]

    # -- up / down -------------------------------------------------------------------------

    def up(self, timeout: float = 180.0, say=print) -> None:
        """Start what is not running; wait until Kafka answers on every node and every worker
        has registered with the master. Idempotent."""
        deadline = time.monotonic() + timeout
        self._save_state()
        nodes = self.kafka_nodes()
        launched = [node for node in nodes if not node.is_running()]
        for node in launched:
            if port_open(node.port):
                raise PortInUseError(f"cannot start Kafka node {node.node_id} on {node.bootstrap}: the port is "
                                     f"already in use", node.port)
        # Each launch formats its storage first (a JVM of its own): side by side.
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            list(pool.map(EmbeddedKafka.launch, launched))
        # A node answers only once a quorum of voters runs: all are launched first.
        for node in nodes:
            node.wait_ready(_left(deadline))
        if self.security is not None:
            self.security.set_client_user(self.bootstrap)  # once the quorum is up: the password now
        say(f"kafka: {len(nodes)} nodes {'started' if launched else 'already running'} at {self.bootstrap}")
        self._start_spark(deadline, say)

    def _start_spark(self, deadline: float, say) -> None:
        master = self.master()
        if master.pid() is None:
            if port_open(self.master_port):
                raise PortInUseError(f"cannot start the Spark master on {self.master_url}: the port is already "
                                     f"in use", self.master_port)
            # A worker silent for 15 s (not 60) is dead: its cores go to the other workers sooner.
            master.start(self._spark_cmd("org.apache.spark.deploy.master.Master", "--host", self.master_host,
                                         "--port", str(self.master_port),
                                         "--webui-port", str(self._state["master_ui_port"])),
                         env=self._spark_env(), cwd=self.root)
        wait_for(lambda: port_open(self.master_port), _left(deadline), "the Spark master to listen", log=master)
        s = self.settings
        for i, worker in enumerate(self.workers()):
            if worker.pid() is None:
                work = self.root / "spark" / f"worker-{i + 1}-work"
                work.mkdir(parents=True, exist_ok=True)
                worker.start(self._spark_cmd("org.apache.spark.deploy.worker.Worker", "--host", self.master_host,
                                             "--cores", str(s.worker_cores), "--memory", s.worker_memory,
                                             "--work-dir", str(work), "--webui-port", str(free_port()),
                                             self.master_url),
                             env=self._spark_env(), cwd=work)
        wait_for(lambda: self.alive_workers() >= s.spark_workers, _left(deadline),
                 f"{s.spark_workers} Spark workers to register with the master", interval=0.5, log=self.workers()[-1])
        say(f"spark: master {self.master_url} with {s.spark_workers} workers ({s.worker_cores} core(s), "
            f"{s.worker_memory} each); web UI {self.master_ui}")

    def _spark_cmd(self, main: str, *args: str) -> list[str]:
        return [java_executable(), "-Xmx256m", f"-Dlog4j2.configurationFile={log4j_file()}",
                "-Dspark.worker.timeout=15", "-cp", str(spark_home() / "jars" / "*"), main, *args]

    def _spark_env(self) -> dict[str, str]:
        """The master's and workers' environment: this one without the repo on PYTHONPATH
        (executors get the code shipped with the job), Spark bound to loopback."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOGLAKE_UNDER_SPARK_SUBMIT")}
        # SPARK_SCALA_VERSION: the launcher that builds an executor's command looks for a source
        # build's directories otherwise (the wheel has none: "Cannot find any build directories");
        # the wheel's bin/spark-class sets it the same way.
        env.update({"SPARK_HOME": str(spark_home()), "SPARK_SCALA_VERSION": "2.13",
                    "SPARK_LOCAL_IP": self.master_host})
        return env

    def alive_workers(self) -> int:
        """Workers the master counts as alive (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def down(self, say=print) -> None:
        """Stop the workers, the master, then the Kafka nodes; each by its process group."""
        for worker in reversed(self.workers()):
            say(f"spark {worker.name}: {'stopped' if worker.stop() else 'not running'}")
        say(f"spark master: {'stopped' if self.master().stop() else 'not running'}")
        # All nodes at once: stopped one by one, the last ones wait for a quorum already gone.
        nodes = self.kafka_nodes()
        running = [node.is_running() for node in nodes]
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(EmbeddedKafka.stop, nodes))
        for node, was in zip(nodes, running):
            say(f"kafka node {node.node_id}: {'stopped' if was else 'not running'}")

    # -- status ----------------------------------------------------------------------------

    def pids(self) -> list[int]:
        found = [n.pid for n in self.kafka_nodes()] + [m.pid() for m in (self.master(), *self.workers())]
        return [p for p in found if p]

    def memory_bytes(self) -> int:
        """PSS of every process of the cluster (and what they started: executors)."""
        procs = set()
        for pid in self.pids():
            procs.update(descendants(pid))
        return pss_bytes(procs)

    def status_lines(self) -> tuple[bool, list[str]]:
        lines = [f"kafka bootstrap: {self.bootstrap}", f"spark master: {self.master_url}"]
        ok = True
        for node in self.kafka_nodes():
            pid = node.pid
            ok &= pid is not None
            lines.append(f"  kafka node {node.node_id:<14} {state_label(pid)}  localhost:{node.port}  (log {node.log_path})")
        master = self.master()
        pid = master.pid()
        ok &= pid is not None
        lines.append(f"  spark master {'':<12} {state_label(pid)}  web UI {self.master_ui}  (log {master.log_file})")
        alive = self.alive_workers() if pid else 0
        for worker in self.workers():
            wpid = worker.pid()
            ok &= wpid is not None
            lines.append(f"  spark {worker.name:<18} {state_label(wpid)}  (log {worker.log_file})")
        if pid:
            lines.append(f"  workers registered with the master: {alive} of {len(self.workers())}")
            ok &= alive >= len(self.workers())
        mem = self.memory_bytes()
        if mem:
            lines.append(f"  memory (PSS of every cluster process): {mem / 2**20:,.0f} MiB")
        return ok, lines



def _left(deadline: float) -> float:
    """Seconds to ``deadline`` (at least one: a last look after it passed)."""
    return max(1.0, deadline - time.monotonic())
