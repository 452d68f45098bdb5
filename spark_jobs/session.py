"""Spark sessions with the Kafka connector and Delta Lake, in-process or under spark-submit."""

from __future__ import annotations

import os
import sys

from loglake.config import Config
from loglake.launch import spark_conf


def get_spark(config: Config, app_name: str = "loglake", extra: dict[str, str] | None = None):
    """The active session, or a new one configured for loglake (master from the profile)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # One machine: bind the driver to loopback instead of whatever the hostname resolves to.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if not os.environ.get("LOGLAKE_UNDER_SPARK_SUBMIT"):  # spark-submit already passed --master and --conf
        builder = builder.master(config.profile.spark.master)
        for k, v in {**spark_conf(config), **(extra or {})}.items():
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
