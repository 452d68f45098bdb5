"""
### loglake_maintenance — keep every dataset's Delta tables compact while the streams write

Hourly by default (set `LOGLAKE_MAINTENANCE_SCHEDULE` in Airflow's environment to a cron
expression or preset to change it; it is read when the file is parsed):

1. **tables** lists the datasets that have at least one table (speed, batch, quarantine,
   a changelog's latest state); the tables are in the task log.
2. **maintain**, one mapped task per dataset, runs `spark_jobs/maintenance.py` under
   spark-submit (connection `loglake_spark`). Per table: *expire* the speed rows (and the
   speed layer's quarantine rows) below the batch watermark W_p — the serving view never
   reads them; *optimize* (bin-packing, or Z-order by `maintenance.zorder_by`); *vacuum*
   with `maintenance.vacuum_retention_hours` (at least 168 h unless the dataset sets
   `allow_short_vacuum_retention: true`). Delta commit conflicts with the running
   stream are retried with backoff (6 attempts). Every operation is recorded in
   `_maintenance_log` (files and bytes before and after, versions, rows expired,
   attempts); the task's return value is the job's summary.

Datasets are maintained one at a time unless `LOGLAKE_MAINTENANCE_PARALLELISM` says more.
No catch-up; one run at a time.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task

from loglake_airflow import DEFAULT_ARGS
from loglake_airflow.maintenance import maintenance_args
from loglake_airflow.operators import LoglakeSparkSubmitOperator

with DAG(
    dag_id="loglake_maintenance",
    schedule=os.environ.get("LOGLAKE_MAINTENANCE_SCHEDULE", "@hourly"),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["loglake"],
    doc_md=__doc__,
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def tables(**context) -> list[list[str]]:
        """The maintenance job's arguments for every dataset that has a table."""
        return maintenance_args(f"{context['dag'].dag_id}/{context['run_id']}")

    maintain = LoglakeSparkSubmitOperator.partial(
        task_id="maintain",
        job="maintenance",
        # One Spark driver at a time by default: the streams already hold JVMs on a small machine.
        max_active_tis_per_dagrun=int(os.environ.get("LOGLAKE_MAINTENANCE_PARALLELISM", "1")),
        map_index_template="{{ task.application_args[1] }}",
    ).expand(application_args=tables())
