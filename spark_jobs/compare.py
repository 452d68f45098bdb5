"""The demo's proof: a query over the serving view equals the same query over a full
recompute from the log, through the same parsing and transform code.

``python -m spark_jobs.compare DATASET SQL`` (``loglake demo`` runs it; ``SQL`` names the
relation ``{view}``) prints both results and exits 0 when they are identical, 1 when not.
The configuration comes from the environment (``LOGLAKE_CONF``, ``LOGLAKE_HOME``,
``LOGLAKE_PROFILE``), as for every job.
"""

from __future__ import annotations

import sys

from loglake.core.config import load_config
from loglake.jobs.session import get_spark
from loglake.serving.spark import query
from spark_jobs.batch import recompute_from_log


def main(argv: list[str] | None = None) -> int:
    name, sql = argv if argv is not None else sys.argv[1:]
    config = load_config()
    # The JVM's warnings and log lines go to the log; the demo prints the comparison.
    spark = get_spark(config, "loglake-demo", {"spark.ui.showConsoleProgress": "false"},
                      log_file=config.home / "logs" / "cli.log")
    try:
        served = query(spark, config, sql.format(view=name)).toPandas()
        recompute_from_log(spark, config, config.dataset(name)).createOrReplaceTempView("recomputed")
        full = spark.sql(sql.format(view="recomputed")).toPandas()
    finally:
        spark.stop()
    print("\nserving view (batch below the watermark + speed above it):")
    print("  " + sql.format(view=name))
    print(served.to_string(index=False))
    same = served.equals(full)
    print(f"full recompute from the log: {'identical' if same else 'DIFFERENT'}")
    if not same:
        print(full.to_string(index=False))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
