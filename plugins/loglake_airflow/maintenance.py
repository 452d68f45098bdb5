"""The maintenance DAG's listing task: which datasets have tables to maintain.

Returns the spark-submit arguments of ``spark_jobs/maintenance.py`` per dataset
(``--dataset NAME --run-id RUN_ID``); the Spark task is mapped over that list, so a
dataset with no table yet gets no Spark job.
"""

from __future__ import annotations

import logging

from loglake_airflow.errors import loglake_errors
from loglake_airflow.hooks import LoglakeHook

log = logging.getLogger(__name__)


@loglake_errors
def maintenance_args(run_id: str) -> list[list[str]]:
    """``spark_jobs/maintenance.py`` arguments for every dataset that has a table."""
    from loglake.ledger.tables import existing_tables
    from loglake.maintenance.runs import datasets_with_tables

    config = LoglakeHook().config
    chosen = datasets_with_tables(config)
    for ds in config.datasets.values():
        if ds in chosen:
            log.info("%s: %s", ds.name, ", ".join(t.name for t in existing_tables(config, ds)))
        else:
            log.info("%s: no table yet; nothing to maintain", ds.name)
    return [["--dataset", ds.name, "--run-id", run_id] for ds in chosen]
