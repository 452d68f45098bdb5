"""The embedded schema registry: Apicurio Registry on this machine, Confluent's REST API.

``loglake registry start|stop|status`` (and ``loglake up``) run it for a profile whose
``registry.embedded`` is true, on ``registry.url``'s port; the suite and the benchmarks start
one on a free port (``loglake.testing.Lab``). Built by ``make setup`` from Maven Central
(``setup/pom-registry.xml``, ``python -m loglake.local.jars registry``). Its state (an H2
database file: subjects, versions, ids, compatibility rules) lives under
``<state>/registry/``, so ids survive a restart; its log is ``<state>/logs/registry.log``.

It counts as started once it serves what it stored (``answers``): the process started here holds
the port (during an outage the port is free, and another server may take it before the JVM
binds it), Apicurio's readiness (``/health/ready``) is UP and the Confluent API answers. With
this storage Apicurio opens the database and checks its schema before it opens the port, and
reads the database on every request: there is no later loading of what it holds to wait for
(measured: ``tests/integration/test_registry_restart.py``).

Clients use ``http://127.0.0.1:PORT/apis/ccompat/v7``, Apicurio's Confluent-compatible API.
Where Apicurio 2.4 differs from Confluent's registry: a subject's compatibility rule is NONE
until one is set (``PUT /config/{subject}``); a schema is looked up (a serializer with
``auto.register.schemas`` off) by its text exactly as registered. Its
``registry.ccompat.use-canonical-hash`` would match re-spaced text too, but it then hands
back the canonical form, whose record fields are sorted by name: records written in the
declared order would no longer decode with it. It stays off.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from loglake.core.errors import PortInUseError, ProcessError, SetupError
from loglake.core.paths import jar_dir, java_executable
from loglake.local import jars
from loglake.core.processes import Managed, port_open, started_on_free_port, wait_for

CCOMPAT = "/apis/ccompat/v7"


def runnable_jar(say=print) -> Path:
    """Apicurio Registry's runnable jar, built from Maven Central on first use (``make setup``
    leaves it out: the demo's datasets are JSON; ``make setup-test`` fetches it)."""
    jar = jar_dir("registry") / "quarkus-app" / "quarkus-run.jar"
    if not jar.is_file():  # (an image's read-only cache has it: never resolved again there)
        jars.ensure("registry", say)
    if not jar.is_file():
        raise SetupError(f"no schema registry under {jar.parent} after building it (Maven log: "
                         f"{jars.log_path('registry')})")
    return jar


class EmbeddedRegistry:
    """One Apicurio Registry on ``127.0.0.1:port`` with its state under ``home/"registry"``."""

    def __init__(self, home: Path, port: int = 8081, heap: str = "128m", host: str = "127.0.0.1"):
        self.home = Path(home).absolute()
        self.port, self.heap, self.host = port, heap, host
        self.data_dir = self.home / "registry"
        self.process = Managed(self.home, "registry")

    @classmethod
    def on_free_port(cls, home: Path, attempts: int = 3, timeout: float = 90.0) -> EmbeddedRegistry:
        """A started registry on a port free right now (on a fresh one when another process took
        it before the registry bound it)."""
        return started_on_free_port(lambda port: cls(home, port=port), lambda r: r.start(timeout=timeout), attempts)

    @property
    def url(self) -> str:
        """What a Confluent-API client (confluent-kafka's ``SchemaRegistryClient``) is given."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    @property
    def log_path(self) -> Path:
        return self.process.log_file

    def __repr__(self) -> str:
        return f"EmbeddedRegistry(home={str(self.home)!r}, url={self.url!r})"

    def command(self) -> list[str]:
        db = f"jdbc:h2:file:{self.data_dir / 'registry'};DB_CLOSE_ON_EXIT=FALSE"
        return [
            java_executable(), f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dquarkus.http.host={self.host}", f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.datasource.jdbc.url={db}",
            "-Dquarkus.datasource.jdbc.initial-size=1", "-Dquarkus.datasource.jdbc.min-size=1",
            "-Dquarkus.datasource.jdbc.max-size=10",
            "-Dquarkus.banner.enabled=false", "-Dquarkus.log.level=WARN",
            '-Dquarkus.log.category."io.apicurio".level=WARN', '-Dquarkus.log.category."io.sentry".level=ERROR',
            "-jar", str(runnable_jar()),
        ]

    def pid(self) -> int | None:
        return self.process.pid()

    def is_running(self) -> bool:
        return self.pid() is not None

    def answers(self, timeout: float = 2.0) -> bool:
        """The registry started here serves what it stored: its process holds the port, its
        readiness is UP and its Confluent API answers (200 on the list of subjects)."""
        return self.holds_port() and self.ready(timeout) and self._get(f"{self.url}/subjects", timeout) is not None

    def ready(self, timeout: float = 2.0) -> bool:
        """Apicurio's readiness (``/health/ready``) is UP: its storage initialised (the database
        opened, its schema checked), its database connections and its response times healthy."""
        body = self._get(f"http://127.0.0.1:{self.port}/health/ready", timeout)
        try:
            return body is not None and json.loads(body).get("status") == "UP"
        except (ValueError, AttributeError):
            return False

    def holds_port(self) -> bool:
        """The process started here listens on the port (not another server that took it)."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            sockets = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.AccessDenied:
            return True  # another user's process: what answers on its port is taken for it
        except psutil.Error:
            return False
        return any(s.status == psutil.CONN_LISTEN and s.laddr.port == self.port for s in sockets)

    @staticmethod
    def _get(url: str, timeout: float) -> bytes | None:
        """The body of a 200 answer to a GET of ``url``; None for any other answer or none."""
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.read() if r.status == 200 else None
        except (urllib.error.URLError, OSError):
            return None

    def start(self, timeout: float = 90.0) -> None:
        """Start it (a no-op when it runs) and wait until it serves what it stored (``answers``)."""
        if self.is_running():
            wait_for(self.answers, timeout, f"the schema registry at {self.url}", log=self.process)
            return
        if port_open(self.port):
            raise PortInUseError(f"the schema registry's port {self.port} is taken by another process", self.port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process.start(self.command())
        try:
            # Another server on the port is seen at once, not when the JVM gives up binding it (a
            # minute and more on a busy machine).
            wait_for(lambda: self.answers() or self._died() or self._port_taken(), timeout,
                     f"the schema registry at {self.url}", log=self.process)
        except ProcessError:
            self.stop()
            raise
        if not self.answers():
            tail = self.log_path.read_text(errors="replace")[offset:].strip().splitlines()[-15:]
            taken = port_open(self.port) or any(
                "Address already in use" in line or "Port already bound" in line for line in tail)
            self.stop()
            if taken:
                raise PortInUseError(f"the schema registry's port {self.port} was taken before it bound it", self.port)
            raise ProcessError(f"the schema registry exited at start; last lines of {self.log_path}:\n"
                               + "\n".join(tail))

    def _died(self) -> bool:
        return not self.is_running()

    def _port_taken(self) -> bool:
        """Another server listens on the port while the process started here does not (asked in
        this order: a port the process binds meanwhile is its own)."""
        return port_open(self.port) and not self.holds_port()

    def stop(self, timeout: float = 30.0) -> bool:
        return self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL (an outage, for the tests)."""
        self.process.kill()


def main(argv: list[str] | None = None) -> int:
    """``python -m loglake.local.apicurio``: the registry in the foreground (a container's
    process: docker/compose.yaml), its state under ``--home``."""
    import argparse
    import os

    ap = argparse.ArgumentParser(prog="python -m loglake.local.apicurio",
                                 description=main.__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True,
                    help="state directory (the registry's database under registry/)")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 in a container)")
    ap.add_argument("--heap", default="128m")
    args = ap.parse_args(argv)
    registry = EmbeddedRegistry(args.home, port=args.port, heap=args.heap, host=args.host)
    registry.data_dir.mkdir(parents=True, exist_ok=True)
    cmd = registry.command()
    os.execv(cmd[0], cmd)  # the JVM replaces this process: it is the container's
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
