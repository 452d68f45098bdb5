"""A single-node Kafka (KRaft, broker and controller in one JVM) for local runs and tests.

The broker runs from the jars ``python -m loglake.local.jars`` resolves (``jars("kafka")``),
as a detached process (its own session), so it outlives the Python process that started
it; any later process can find it again through the pid file and stop it. Everything
lives under ``home``::

    home/kafka/server.properties, log4j2.xml, cluster.id   written by us
    home/kafka/data/                                       the log (survives restarts)
    home/kafka/security/                                   with ``security``: CA, certificate, the
                                                           broker's own password (loglake.kafka.security)
    home/logs/kafka.log                                    JVM stdout/stderr + log4j2
    home/run/kafka.pid
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from loglake.core.errors import PortInUseError, ProcessError
from loglake.core.paths import CDS_QUIET, cache_home, jars, java_executable, java_version
from loglake.core.processes import command_line, free_port, port_open, started_on_free_port
from loglake.local.broker_files import format_storage, write_config

if TYPE_CHECKING:
    from loglake.kafka.security import BrokerSecurity

_START_MARK = "=== loglake: starting"  # written to kafka.log before each start
_BIND_FAILED = re.compile(r"failed to bind to [^\s:]+:(\d+)")
_ROTATE_BYTES = 50 * 1024 * 1024  # kafka.log is moved to kafka.log.1 at start beyond this


@functools.lru_cache(maxsize=1)
def kafka_archive() -> Path:
    """Where the embedded broker's class-data archive lives: ``<cache>/cds/kafka-<key>.jsa``,
    the key from the Java version and Kafka's jars (paths, sizes, modification times: they
    live in the cache, where every clone finds them)."""

    parts = [java_version()]
    for jar in jars("kafka"):
        stat = jar.stat()
        parts.append(f"{jar} {stat.st_size} {stat.st_mtime_ns}")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_home() / "cds" / f"kafka-{key}.jsa"


def jvm_options() -> list[str]:
    """The broker's (and its storage tool's) JVM options beside the heap: the class-data archive
    of Kafka's jars when setup made one (``kafka_archive``, made by ``loglake.local.cds``: a start in about
    two thirds of the CPU), then ``$KAFKA_OPTS``, as Kafka's own scripts take it (the suite
    sets the C1 compiler and the serial collector there: its brokers live minutes)."""

    archive = kafka_archive()
    options = [f"-XX:SharedArchiveFile={archive}", *CDS_QUIET.split()] if archive.exists() else []
    return options + shlex.split(os.environ.get("KAFKA_OPTS", ""))


class EmbeddedKafka:
    """One KRaft broker+controller on ``localhost:port`` with its data under ``home/"kafka"``."""

    def __init__(self, home: Path, port: int = 9092, controller_port: int | None = None, heap: str = "512m",
                 *, node_id: int = 1, voters: dict[int, int] | None = None, cluster_id: str | None = None,
                 security: BrokerSecurity | None = None, java_options: list[str] | None = None):
        """``voters`` (node id → controller port) and ``cluster_id`` make this one node of a
        cluster (``loglake.local.cluster``); without them it is a cluster of its own. ``security``:
        SASL/SCRAM over TLS on the client port (``loglake.kafka.security``) instead of plaintext.
        ``java_options``: the JVM's options beside the heap instead of ``jvm_options()``."""
        self.home = Path(home).absolute()  # the pid check matches this path in the command line
        self.port = port
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id
        # The controller listener is internal (nothing connects to it from outside the JVM):
        # any free port will do, and start() takes another one when it was taken meanwhile.
        self.controller_port = controller_port if controller_port is not None else free_port()
        self.heap = heap
        self.security = security
        self.java_options = java_options
        self.kafka_dir = self.home / "kafka"
        self.data_dir = self.kafka_dir / "data"
        self.props_path = self.kafka_dir / "server.properties"
        self.log4j_path = self.kafka_dir / "log4j2.xml"
        self.cluster_id_path = self.kafka_dir / "cluster.id"
        self.log_path = self.home / "logs" / "kafka.log"
        self.pid_path = self.home / "run" / "kafka.pid"
        self._proc: subprocess.Popen | None = None  # set when this object started the JVM

    @classmethod
    def on_free_ports(cls, home: Path, heap: str = "512m", attempts: int = 3, timeout: float = 60.0,
                      ports=None, security: BrokerSecurity | None = None,
                      java_options: list[str] | None = None) -> EmbeddedKafka:
        """A started broker on ports free right now (tests, benchmarks, soak). A free port can
        be taken by another process before the broker binds it: then again on fresh ones, up to
        ``attempts`` times. ``ports`` (an iterator of client ports) replaces the OS's choice."""
        return started_on_free_port(lambda port: cls(home, port=port, heap=heap, security=security,
                                                     java_options=java_options),
                                    lambda kafka: kafka.start(timeout=timeout), attempts, ports)

    def _java_options(self) -> list[str]:
        return jvm_options() if self.java_options is None else self.java_options

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.port}"

    def __repr__(self) -> str:
        return f"EmbeddedKafka(home={str(self.home)!r}, bootstrap={self.bootstrap!r})"

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- state ----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The broker's pid if it is running (stale pid files are removed)."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        # A pid is ours only if that process is our JVM: pids get reused after a crash
        # or reboot, and we must never signal an unrelated process.
        cmd = command_line(pid)
        if cmd and "kafka.Kafka" in cmd and str(self.props_path) in cmd:
            return pid
        self.pid_path.unlink(missing_ok=True)
        return None

    def is_running(self) -> bool:
        return self.pid is not None

    def answers(self, timeout: float = 2.0) -> bool:
        """True when the broker accepts connections and (with confluent_kafka) returns metadata
        in which it leads every partition."""
        if not port_open(self.port, timeout=min(timeout, 0.5)):
            return False
        # log_level 0: a broker still starting makes librdkafka print connection errors.
        admin = AdminClient(self.admin_conf(log_level=0))
        try:
            md = admin.list_topics(timeout=timeout)
        except Exception:
            return False
        # After a restart the broker answers before it leads its partitions again (they
        # report no leader, or an error, while the logs load): ready only once it leads them all.
        if not md.brokers or not all(p.error is None and p.leader >= 0
                                     for t in md.topics.values() for p in t.partitions.values()):
            return False
        # Metadata can name the leader before its log is loaded (a ListOffsets then answers
        # NOT_LEADER_FOR_PARTITION): ready once every partition answers one.

        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, m in md.topics.items() for p in m.partitions}
        if not wanted:
            return True
        try:
            for fut in admin.list_offsets(wanted, request_timeout=timeout).values():
                fut.result(timeout=timeout)
        except Exception:
            return False
        return True

    def admin_conf(self, **extra) -> dict:
        """librdkafka settings that reach this broker (as its own user when it is secured)."""
        if self.security is not None:
            return self.security.admin_conf(self.bootstrap, **extra)
        return {"bootstrap.servers": self.bootstrap, **extra}

    def log_tail(self, n: int = 30) -> str:
        """The last ``n`` lines of kafka.log written since the latest start."""
        if not self.log_path.exists():
            return f"(no log at {self.log_path})"
        return "\n".join(self._since_start()[-n:])

    def _since_start(self) -> list[str]:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        starts = [i for i, line in enumerate(lines) if line.startswith(_START_MARK)]
        return lines[starts[-1] if starts else 0:]

    def _port_taken(self) -> int | None:
        """The port the broker failed to bind in its latest start, if that is why it exited."""
        for line in self._since_start():
            m = _BIND_FAILED.search(line)
            if m:
                return int(m.group(1))
        return None

    def _first_error(self) -> str:
        """Kafka's first ERROR line since the latest start (its cause), else the log's last lines."""
        lines = self._since_start()
        for i, line in enumerate(lines):
            if " ERROR " in line:
                cause = next((c.strip() for c in lines[i + 1:] if c.startswith("Caused by:")), "")
                return f"its error: {line.strip()}" + (f"\n  {cause}" if cause else "")
        return f"last lines:\n{self.log_tail()}"

    # -- start / stop ---------------------------------------------------------------

    def start(self, timeout: float = 60.0, attempts: int = 3) -> None:
        """Start the broker and wait until it answers a metadata request. Idempotent.

        The client port is the broker's address: taken by another process, it is a
        ``PortInUseError`` naming it. The controller port is internal: taken (between the
        choice of a free port and the JVM's bind, by any process's outgoing connection), the
        broker starts again on a fresh one, up to ``attempts`` times."""
        deadline = time.monotonic() + timeout
        if self.is_running():
            self._wait_ready(deadline, timeout)  # perhaps started a moment ago elsewhere
            self._set_users()
            return
        for attempt in range(1, attempts + 1):
            if port_open(self.port):
                raise PortInUseError(f"cannot start Kafka on {self.bootstrap}: localhost:{self.port} is already "
                                     f"in use", self.port)
            if port_open(self.controller_port):
                self.controller_port = free_port()
            try:
                self._start_once(deadline, timeout)
                self._set_users()
                return
            except PortInUseError as e:
                if e.port != self.controller_port or attempt == attempts:
                    raise
                self.controller_port = free_port()

    def _set_users(self) -> None:
        """A secured broker: the client user's SCRAM credential, with the password configured now."""
        if self.security is not None:
            self.security.set_client_user(self.bootstrap)

    def _start_once(self, deadline: float, timeout: float) -> None:
        self.launch()
        try:
            self._wait_ready(deadline, timeout)
        except ProcessError:
            self.stop(timeout=5)
            raise

    def launch(self) -> None:
        """Start the JVM without waiting for it to answer (the nodes of a cluster answer only
        once a quorum of them runs); ``start`` waits."""
        java = java_executable()
        classpath = os.pathsep.join(str(j) for j in jars("kafka"))
        write_config(self)
        if not (self.data_dir / "meta.properties").exists():
            format_storage(self, java, classpath)
        elif self.security is not None and not self.security.formatted.exists():
            raise ProcessError(f"the Kafka data in {self.data_dir} was formatted without loglake's SCRAM user for "
                               f"this broker (by a plaintext profile, or before {self.security.directory} was "
                               f"deleted): a secured broker needs a state directory of its own (LOGLAKE_HOME)")

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_path.exists() and self.log_path.stat().st_size > _ROTATE_BYTES:
            self.log_path.replace(self.log_path.with_suffix(".log.1"))
        cmd = [
            java, f"-Xmx{self.heap}", *self._java_options(), "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.log4j_path}",
            # Log4j's own shutdown hook would race Kafka's and drop the shutdown log.
            "-Dlog4j2.shutdownHookEnabled=false",
            "-cp", classpath, "kafka.Kafka", str(self.props_path),
        ]
        with self.log_path.open("a") as log:
            log.write(f"\n{_START_MARK} Kafka on {self.bootstrap} at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n")
            log.flush()
            # New session: Ctrl-C in the caller's terminal does not reach the broker, and
            # stop() can signal the JVM's whole process group.
            self._proc = subprocess.Popen(
                cmd, cwd=self.kafka_dir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        tmp = self.pid_path.with_suffix(".tmp")
        tmp.write_text(f"{self._proc.pid}\n")
        tmp.replace(self.pid_path)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the broker answers (after ``launch``)."""
        self._wait_ready(time.monotonic() + timeout, timeout)

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                taken = self._port_taken()
                if taken is not None:
                    raise PortInUseError(f"cannot start Kafka on {self.bootstrap}: localhost:{taken} is already in use "
                                         f"(log: {self.log_path})", taken)
                raise ProcessError(
                    f"Kafka exited with code {self._proc.returncode} while starting "
                    f"(log: {self.log_path}); {self._first_error()}"
                )
            if self._proc is None and not self.is_running():
                raise ProcessError(f"Kafka (pid file {self.pid_path}) died while starting; last lines:\n{self.log_tail()}")
            left = deadline - time.monotonic()
            if self.answers(timeout=max(0.5, min(2.0, left))):
                return
            if time.monotonic() >= deadline:
                raise ProcessError(
                    f"Kafka did not answer on {self.bootstrap} within {timeout:.0f} s "
                    f"(log: {self.log_path}); last lines:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the broker's process group; SIGKILL after ``timeout``. No-op if not running."""
        pid = self.pid
        if pid is None:
            if self._proc is not None:
                self._proc.poll()  # reap our child if someone else stopped it
                self._proc = None
            return
        # start_new_session made the JVM a group leader; signal the group so nothing lingers.
        try:
            kill = os.killpg if os.getpgid(pid) == pid else os.kill
            kill(pid, signal.SIGTERM)  # Kafka's shutdown hook: controlled shutdown, flushes logs
            if not self._wait_exit(pid, timeout):
                kill(pid, signal.SIGKILL)
                if not self._wait_exit(pid, 10):
                    raise ProcessError(f"Kafka pid {pid} survived SIGKILL")
        except ProcessLookupError:
            pass  # exited between the check and the signal
        self.pid_path.unlink(missing_ok=True)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no controlled shutdown, no flush). No-op if not running."""
        pid = self.pid
        if pid is None:
            return
        try:
            (os.killpg if os.getpgid(pid) == pid else os.kill)(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not self._wait_exit(pid, 10):
            raise ProcessError(f"Kafka pid {pid} survived SIGKILL")
        self.pid_path.unlink(missing_ok=True)
        self._proc = None

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout)  # reaps our child, so it does not linger as a zombie
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while command_line(pid) is not None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

