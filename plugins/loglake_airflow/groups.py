"""Task groups the DAG files share."""

from __future__ import annotations

import os

from datetime import timedelta

from airflow.sdk import task, task_group

from loglake_airflow.datasets import TABLES
from loglake_airflow.operators import LoglakeSparkSubmitOperator

# One Spark driver at a time by default: on a small machine the streams already hold
# JVMs, and parallel jobs only contend for the same cores.
PARALLELISM = int(os.environ.get("LOGLAKE_BATCH_PARALLELISM", "1"))


@task(execution_timeout=timedelta(minutes=30))
def diff(args: list[str]) -> list[dict]:
    """Explain how batch and speed differ on the ranges just published."""
    from loglake_airflow.checks import diff_after_batch

    return diff_after_batch(args)


@task(execution_timeout=timedelta(minutes=30))
def audit(args: list[str]) -> dict:
    """Every retained offset exactly once: batch below the watermark, speed above it."""
    from loglake_airflow.checks import audit as run_audit

    return run_audit(args)


@task_group(group_id="dataset")
def write_audit_publish(args: list[str]) -> None:
    """One planned dataset: write its ranges (recompute), validate and publish them (quality),
    then explain batch against speed on them (diff) and audit the dataset's offsets (audit).

    ``args`` are the batch job's arguments (``--dataset NAME --plan PLAN --run-id RUN``);
    the quality job takes the same ones. Map it over a planning task's output.
    """
    recompute = LoglakeSparkSubmitOperator(
        task_id="recompute", job="batch", application_args=args,
        max_active_tis_per_dagrun=PARALLELISM, map_index_template="{{ task.application_args[1] }}")
    quality = LoglakeSparkSubmitOperator(
        task_id="quality", job="quality", application_args=args, outlets=[TABLES],
        max_active_tis_per_dagrun=PARALLELISM, map_index_template="{{ task.application_args[1] }}")
    recompute >> quality >> [diff(args), audit(args)]


@task_group(group_id="dataset")
def maintain_and_audit(args: list[str]) -> None:
    """One dataset: compact, expire and vacuum its tables (maintain), then audit its offsets."""
    maintain = LoglakeSparkSubmitOperator(
        task_id="maintain", job="maintenance", application_args=args,
        max_active_tis_per_dagrun=int(os.environ.get("LOGLAKE_MAINTENANCE_PARALLELISM", "1")),
        map_index_template="{{ task.application_args[1] }}")
    maintain >> audit(args)
