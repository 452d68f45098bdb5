"""A user's console holds loglake's words only: the JVM's warnings, Spark's log lines and
librdkafka's notices go to the log files under ``<state>/logs/``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time

import pytest

from loglake.config import load_config
from loglake.processes import free_port
from loglake.sandbox import write_conf

pytestmark = pytest.mark.integration

# What must never reach the console (each seen there before, in `loglake demo`).
NOISE = ["Using incubator modules", "WARN ", "Stage ", "Truncated the string representation",
         "Coordinator load in progress", "Traceback"]


def loglake(config, *args, timeout=600) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)}
    return subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def noise(text: str) -> list[str]:
    """The lines of ``text`` that are not loglake's own words."""
    return [line for line in text.splitlines()
            if line.startswith("%") or any(word in line for word in NOISE)]


def test_commands_print_loglakes_words_and_log_the_rest(make_config):
    config = make_config()
    console = []

    def run(*args, codes=(0,)) -> subprocess.CompletedProcess:
        r = loglake(config, *args)
        console.append(f"$ loglake {' '.join(args)}\n{r.stdout}{r.stderr}")
        assert r.returncode in codes, console[-1]
        assert not noise(r.stdout + r.stderr), console[-1]
        return r

    r = run("produce", "job_views", "--count", "300", "--bad-fraction", "0.1", "--seed", "3")
    good = int(re.search(r"\((\d+) good, \d+ malformed\)", r.stdout).group(1))
    run("kafka", "status")
    run("speed", "status", "job_views")
    r = run("batch", "job_views")  # two spark-submit jobs: the batch, then the quality gate
    assert f"batch job_views: {good} rows to batch.job_views" in r.stdout
    r = run("query", "SELECT count(*) AS n FROM job_views", "--format", "csv")
    assert r.stdout == f"n\n{good}\n"
    assert r.stderr == ""
    r = run("status", codes=(0, 1))  # 1: the platform (streams, Airflow) is not running
    assert "job_views" in r.stdout

    # The logs keep what the console does not.
    logs = config.home / "logs"
    jobs = sorted((logs / "jobs").glob("*.log"))
    assert {p.name.split("-")[0] for p in jobs} >= {"batch", "quality"}, jobs
    assert all("incubator" in p.read_text() for p in jobs), jobs
    cli_log = (logs / "cli.log").read_text()
    assert "Using incubator modules" in cli_log  # the query's JVM
    assert "loglake.spark: starting Spark (loglake-query)" in cli_log


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
