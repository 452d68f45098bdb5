"""The demo's proof: a query over the serving view equals the same query over a full
recompute from the log, through the same parsing and transform code.

``python -m loglake.batch.compare SQL [DATASET ...]`` (``loglake demo`` runs it; ``SQL`` names
the relation ``{view}``; no dataset: every events dataset) compares each dataset in one
Spark session, prints both results and exits 0 when every pair is identical, 1 when not.
The configuration comes from the environment (``LOGLAKE_CONF``, ``LOGLAKE_HOME``,
``LOGLAKE_PROFILE``), as for every job.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession

from loglake.core.config import Config, load_config
from loglake.jobs.session import get_spark
from loglake.serving.spark import query
from loglake.batch.recompute import recompute_from_log


@dataclass(frozen=True)
class Comparison:
    """One dataset's query over the serving view (``served``) and over a full recompute (``full``)."""

    dataset: str
    sql: str
    served: pd.DataFrame
    full: pd.DataFrame

    @property
    def same(self) -> bool:
        return self.served.equals(self.full)


def compare(spark: SparkSession, config: Config, sql: str, names: list[str] | None = None) -> list[Comparison]:
    """``sql`` over each dataset's serving view and over its full recompute from the log
    (``names``: those datasets; none: every events dataset)."""
    names = names or [ds.name for ds in config.datasets.values() if ds.kind == "events"]
    out = []
    for name in names:
        served = query(spark, config, sql.format(view=name)).toPandas()
        recompute_from_log(spark, config, config.dataset(name)).createOrReplaceTempView("recomputed")
        out.append(Comparison(name, sql.format(view=name), served,
                              spark.sql(sql.format(view="recomputed")).toPandas()))
    return out


def main(argv: list[str] | None = None) -> int:
    sql, *names = argv if argv is not None else sys.argv[1:]
    config = load_config()
    # The JVM's warnings and log lines go to the log; the demo prints the comparison.
    spark = get_spark(config, "loglake-demo", {"spark.ui.showConsoleProgress": "false"},
                      log_file=config.home / "logs" / "cli.log")
    try:
        results = compare(spark, config, sql, names)
    finally:
        spark.stop()
    for c in results:
        print("\nserving view (batch below the watermark + speed above it):")
        print("  " + c.sql)
        print(c.served.to_string(index=False))
        print(f"full recompute from the log: {'identical' if c.same else 'DIFFERENT'}")
        if not c.same:
            print(c.full.to_string(index=False))
    return 0 if all(c.same for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
