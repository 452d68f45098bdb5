"""
### loglake_batch — recompute every dataset's batch table up to the log end

Every 30 minutes by default (set `LOGLAKE_BATCH_SCHEDULE` in Airflow's environment to a
cron expression or preset such as `@hourly` to change it; it is read when the file is
parsed), for every dataset in `conf/datasets`:

1. **plan** reads each partition's log end and its batch watermark W_p (from the offsets
   ledger) and plans the offsets `[W_p, end)`. Datasets with nothing new, or without a
   topic yet, are skipped; the plan is in the task log.
2. **recompute**, one mapped task per planned dataset, runs `spark_jobs/batch.py` under
   spark-submit (connection `loglake_spark`): it replaces exactly those offsets in
   `batch.<dataset>` and `quarantine.<dataset>`, then records the ranges in the ledger,
   which advances the watermark. Its return value is the job's summary (records,
   quarantined, seconds); it emits events for the two tables' Assets.

Datasets are recomputed one at a time unless `LOGLAKE_BATCH_PARALLELISM` says more.
No catch-up: a run always plans from the watermark, so a skipped interval loses nothing.
One run at a time.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, task

from loglake_airflow import DEFAULT_ARGS
from loglake_airflow.datasets import TABLES
from loglake_airflow.operators import LoglakeSparkSubmitOperator
from loglake_airflow.plans import batch_args

with DAG(
    dag_id="loglake_batch",
    schedule=os.environ.get("LOGLAKE_BATCH_SCHEDULE", "*/30 * * * *"),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["loglake"],
    doc_md=__doc__,
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def plan(**context) -> list[list[str]]:
        """Plan [W_p, end) per partition of every dataset; the batch job's arguments per non-empty plan."""
        return batch_args(f"{context['dag'].dag_id}/{context['run_id']}")

    LoglakeSparkSubmitOperator.partial(
        task_id="recompute",
        job="batch",
        outlets=[TABLES],
        # One Spark driver at a time by default: on a small machine the streams already hold
        # JVMs, and parallel jobs only contend for the same cores.
        max_active_tis_per_dagrun=int(os.environ.get("LOGLAKE_BATCH_PARALLELISM", "1")),
        map_index_template="{{ task.application_args[1] }}",
    ).expand(application_args=plan())
