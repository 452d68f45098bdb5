"""The maintenance DAG's listing task: which datasets have tables to maintain.

Returns the maintenance job's request (``loglake.jobs.requests.MaintenanceRequest``, as
JSON) per dataset; the Spark task is mapped over that list, so a dataset with no table yet
gets no Spark job.
"""

from __future__ import annotations

import logging

from loglake_airflow.errors import loglake_errors
from loglake_airflow.hooks import LoglakeHook

log = logging.getLogger(__name__)


@loglake_errors
def maintenance_requests(run_id: str) -> list[dict]:
    """The maintenance job's request for every dataset that has a table."""
    from loglake.jobs.requests import MaintenanceRequest
    from loglake.tables import existing_tables
    from loglake.maintenance.runs import datasets_with_tables

    config = LoglakeHook().config
    chosen = datasets_with_tables(config)
    for ds in config.datasets.values():
        if ds in chosen:
            log.info("%s: %s", ds.name, ", ".join(t.name for t in existing_tables(config, ds)))
        else:
            log.info("%s: no table yet; nothing to maintain", ds.name)
    return [MaintenanceRequest(ds.name, run_id=run_id).to_dict() for ds in chosen]


@loglake_errors
def purge_erasures_task() -> list[str]:
    """Purge the older table versions of every erasure whose ``erasure.purge_after`` has passed."""
    from loglake.erasure.erase import purge_due, purge_lines

    lines = purge_lines(purge_due(LoglakeHook().config))
    log.info("%s", "\n".join(lines) if lines else "no erasure is due for its purge")
    return lines
