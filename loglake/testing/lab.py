"""A lab: an embedded broker, a Spark session and fresh configs under one directory.

The test suite (its session-wide services, tests/conftest.py), the benchmarks
(``bench.harness.Harness``) and the soak scenarios each work in one. What a lab starts lives
under its ``root`` and on ports free when it started, so it never touches the user's topics,
tables or a running ``make up``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from loglake.core.config import Config
from loglake.jobs.session import get_spark
from loglake.local.broker import EmbeddedKafka
from loglake.testing.conf import NO_BROKER, make_config


def start_broker(home: Path, heap: str = "512m") -> EmbeddedKafka:
    """A started embedded broker with its state under ``home``, on ports free right now (on
    fresh ones when another process takes one first); the caller stops it."""
    return EmbeddedKafka.on_free_ports(home, heap=heap)


class Lab:
    """A broker, a Spark session and fresh configs (own conf dir, topics, state) under ``root``.

    ``bootstrap`` names a running broker; without it the lab starts its own under ``root`` on
    first use (``heap``). ``spark`` is the caller's session; without it the lab starts one on
    first use (``app_name``; the JVM's output goes to ``spark_log`` when given).
    ``conf_defaults`` holds ``write_conf`` keyword arguments every config of the lab starts
    from (a key given to ``config`` replaces its default). ``close`` stops what the lab started.
    """

    def __init__(self, root: Path, bootstrap: str | None = None, spark=None, *, heap: str = "512m",
                 app_name: str = "loglake-lab", spark_log: Path | None = None, conf_defaults: dict | None = None):
        self.root = Path(root)
        self.heap, self.app_name, self.spark_log = heap, app_name, spark_log
        self.conf_defaults = conf_defaults or {}
        self._bootstrap = bootstrap
        self._kafka: EmbeddedKafka | None = None
        self._registry = None  # loglake.local.apicurio.EmbeddedRegistry, started on first use
        self._spark = spark
        self._owns_spark = False
        self._n = 0

    @property
    def bootstrap(self) -> str:
        """The broker's address (the lab's own broker starts on first use)."""
        if self._bootstrap is None:
            self._kafka = start_broker(self.root / "kafka-home", self.heap)
            self._bootstrap = self._kafka.bootstrap
        return self._bootstrap

    @property
    def registry_url(self) -> str:
        """The URL (Confluent API) of the lab's schema registry, started on first use."""
        if self._registry is None:
            from loglake.local.apicurio import EmbeddedRegistry

            self._registry = EmbeddedRegistry.on_free_port(self.root / "registry-home")
        return self._registry.url

    @property
    def registry(self):
        """The lab's embedded schema registry (a scenario's, to stop and start again)."""
        self.registry_url
        return self._registry

    def config(self, name: str | None = None, bootstrap: str | None = None, **conf_kwargs) -> Config:
        """A config of its own in ``root/<name>`` (conf dir, topics, state dir; a fresh name
        without one) on the lab's broker or on ``bootstrap``; ``conf_kwargs`` go to ``write_conf``."""
        if name is None:
            self._n += 1
            name = f"lab-{self._n}"
        return make_config(self.root / name, bootstrap or self.bootstrap, **{**self.conf_defaults, **conf_kwargs})

    @functools.cached_property
    def session_config(self) -> Config:
        """The settings the lab's own Spark session starts with when it is given none. No broker;
        the JVM's default compiler whatever ``conf.JAVA_OPTIONS`` says: the session lives as long
        as the lab, so the optimising compiler's work pays back."""
        return self.config("spark-session", NO_BROKER, java_options="")

    def spark(self, config: Config | None = None):
        """The lab's Spark session: the caller's, else one started now with ``config``'s Spark
        settings (``session_config``'s without one)."""
        if self._spark is None:
            from pyspark.sql import SparkSession  # deferred: heavy, and only a lab running Spark in-process needs it

            # get_spark hands out a session already active in this process: not the lab's to stop.
            self._owns_spark = SparkSession.getActiveSession() is None
            self._spark = get_spark(config or self.session_config, self.app_name, log_file=self.spark_log)
        return self._spark

    def own_broker(self, heap: str = "512m") -> EmbeddedKafka:
        """A started broker of its own under ``root`` (a scenario's, to kill and restart); the
        caller stops it."""
        self._n += 1
        return start_broker(self.root / f"kafka-{self._n}", heap)

    def stop_spark(self) -> None:
        """Stop the lab's own session (before a step that needs the cores for other processes)."""
        if self._owns_spark:
            self._spark.stop()
            self._spark, self._owns_spark = None, False

    def close(self) -> None:
        """Stop the Spark session and the broker the lab started (not the caller's)."""
        self.stop_spark()
        if self._registry is not None:
            self._registry.stop()
            self._registry = None
        if self._kafka is not None:
            self._kafka.stop()
            self._kafka, self._bootstrap = None, None
