"""Session-scoped services for the whole suite: one Kafka broker, one Spark session.

Set ``LOGLAKE_TEST_BOOTSTRAP=host:port`` to run against an existing cluster; otherwise the
suite starts its own embedded broker on a free port with its own state directory, so it
never collides with a running ``make up``. Both live in one ``loglake.testing.Lab``, each
started when a test first asks for it. Each test gets its own topics (through its own
conf/ directory), tables, checkpoints and consumer groups.
"""

from __future__ import annotations

import logging
import os

import pytest

from loglake import testing
from loglake.core.config import Config
from loglake.testing import Lab

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
# The Spark JVMs the suite starts (spark-submit, the CLI, Airflow's tasks) are short-lived and
# their data small: the C1 compiler only (about a quarter less wall time for a small job on this
# machine, and no C2 threads taking the other worker's core). Benchmarks run the JVM as users do.
testing.conf.JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
# Each test's datasets on 2 partitions (the repo's job_views has 6, company_ceos 3): more than
# one still, a third of job_views' Spark tasks and Delta files per step. Four integration files in one
# process: 347 s against 401-428 s with the repo's counts (CHANGELOG.md, 2026-11-29).
testing.conf.PARTITIONS = 2
# Its brokers likewise (each lives a test or a worker's run, small topics): C1 and the serial
# collector, in KAFKA_OPTS as Kafka's own scripts take it (loglake.local.broker.jvm_options); the
# CLI's and Airflow's brokers inherit it. About 45% less CPU per broker start (CHANGELOG.md).
os.environ.setdefault("KAFKA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


# ``--dist loadfile`` (``make test``), with one change: the files that run a whole Airflow (the
# system tier) are one unit, run first and one after another on one worker, while the other
# worker takes the integration files. Two Airflows side by side on two cores (eight pollers,
# their spark-submits) slowed both, and an api-server then met SQLite's lock. (xdist's own
# ``--dist loadgroup`` marks groups by a node id suffix that pytest 9's node ids no longer carry.)
TIER_ORDER = ("tests/system/", "tests/integration/", "tests/reliability/")  # then the rest: unit
SERIAL_TIER = TIER_ORDER[0]


def _load_file(config) -> bool:
    return config.getvalue("dist") == "loadfile"


def pytest_xdist_make_scheduler(config, log):
    if not _load_file(config):
        return None
    from xdist.scheduler import LoadFileScheduling

    # Units in collection order (below: the system tier, then the integration files, the unit
    # tests last to fill the gaps), not xdist's default of the most tests first, which starts
    # with the many small parametrized unit tests and leaves the longest unit for later.
    config.option.loadscopereorder = False

    class SystemTierSerial(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SERIAL_TIER if nodeid.startswith(SERIAL_TIER) else super()._split_scope(nodeid)

    return SystemTierSerial(config, log)


def tier_rank(nodeid: str) -> int:
    return next((i for i, tier in enumerate(TIER_ORDER) if nodeid.startswith(tier)), len(TIER_ORDER))


def pytest_configure_node(node):
    # Workers see ``dist`` as "no": the controller tells them whether its scheduler is the one above.
    node.workerinput["loglake_tier_order"] = _load_file(node.config)


def pytest_collection_modifyitems(config, items):
    # An xdist worker under the scheduler above: it hands out units in this order.
    if getattr(config, "workerinput", {}).get("loglake_tier_order"):
        items.sort(key=lambda item: tier_rank(item.nodeid))


def pytest_terminal_summary(terminalreporter, config):
    """Beside ``--durations``' slowest tests, the slowest files (setup, call and teardown of
    every test summed, as each worker ran them): what the 30-minute budget of ``make test``
    is spent on, and where a cut would count (docs/testing.md)."""
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) in ("setup", "call", "teardown") and getattr(report, "nodeid", ""):
                path = report.nodeid.split("::", 1)[0]
                per_file[path] = per_file.get(path, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
    if len(per_file) < 2:
        return
    total = sum(per_file.values())
    terminalreporter.write_sep("=", f"slowest files (all {len(per_file)}: {total / 60:.1f} worker-minutes)")
    for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}s {100 * seconds / total:5.1f}%  {path}")


@pytest.fixture(scope="session")
def services(tmp_path_factory) -> Lab:
    """The suite's broker and Spark session; stopped at the end of the session."""
    lab = Lab(tmp_path_factory.mktemp("services"), os.environ.get("LOGLAKE_TEST_BOOTSTRAP"), heap="512m",
              app_name="loglake-tests")
    yield lab
    lab.close()
    # py4j logs its connections' closing from __del__ at interpreter exit, after pytest
    # closed the streams its handlers write to ("--- Logging error ---").
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def kafka_bootstrap(services) -> str:
    return services.bootstrap


@pytest.fixture(scope="session")
def registry_url(services) -> str:
    """The suite's schema registry (Apicurio, Confluent API), started on first use."""
    return services.registry_url


@pytest.fixture(scope="session")
def spark_config(services) -> Config:
    # The session's settings only; tests that need Kafka build their own Config.
    return services.session_config


@pytest.fixture(scope="session")
def spark(services):
    return services.spark()


@pytest.fixture(scope="session")
def s3_gateway(tmp_path_factory):
    """The suite's S3-compatible store, a ``loglake.local.versitygw.Gateway``: versitygw (built by
    ``make setup``) on a free loopback port, started when a test first asks for it, stopped at the
    end of the session. ``endpoint``, ``access_key``, ``secret_key``, ``client()``,
    ``create_bucket(name)``; a lake's ``lake.object_store`` block is
    ``settings(write_credentials_file(path))``. Each test makes its own bucket."""
    from loglake.local.versitygw import Gateway  # here: boto3 only for the tests that use the store

    with Gateway.on_free_port(tmp_path_factory.mktemp("s3")) as gateway:
        yield gateway


@pytest.fixture
def s3_lake(tmp_path, s3_gateway) -> dict:
    """A profile's ``lake`` section on a bucket of its own of the suite's store (``make_config(lake=s3_lake)``)."""
    import uuid

    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    s3_gateway.create_bucket(bucket)
    store = s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "s3-credentials"))
    return {"root": f"s3a://{bucket}/lake", "checkpoints": f"s3a://{bucket}/checkpoints", "object_store": store}


@pytest.fixture
def store_config(tmp_path, s3_lake) -> Config:
    """A config with no broker whose lake is ``s3_lake`` (the leases, the metrics' series)."""
    return testing.make_config(tmp_path, testing.NO_BROKER, lake=s3_lake)


@pytest.fixture
def make_config(tmp_path, kafka_bootstrap):
    """Build a per-test Config (own conf dir, topics, state dir); kwargs go to write_conf."""
    def make(**kwargs) -> Config:
        return testing.make_config(tmp_path, kafka_bootstrap, **kwargs)
    return make
