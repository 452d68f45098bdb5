"""Task groups the DAG files share."""

from __future__ import annotations

import os

from airflow.sdk import task_group

from loglake_airflow.datasets import TABLES
from loglake_airflow.operators import LoglakeSparkSubmitOperator

# One Spark driver at a time by default: on a small machine the streams already hold
# JVMs, and parallel jobs only contend for the same cores.
PARALLELISM = int(os.environ.get("LOGLAKE_BATCH_PARALLELISM", "1"))


@task_group(group_id="dataset")
def write_audit_publish(args: list[str]) -> None:
    """One planned dataset: write its ranges (recompute), then validate and publish them (quality).

    ``args`` are the batch job's arguments (``--dataset NAME --plan PLAN --run-id RUN``);
    the quality job takes the same ones. Map it over a planning task's output.
    """
    recompute = LoglakeSparkSubmitOperator(
        task_id="recompute", job="batch", application_args=args,
        max_active_tis_per_dagrun=PARALLELISM, map_index_template="{{ task.application_args[1] }}")
    quality = LoglakeSparkSubmitOperator(
        task_id="quality", job="quality", application_args=args, outlets=[TABLES],
        max_active_tis_per_dagrun=PARALLELISM, map_index_template="{{ task.application_args[1] }}")
    recompute >> quality
