"""
### loglake_maintenance — keep every dataset's Delta tables compact while the streams write

Hourly by default (set `LOGLAKE_MAINTENANCE_SCHEDULE` in Airflow's environment to a cron
expression or preset to change it — `@once`, `@continuous` and `none` too; it is read when
the file is parsed). Its first scheduled
run is at the schedule's next time after the DAG is first switched on, not at once: on a
fresh platform there is nothing to maintain yet, and a run at `loglake up` would hold the
datasets' maintenance leases while the first batch run waits for them.

1. **tables** lists the datasets that have at least one table (speed, batch, quarantine,
   a changelog's latest state); the tables are in the task log.
2. **dataset.maintain**, one mapped task group per dataset, runs `spark_jobs/maintenance.py` under
   spark-submit (connection `loglake_spark`). Per table: *expire* the speed rows (and the
   speed layer's quarantine rows) below the batch watermark W_p — the serving view never
   reads them; *optimize* (bin-packing, or Z-order by `maintenance.zorder_by`); *vacuum*
   with `maintenance.vacuum_retention_hours` (at least 168 h unless the dataset sets
   `allow_short_vacuum_retention: true`). Delta commit conflicts with the running
   stream are retried with backoff (6 attempts). Every operation is recorded in
   `_maintenance_log` (files and bytes before and after, versions, rows expired,
   attempts); the task's return value is the job's summary.
3. **purge_erasures** deletes, for every erasure whose `erasure.purge_after` has passed, the
   files of older table versions that still hold its rows (`loglake erase --purge`;
   docs/erasure.md); the erasures purged are in the task log, by id (never their key).
4. **dataset.audit** then checks that every offset Kafka retains is in its layer exactly
   once (batch or batch quarantine below W_p, speed or speed quarantine from W_p to the
   speed position), reading the actual offsets from the log. Anything missing,
   duplicated or unexpected fails the task, listing the offsets; the result is stored in
   `_audit_results`.

Datasets are maintained one at a time unless `LOGLAKE_MAINTENANCE_PARALLELISM` says more.
No catch-up; one run at a time.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG, CronTriggerTimetable, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.groups import maintain_and_audit
from loglake_airflow.maintenance import maintenance_requests, purge_erasures_task

SCHEDULE = os.environ.get("LOGLAKE_MAINTENANCE_SCHEDULE", "@hourly").strip()
# Airflow's presets that are no cron expression, taken as they are (with the usual start date:
# @once runs once when switched on): a cron timetable refuses them.
NOT_CRON = {"@once": "@once", "@continuous": "@continuous", "none": None}
PRESET = SCHEDULE.lower()

with DAG(
    dag_id="loglake_maintenance",
    # No start date: with one in the past and no catch-up, Airflow runs the most recent past
    # interval at once when the DAG is switched on; without one, the cron timetable waits for its
    # next time — unless the last one is within a buffer (run_immediately=False means 5 minutes on
    # an hourly schedule: `loglake up` at 18:04 ran it at once). A buffer of none waits always.
    schedule=NOT_CRON[PRESET] if PRESET in NOT_CRON else CronTriggerTimetable(
        SCHEDULE, timezone="UTC", run_immediately=timedelta(0)),
    doc_md=__doc__,
    **{**DAG_DEFAULTS, "start_date": DAG_DEFAULTS["start_date"] if PRESET in NOT_CRON else None},
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def tables(**context) -> list[dict]:
        """The maintenance job's request for every dataset that has a table."""
        return maintenance_requests(f"{context['dag'].dag_id}/{context['run_id']}")

    @task(execution_timeout=timedelta(minutes=30))
    def purge_erasures() -> list[str]:
        """Purge the older table versions of every erasure due (by erasure id)."""
        return purge_erasures_task()

    maintain_and_audit.expand(request=tables())
    purge_erasures()
