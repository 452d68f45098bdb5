"""
### loglake_replay — re-admit quarantined records after a rule was loosened

When a validation rule was loosened (an enum value added, a wider min/max, a field made
optional) and `conf/datasets/` changed accordingly, the records quarantined under the old
rule can come back. Trigger this DAG with the form:

- **Dataset** — whose quarantine is replayed;
- **Reason code** — only records quarantined for this reason (e.g. `out_of_domain`);
  empty for every reason;
- **Dry run** — count what would move and what stays; write nothing.

**replay** re-validates both layers' quarantined records under the current config and
moves the ones now valid, exactly once, under the dataset's writer lease: the speed
layer's from the bytes the quarantine kept (appended to the speed table, then removed from
the quarantine), the batch layer's by recomputing the ranges that hold them from the log
through the quality gate (nothing changes in the served rows unless the gate publishes).
The task log says, per layer, how many moved and how many stay, by reason. Running it twice
changes nothing. Same as `loglake replay DATASET [--reason-code CODE] [--dry-run]`.

Manual only; one run at a time.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from loglake_airflow import DAG_DEFAULTS
from loglake_airflow.params import dataset_param
from loglake_airflow.plans import replay_task

with DAG(
    dag_id="loglake_replay",
    schedule=None,
    params={
        "dataset": dataset_param("The dataset whose quarantined records are re-validated."),
        "reason_code": Param("", type=["null", "string"], title="Reason code", pattern="^[a-z_]*$",
                             description="Only records quarantined for this reason (e.g. out_of_domain); "
                                         "empty: every reason."),
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Count what would move and what stays; write nothing."),
    },
    doc_md=__doc__,
    **DAG_DEFAULTS,
) as dag:

    @task(execution_timeout=timedelta(hours=2))
    def replay(**context) -> list[str]:
        """Move the quarantined records the current config accepts; one line per layer."""
        return replay_task(context["params"], f"{context['dag'].dag_id}/{context['run_id']}")

    replay()
