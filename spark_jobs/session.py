"""Spark sessions with the Kafka connector and Delta Lake, in-process or under spark-submit."""

from __future__ import annotations

import os
import sys

from loglake import paths
from loglake.config import Config


def _log4j_file():
    """The log4j2 file of the conf dir in use, else the repo's (a conf dir may omit it)."""
    own = paths.conf_dir() / "log4j2-spark.properties"
    return own if own.exists() else paths.REPO_ROOT / "conf" / "log4j2-spark.properties"


def spark_conf(config: Config) -> dict[str, str]:
    """Spark settings loglake needs (Delta extension and catalog, jars), then the profile's."""
    conf = {
        "spark.jars": ",".join(str(j) for j in paths.jars("spark")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.memory": config.profile.spark.driver_memory,
        # Python workers must use the venv's interpreter, not whatever python3 is on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # Timestamps are stored and shown in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        # Delta rebuilds a table's state with this many tasks; 50 (the default) is pure
        # overhead for loglake's tables on a few cores.
        "spark.databricks.delta.snapshotPartitions": "2",
        # A JSON object with a repeated key: the last one wins, in from_json and in VARIANT
        # parsing alike (spark_jobs.parse relies on both agreeing).
        "spark.sql.variant.allowDuplicateKeys": "true",
        # Warnings and errors only (Spark's INFO start-up chatter drowns what matters).
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j_file()}",
    }
    conf.update(config.profile.spark.conf)
    return conf


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


def job_parser(prog: str, description: str):
    """The arguments every spark-submit entry point takes: dataset and where config lives."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--dataset", required=True)
    p.add_argument("--conf-dir", help="configuration directory (default: $LOGLAKE_CONF or conf/)")
    p.add_argument("--profile")
    p.add_argument("--home", help="state directory (default: $LOGLAKE_HOME or .loglake/)")
    return p


def report_failure(e: BaseException) -> int:
    """Print a failing job's JSON summary line and return its exit code (2).

    loglake's own errors (bad input, data loss, a failed quality gate) are not fixed by
    running the job again; ``"retryable": false`` tells the Airflow operator to fail the
    task at once instead of retrying, and the CLI shows the message.
    """
    import json

    print(json.dumps({"error": str(e), "error_type": type(e).__name__, "retryable": False}), flush=True)
    return 2


def run_main(main, argv: list[str] | None = None) -> int:
    """Run a job's ``main``; a ``LoglakeError`` ends it with ``report_failure``."""
    from loglake.errors import LoglakeError

    try:
        return main(argv)
    except LoglakeError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return report_failure(e)


def job_context(args, app: str):
    """(config, dataset, spark) for a job's parsed arguments."""
    from loglake.config import load_config

    config = load_config(args.conf_dir, args.profile, home=args.home)
    ds = config.dataset(args.dataset)
    return config, ds, get_spark(config, f"loglake-{app}-{ds.name}")
