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
# A mapped task's name in the UI: its request's dataset.
MAP_INDEX = "{{ task.job_request.dataset }}"


@task(execution_timeout=timedelta(minutes=30))
def diff(request: dict) -> list[dict]:
    """Explain how batch and speed differ on the ranges just published."""
    from loglake_airflow.checks import diff_after_batch

    return diff_after_batch(request)


@task(execution_timeout=timedelta(minutes=30))
def audit(request: dict) -> dict:
    """Every retained offset exactly once: batch below the watermark, speed above it."""
    from loglake_airflow.checks import audit as run_audit

    return run_audit(request)


@task_group(group_id="dataset")
def write_audit_publish(request: dict) -> None:
    """One planned dataset: write its ranges (recompute), validate and publish them (quality),
    then explain batch against speed on them (diff) and audit the dataset's offsets (audit).

    ``request`` is the batch job's request (``loglake.jobs.requests.BatchRequest``, as JSON);
    the quality job takes its plan and run. Map it over a planning task's output; each mapped
    task is named by its dataset.
    """
    recompute = LoglakeSparkSubmitOperator(
        task_id="recompute", job="batch", job_request=request,
        max_active_tis_per_dagrun=PARALLELISM, map_index_template=MAP_INDEX)
    quality = LoglakeSparkSubmitOperator(
        task_id="quality", job="quality", job_request=request, outlets=[TABLES],
        max_active_tis_per_dagrun=PARALLELISM, map_index_template=MAP_INDEX)
    recompute >> quality >> [diff(request), audit(request)]


@task_group(group_id="dataset")
def maintain_and_audit(request: dict) -> None:
    """One dataset: compact, expire and vacuum its tables (maintain), then audit its offsets."""
    maintain = LoglakeSparkSubmitOperator(
        task_id="maintain", job="maintenance", job_request=request,
        max_active_tis_per_dagrun=int(os.environ.get("LOGLAKE_MAINTENANCE_PARALLELISM", "1")),
        map_index_template=MAP_INDEX)
    maintain >> audit(request)
