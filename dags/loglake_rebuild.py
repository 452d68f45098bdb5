"""
### loglake_rebuild — make a damaged or deleted table again from the log

When a dataset's table is damaged (data files lost) or deleted by mistake, trigger this DAG
with the form:

- **Dataset** — whose table is rebuilt;
- **Layer** — `batch`, `speed`, `latest` (a changelog's latest state), or `all`.

**rebuild** first checks that Kafka still holds what the table needs (batch: every range
the ledger says was published; speed: from the batch watermark on; latest: the changes from
the watermark on) and fails naming the missing offsets otherwise — nothing is moved then;
restore that table from an older Delta version instead. Then it sets the old table aside
(`<path>.before-rebuild-<time>`), recomputes it under the dataset's writer lease (the batch
layer through the quality gate, which publishes it again) and stops and restarts the
dataset's background stream around a speed or latest rebuild. Same as
`loglake rebuild DATASET [--layer L]`.

Manual only; one run at a time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.params import dataset_param
from loglake_airflow.plans import rebuild_task

with DAG(
    dag_id="loglake_rebuild",
    schedule=None,
    params={
        "dataset": dataset_param("The dataset whose table is rebuilt from the log."),
        "layer": Param("batch", type="string", enum=["batch", "speed", "latest", "all"], title="Layer",
                       description="The table to rebuild: batch, speed, latest (changelogs) or all of them."),
    },
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(hours=2))
    def rebuild(**context) -> list[str]:
        """Rebuild the table(s) from the log; one line per step."""
        return rebuild_task(context["params"], f"{context['dag'].dag_id}/{context['run_id']}")

    rebuild()
