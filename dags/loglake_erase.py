"""
### loglake_erase — forget a data subject's key (right to erasure)

Erases every record of one key from a dataset: its rows leave every table (speed, batch,
quarantine, latest state, history) in commits that name the erasure, every later read of
the log (speed, recompute, backfill, replay, rebuild) skips them, and the table versions
that still hold them are purged after `erasure.purge_after`. Trigger this DAG with the form:

- **Dataset** — whose records are erased;
- **Key** — the data subject's key (e.g. a user id), as text;
- **Field** — the field that holds it (empty: the dataset's key);
- **Reason** — why (required; kept in the erasure ledger with who and when).

The key is masked in this run's task logs, and the erasure ledger keeps only its SHA-256;
Airflow keeps the run's form values in its own database (see docs/erasure.md, Limits).
Same as `loglake erase DATASET --key K [--field F] --reason TEXT`. A changelog also gets the
key's tombstone, so Kafka's compaction forgets it.

Manual only; one run at a time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.params import dataset_param
from loglake_airflow.plans import erase_task

with DAG(
    dag_id="loglake_erase",
    schedule=None,
    params={
        "dataset": dataset_param("The dataset whose records of the key are erased."),
        "key": Param("", type="string", minLength=1, title="Key",
                     description="The data subject's key, as text (e.g. a user id)."),
        "field": Param(None, type=["null", "string"], title="Field",
                       description="The field that holds the key; empty for the dataset's key."),
        "reason": Param("", type="string", minLength=3, title="Reason",
                        description="Why the key is erased (kept in the erasure ledger with who and when)."),
    },
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(minutes=60))
    def erase(**context) -> list[str]:
        """Erase the key (who: the user who triggered the run)."""
        run = context["dag_run"]
        user = getattr(run, "triggering_user_name", None)
        return erase_task(context["params"], user)

    erase()
