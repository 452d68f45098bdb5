"""Spark sessions with the Kafka connector and Delta Lake, in-process or under spark-submit."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from loglake.core.config import Config
from loglake.jobs.launch import code_archive, is_local, loopback, spark_conf

log = logging.getLogger("loglake.spark")


@contextmanager
def _output_to(log_file: Path):
    """File descriptors 1 and 2 point at ``log_file`` inside the block, then back.

    A process started inside (the JVM pyspark launches inherits fds 1 and 2) keeps writing
    to the file for its whole life; this process gets its own terminal back.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]  # not inheritable: the child sees only the file
    try:
        with open(log_file, "ab") as f:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            f.write(f"--- {stamp} JVM of pid {os.getpid()}: its output follows ---\n".encode())
            f.flush()
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            try:
                yield
            finally:
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)


def get_spark(config: Config, app_name: str = "loglake", extra: dict[str, str] | None = None,
              log_file: Path | None = None):
    """The active session, or a new one configured for loglake (master from the profile).

    With ``log_file``, a new session's JVM writes its output there — start-up warnings,
    log4j's console appender, anything it prints later — instead of to this process's
    stdout and stderr (a command's output is its answer).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # One machine: bind the driver to loopback instead of whatever the hostname resolves to
    # (a cluster's workers on other hosts must reach the driver at its real address).
    if loopback(config):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if not os.environ.get("LOGLAKE_UNDER_SPARK_SUBMIT"):  # spark-submit already passed --master and --conf
        builder = builder.master(config.profile.spark.master)
        for k, v in {**spark_conf(config), **(extra or {})}.items():
            builder = builder.config(k, v)
    if log_file is None:
        spark = builder.getOrCreate()
    else:
        log.info("starting Spark (%s); the JVM's output goes to %s", app_name, log_file)
        with _output_to(Path(log_file)):
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not is_local(config) and not os.environ.get("LOGLAKE_UNDER_SPARK_SUBMIT"):
        spark.sparkContext.addPyFile(str(code_archive(config)))  # spark-submit passed --py-files
    return spark
