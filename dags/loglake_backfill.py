"""
### loglake_backfill — recompute exact offset ranges (or a time window) of one dataset

Trigger it with the form:

- **Dataset** — whose `batch.<dataset>` table is recomputed;
- **Offset ranges** — one per line, `PARTITION:START-END` (offsets `[START, END)`), or
- **From / To** — an ISO-8601 time window, turned into offsets per partition with Kafka's
  offsets-for-times;
- **Dry run** — only print the plan.

1. **plan** checks the request against the log *before any Spark job*: the partition
   exists, `0 <= START <= END`, `END` within the log end, offsets still retained, ranges
   not overlapping. A bad request fails at once, naming the field
   (e.g. `ranges[1].start: start (200) is after end (100)`). The plan is in the task log.
2. **dataset.recompute** runs `spark_jobs/batch.py` under spark-submit: it replaces exactly
   those offsets in `batch.<dataset>` and `quarantine.<dataset>` and records them in the
   offsets ledger as written. Re-running a range leaves identical tables.
3. **dataset.quality** validates exactly those rows with the dataset's Great Expectations
   suite and publishes the ranges (the watermark may pass them) only if no `fail`
   expectation failed; otherwise it fails naming the expectations. Both are skipped on a
   dry run.

Manual only (no schedule); one run at a time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.groups import write_audit_publish
from loglake_airflow.params import backfill_params
from loglake_airflow.plans import backfill_requests

with DAG(
    dag_id="loglake_backfill",
    schedule=None,
    params=backfill_params(),
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def plan(**context) -> list[dict]:
        """Validate the request and plan it; the batch job's request, or nothing on a dry run."""
        return backfill_requests(context["params"], f"{context['dag'].dag_id}/{context['run_id']}")

    write_audit_publish.expand(request=plan())
