"""A user's console holds loglake's words only: the JVM's warnings, Spark's log lines and
librdkafka's notices go to the log files under ``<state>/logs/``. (The Spark commands —
``batch``, ``query`` — are checked the same way in test_cli.py.)"""

from __future__ import annotations

import logging
import re
import subprocess
import time

import pytest

from loglake.core.config import load_config
from loglake.core.processes import free_port
from loglake.testing import write_conf

from loglake.testing import run_loglake
from tests.integration.test_cli import noise

pytestmark = pytest.mark.integration


def test_commands_without_spark_print_loglakes_words(make_config):
    config = make_config()
    console = []

    def run(*args, codes=(0,)) -> subprocess.CompletedProcess:
        r = run_loglake(config, *args)
        console.append(f"$ loglake {' '.join(args)}\n{r.stdout}{r.stderr}")
        assert r.returncode in codes, console[-1]
        assert not noise(r.stdout + r.stderr), console[-1]
        return r

    r = run("produce", "job_views", "--count", "300", "--bad-fraction", "0.1", "--seed", "3")
    good = int(re.search(r"\((\d+) good, \d+ malformed\)", r.stdout).group(1))
    run("kafka", "status")
    run("speed", "status", "job_views")
    r = run("status", codes=(0, 1))  # 1: the platform (streams, Airflow) is not running
    assert "job_views" in r.stdout
    assert good == 270


def test_librdkafka_lines_go_to_the_loglake_kafka_logger_not_stderr(tmp_path, capfd):
    """A producer that cannot connect: librdkafka's complaints (written by C code straight to
    fd 2 unless routed) arrive as records of ``loglake.kafka``."""
    from confluent_kafka import Producer

    dead = load_config(write_conf(tmp_path, f"localhost:{free_port()}"), home=tmp_path / "state")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logging.getLogger("loglake.kafka").addHandler(keep)
    try:
        producer = Producer(dead.kafka_client_conf())
        deadline = time.monotonic() + 20
        while not records and time.monotonic() < deadline:
            producer.poll(0.2)
        producer.flush(0)
        del producer
    finally:
        logging.getLogger("loglake.kafka").removeHandler(keep)
    out, err = capfd.readouterr()
    assert records, "no librdkafka log line reached loglake.kafka"
    assert any("Connect to" in r.getMessage() or "Connection refused" in r.getMessage() for r in records), \
        [r.getMessage() for r in records]
    assert not noise(out + err), out + err
