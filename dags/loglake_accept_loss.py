"""
### loglake_accept_loss — record offsets Kafka deleted before loglake read them as lost

When retention (or DeleteRecords) removes offsets that the batch layer has not recomputed
or the speed layer has not read, that dataset stops: `loglake_batch` fails naming topic,
partition and offsets, and its speed stream waits. Nothing is skipped until an operator
decides the data is gone for good. Trigger this DAG with the form:

- **Dataset** — whose loss is accepted;
- **Partition** — only this partition (empty: every partition with a loss);
- **Reason** — why (required; kept in the offsets ledger with who and when).

**accept** records, per partition, the lost range `[first unread offset, earliest retained
offset)` in the ledger as *lost*. The batch watermark then continues from the earliest
retained offset, the speed stream resumes there by itself, `loglake audit` reports the
loss instead of failing on it, and the loglake page lists it. Same as
`loglake accept-loss DATASET [--partition P] --reason TEXT`.

Manual only; one run at a time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.params import dataset_param
from loglake_airflow.plans import accept_loss_task

with DAG(
    dag_id="loglake_accept_loss",
    schedule=None,
    params={
        "dataset": dataset_param("The dataset whose lost offsets are accepted."),
        "partition": Param(None, type=["null", "integer"], minimum=0, title="Partition",
                           description="Only this partition; empty for every partition with a loss."),
        "reason": Param("", type="string", minLength=3, title="Reason",
                        description="Why the loss is accepted (kept in the ledger with who and when)."),
    },
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(minutes=10))
    def accept(**context) -> list[str]:
        """Record the dataset's current losses as lost (who: the user who triggered the run)."""
        run = context["dag_run"]
        user = getattr(run, "triggering_user_name", None)
        return accept_loss_task(context["params"], f"{context['dag'].dag_id}/{context['run_id']}", user)

    accept()
