"""The unit tier starts no JVM and no broker: the suite's service fixtures are refused here."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap():
    pytest.fail("a unit test asked for a Kafka broker: it belongs in tests/integration")


@pytest.fixture(scope="session")
def spark():
    pytest.fail("a unit test asked for a Spark session: it belongs in tests/integration")


@pytest.fixture(scope="session")
def s3_gateway():
    pytest.fail("a unit test asked for an S3 server: it belongs in tests/integration")
