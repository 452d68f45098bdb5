"""Session-scoped services for the whole suite: one Kafka broker, one Spark session.

Set ``LOGLAKE_TEST_BOOTSTRAP=host:port`` to run against an existing cluster; otherwise the
suite starts its own embedded broker on a free port with its own state directory, so it
never collides with a running ``make up``. Each test gets its own topics (through its own
conf/ directory), tables, checkpoints and consumer groups.
"""

from __future__ import annotations

import logging
import os

import pytest

from loglake import testing
from loglake.core.config import Config, load_config
from loglake.testing import write_conf

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
# The Spark JVMs the suite starts (spark-submit, the CLI, Airflow's tasks) are short-lived and
# their data small: the C1 compiler only (about a quarter less wall time for a small job on this
# machine, and no C2 threads taking the other worker's core). Benchmarks run the JVM as users do.
testing.JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory) -> str:
    external = os.environ.get("LOGLAKE_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    from loglake.local.broker import EmbeddedKafka

    kafka = EmbeddedKafka.on_free_ports(tmp_path_factory.mktemp("kafka-home"), heap="512m")
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def spark_config(tmp_path_factory) -> Config:
    # The session's settings only; tests that need Kafka build their own Config.
    root = tmp_path_factory.mktemp("spark-session")
    # The in-process session lives as long as the worker and runs most of its Spark work:
    # there the optimising compiler pays back (java_options="" keeps the JVM's default).
    return load_config(write_conf(root, "localhost:9", java_options=""), home=root / "state")


@pytest.fixture(scope="session")
def spark(spark_config):
    from loglake.jobs.session import get_spark

    session = get_spark(spark_config, "loglake-tests")
    yield session
    session.stop()
    # py4j logs its connections' closing from __del__ at interpreter exit, after pytest
    # closed the streams its handlers write to ("--- Logging error ---").
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def make_config(tmp_path, kafka_bootstrap):
    """Build a per-test Config (own conf dir, topics, state dir); kwargs go to write_conf."""
    def make(**kwargs) -> Config:
        conf = write_conf(tmp_path, kafka_bootstrap, **kwargs)
        return load_config(conf, home=tmp_path / "state")
    return make
