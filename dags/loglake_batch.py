"""
### loglake_batch — recompute every dataset's batch table up to the log end

Every 30 minutes by default (set `LOGLAKE_BATCH_SCHEDULE` in Airflow's environment to a
cron expression or preset such as `@hourly` to change it; it is read when the file is
parsed), for every dataset in `conf/datasets`:

1. **plan** reads each partition's log end and its batch watermark W_p (from the offsets
   ledger) and plans the offsets `[W_p, end)`. Datasets with nothing new, or without a
   topic yet, are skipped; the plan is in the task log.
2. **dataset** — a task group mapped over the planned datasets (write → audit → publish):
   - **recompute** runs `spark_jobs/batch.py` under spark-submit (connection
     `loglake_spark`): it replaces exactly those offsets in `batch.<dataset>` and
     `quarantine.<dataset>` and records the ranges in the ledger as *written*;
   - **quality** runs `spark_jobs/quality.py`: the dataset's Great Expectations suite
     (`quality:` in its conf file) on exactly the rows of those ranges; results go to
     `_quality_results` and the Data Docs. Only if no `fail` expectation failed are the
     ranges *published*, which advances the watermark; otherwise the task fails (no
     retry) naming each failed expectation, its column, the unexpected count and sample
     offsets. It emits events for the tables' Assets once published.
   - **diff** compares the published batch rows with the speed rows for the same offsets
     (by `_topic, _partition, _offset`): missing in speed, missing in batch (and whether
     the other layer quarantined them), changed rows with the columns that differ and a
     sample. It explains; it never fails the run.
   - **audit** checks every retained offset of the dataset lands exactly once in its
     layer, reading the actual offsets from the log; anything missing, duplicated or
     unexpected fails the task, listing the offsets. Stored in `_audit_results`.
   Each task's return value is its summary (records, quarantined, seconds, ...).

Datasets are recomputed one at a time unless `LOGLAKE_BATCH_PARALLELISM` says more.
A dataset whose unrecomputed offsets Kafka already deleted stops alone: the others run,
and **stopped_datasets** then fails the run naming topic, partition and offsets, until an
operator records the loss (`loglake accept-loss` or the `loglake_accept_loss` DAG). A dataset
whose conf changes its schema in a way its tables cannot take stops the same way.

No catch-up: a run always plans from the watermark, so a skipped interval loses nothing.
One run at a time.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.groups import write_audit_publish
from loglake_airflow.plans import batch_requests, fail_on_stopped

with DAG(
    dag_id="loglake_batch",
    schedule=os.environ.get("LOGLAKE_BATCH_SCHEDULE", "*/30 * * * *"),
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def plan(**context) -> list[dict]:
        """Plan [W_p, end) per partition of every dataset: the batch job's request per non-empty
        plan; the datasets stopped by a data loss or a schema change go to XCom ``stopped``."""
        planned = batch_requests(f"{context['dag'].dag_id}/{context['run_id']}")
        context["ti"].xcom_push(key="stopped", value=planned["stopped"])
        return planned["requests"]

    @task(execution_timeout=timedelta(minutes=5))
    def stopped_datasets(**context) -> None:
        """Fail the run naming every dataset that stopped, and why (the others ran)."""
        fail_on_stopped(context["ti"].xcom_pull(task_ids="plan", key="stopped") or [])

    planned = plan()
    write_audit_publish.expand(request=planned)
    planned >> stopped_datasets()
