"""EmbeddedKafka against a real broker: data survives a restart, start() is idempotent.

Needs the kafka jars (`python -m loglake.local.jars`) and Java; skipped without the jars.
"""

from __future__ import annotations

import logging
import os
import socket

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from loglake.local.broker import EmbeddedKafka  # noqa: E402
from loglake.core.errors import PortInUseError  # noqa: E402
from loglake.core.processes import free_port  # noqa: E402
from loglake.core.paths import jar_dir  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def kafka(tmp_path):
    if not any(jar_dir("kafka").glob("*.jar")):
        pytest.skip(f"no kafka jars in {jar_dir('kafka')}: run `python -m loglake.local.jars`")
    port = free_port()
    controller_port = free_port()
    while controller_port == port:
        controller_port = free_port()
    broker = EmbeddedKafka(tmp_path / "home", port=port, controller_port=controller_port)
    yield broker
    broker.stop()  # also after a failure: never leave a JVM behind


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-offsets", "enable.auto.commit": False})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    # assign() rather than subscribe(): no consumer-group round, nothing committed.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-read", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    try:
        for _ in range(200):
            if len(values) >= expected:
                break
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
    finally:
        c.close()
    return values


# make test-long only: a fault scenario (the broker stopped and started again); the embedded broker's start
# and status are in make test (the tests below and test_cli).
@pytest.mark.long
def test_records_survive_restart(kafka):
    kafka.start()
    topic = "it-restart"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)

    errors = []
    # Its client log goes to Python's logging: the broker restarts under it below.
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "logger": logging.getLogger("tests.kafka")})
    for i in range(10):
        producer.produce(topic, key=str(i), value=f"record-{i}",
                         on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0 and errors == []
    assert sum(_end_offsets(kafka.bootstrap, topic, 3)) == 10

    kafka.stop()
    assert not kafka.is_running() and not kafka.pid_path.exists()
    kafka.start()

    ends = _end_offsets(kafka.bootstrap, topic, 3)
    assert sum(ends) == 10, ends
    assert sum(1 for e in ends if e) > 1  # keys spread over partitions, so all 3 count
    values = _read_all(kafka.bootstrap, topic, 3, expected=10)
    assert sorted(values) == sorted(f"record-{i}".encode() for i in range(10))


def test_start_is_idempotent_and_stale_pid_is_ignored(kafka):
    # A pid file naming a live process that is not our JVM (this Python) is stale.
    kafka.pid_path.parent.mkdir(parents=True)
    kafka.pid_path.write_text(f"{os.getpid()}\n")
    assert not kafka.is_running()
    assert not kafka.pid_path.exists()
    kafka.stop()  # no-op when not running

    kafka.start()
    pid = kafka.pid
    assert pid is not None
    kafka.start()
    assert kafka.pid == pid
    # Another handle on the same home (as a later CLI call would make) sees the same broker.
    other = EmbeddedKafka(kafka.home, port=kafka.port, controller_port=kafka.controller_port)
    assert other.is_running() and other.pid == pid
    other.start()
    assert other.pid == pid

    other.stop()
    assert not kafka.is_running()
    kafka.stop()


def _taken_port() -> socket.socket:
    """A port bound by another socket but not listening: a connect finds it closed, as a port
    taken between the choice of a free port and the broker's bind looks (the race CI hit)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


def test_a_controller_port_taken_before_the_bind_is_replaced_by_a_fresh_one(tmp_path):
    taken = _taken_port()
    broker = EmbeddedKafka(tmp_path / "home", port=free_port(), controller_port=taken.getsockname()[1])
    try:
        broker.start()
        assert broker.answers() and broker.controller_port != taken.getsockname()[1]
    finally:
        broker.stop()
        taken.close()


def test_a_client_port_taken_is_named_and_on_free_ports_tries_fresh_ones(tmp_path):
    taken = _taken_port()
    port = taken.getsockname()[1]
    try:
        broker = EmbeddedKafka(tmp_path / "a", port=port)
        with pytest.raises(PortInUseError, match=f"localhost:{port} is already in use"):
            broker.start()
        assert not broker.is_running()
        started = EmbeddedKafka.on_free_ports(tmp_path / "b", ports=iter([port, free_port()]))
        try:
            assert started.port != port and started.answers()
        finally:
            started.stop()
    finally:
        taken.close()
