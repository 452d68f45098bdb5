"""The planning tasks' bodies: what each DAG run will recompute, decided before any Spark job.

Each returns the spark-submit arguments of ``spark_jobs/batch.py`` for every plan that
has work (``--dataset NAME --plan PLAN_JSON --run-id RUN_ID``); the Spark task is mapped
over that list, so an empty list means no Spark job at all. Invalid input fails the task
at once (``AirflowFailException``: no retry) with the message naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from loglake_airflow.failing import or_fail

log = logging.getLogger(__name__)


def job_args(plan, run_id: str) -> list[str]:
    """``spark_jobs/batch.py`` arguments for ``plan``; ``run_id`` is recorded in the ledger."""
    from loglake.jobs.protocol import JobRequest

    return JobRequest("batch", plan.dataset, plan, run_id).argv()


def batch_args(run_id: str) -> dict[str, list]:
    """Plan every dataset from its batch watermark to the log end (``plan_batch``).

    ``{"args": [...], "losses": [...]}``: the batch job's arguments per non-empty plan, and
    the data-loss errors of datasets that cannot continue until an operator accepts the
    loss — those stop alone; the other datasets run (``fail_on_losses`` then fails the run).
    """
    from loglake.core.config import load_config
    from loglake.core.errors import DataLossError, SchemaChangeError
    from loglake.kafka.admin import list_topics
    from loglake.ledger.planning import plan_batch
    from loglake.ledger.schemas import check

    config = or_fail(load_config)
    topics = or_fail(list_topics, config)
    out, losses = [], []
    for ds in config.datasets.values():
        try:  # a breaking schema change stops its dataset alone, before anything runs
            check(config, ds)
        except SchemaChangeError as e:
            log.error("%s: %s", ds.name, e)
            losses.append(f"{ds.name}: {e}")
            continue
        if ds.topic not in topics:
            log.info("%s: topic %s does not exist yet; nothing to recompute", ds.name, ds.topic)
            continue
        try:
            plan = plan_batch(config, ds)
        except DataLossError as e:
            log.error("%s: %s", ds.name, e)
            losses.append(f"{ds.name}: {e}")
            continue
        except Exception:
            plan = or_fail(plan_batch, config, ds)
        log.info("%s", plan.describe())
        if plan.empty:
            log.info("%s: nothing to recompute (the batch layer is at the log end)", ds.name)
            continue
        out.append(job_args(plan, run_id))
    return {"args": out, "losses": losses}


def fail_on_losses(losses: list[str]) -> None:
    """Fail (no retry) naming each dataset that lost offsets (or whose conf changed its schema
    in a way its tables cannot take), after the others ran."""
    if losses:
        raise AirflowFailException("datasets that cannot continue until an operator acts (the other datasets ran):\n"
                                   + "\n".join(losses))


def accept_loss_task(params: Mapping[str, Any], run_id: str, user: str | None) -> list[str]:
    """The loglake_accept_loss DAG's task: record the dataset's current losses as lost."""
    from loglake.core.config import load_config
    from loglake.ledger.losses import accept_loss

    config = or_fail(load_config)
    ds = or_fail(config.dataset, params["dataset"])
    partition = params.get("partition")
    losses = or_fail(accept_loss, config, ds, params.get("reason") or "",
                     partition=None if partition is None else int(partition),
                     recorded_by=f"{user or 'unknown'} (Airflow)", run_id=run_id)
    lines = [f"accepted as lost: {loss.describe()}" for loss in losses]
    log.info("%s", "\n".join(lines) if lines else f"{ds.name}: no offsets to accept")
    return lines


def _checked_dataset(params: Mapping[str, Any]):
    """The config and the form's dataset, its schema checked (a breaking change fails the task)."""
    from loglake.core.config import load_config
    from loglake.ledger.schemas import check

    config = or_fail(load_config)
    ds = or_fail(config.dataset, params["dataset"])
    or_fail(check, config, ds)
    return config, ds


def _logged(lines: list[str]):
    def say(line: str) -> None:
        log.info("%s", line)
        lines.append(line)
    return say


def _safe(run_id: str) -> str:
    return run_id.replace("/", "-").replace(":", "-").replace("+", "-")


def rebuild_task(params: Mapping[str, Any], run_id: str) -> list[str]:
    """The loglake_rebuild DAG's task: ``loglake rebuild DATASET [--layer L]`` (``loglake.lifecycle.rebuilds``)."""
    from loglake.lifecycle.rebuilds import run_rebuild

    config, ds = _checked_dataset(params)
    layer = params.get("layer") or "all"
    lines: list[str] = []
    or_fail(run_rebuild, config, ds, None if layer == "all" else [layer], _safe(run_id), _logged(lines))
    return lines


def replay_task(params: Mapping[str, Any], run_id: str) -> list[str]:
    """The loglake_replay DAG's task: ``loglake replay DATASET [--reason-code C] [--dry-run]``."""
    from loglake.lifecycle.replays import run_replay

    config, ds = _checked_dataset(params)
    lines: list[str] = []
    or_fail(run_replay, config, ds, _safe(run_id), params.get("reason_code") or None,
            bool(params.get("dry_run")), _logged(lines))
    return lines


def backfill_args(params: Mapping[str, Any], run_id: str) -> list[list[str]]:
    """Validate a backfill request (``plan_backfill``); a dry run only logs the plan."""
    from loglake.kafka.admin import list_topics
    from loglake.ledger.planning import plan_backfill

    config, ds = _checked_dataset(params)
    if ds.topic not in or_fail(list_topics, config):
        raise AirflowFailException(f"dataset: the topic {ds.topic} of {ds.name} does not exist on "
                                   f"{config.kafka.bootstrap_servers}: there is nothing to backfill")
    plan = or_fail(plan_backfill, config, ds, ranges=list(params.get("ranges") or []) or None,
                    from_ts=params.get("from_ts") or None, to_ts=params.get("to_ts") or None)
    log.info("%s", plan.describe())
    if params.get("dry_run"):
        log.info("dry run: nothing recomputed")
        return []
    if plan.empty:
        log.info("%s: the plan is empty; nothing to recompute", ds.name)
        return []
    return [job_args(plan, run_id)]
