"""The planning tasks' bodies: what each DAG run will recompute, decided before any Spark job.

Each returns the batch job's request (``loglake.jobs.requests.BatchRequest``, as JSON) for
every plan that has work; the Spark tasks are mapped over that list, so an empty list means
no Spark job at all. Invalid input fails the task
at once (``AirflowFailException``: no retry) with the message naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from loglake_airflow.errors import loglake_errors
from loglake_airflow.hooks import LoglakeHook

log = logging.getLogger(__name__)


def batch_request(plan, run_id: str) -> dict:
    """The batch job's request for ``plan``, as XCom holds it; ``run_id`` is recorded in the ledger."""
    from loglake.jobs.requests import BatchRequest

    return BatchRequest(plan.dataset, plan, run_id=run_id).to_dict()


@loglake_errors
def batch_requests(run_id: str) -> dict[str, list]:
    """Plan every dataset from its batch watermark to the log end (``plan_batch``).

    ``{"requests": [...], "stopped": [...]}``: the batch job's request per non-empty plan, and
    the datasets that cannot continue until an operator acts, each ``{"dataset", "kind",
    "message"}`` (``kind``: ``data_loss``, offsets Kafka deleted before they were read, or
    ``schema_change``, a conf its tables cannot take) — those stop alone; the other datasets
    run (``fail_on_stopped`` then fails the run).
    """
    from loglake.core.errors import DataLossError, SchemaChangeError

    hook = LoglakeHook()
    topics = hook.topics()
    out, stopped = [], []
    for ds in hook.config.datasets.values():
        try:  # a breaking schema change or a data loss stops its dataset alone, before anything runs
            hook.checked_dataset(ds.name)
            if ds.topic not in topics:
                log.info("%s: topic %s does not exist yet; nothing to recompute", ds.name, ds.topic)
                continue
            plan = hook.plan_batch(ds)
        except (SchemaChangeError, DataLossError) as e:
            log.error("%s: %s", ds.name, e)
            stopped.append(stopped_dataset(ds.name, e))
            continue
        log.info("%s", plan.describe())
        if plan.empty:
            log.info("%s: nothing to recompute (the batch layer is at the log end)", ds.name)
            continue
        out.append(batch_request(plan, run_id))
    return {"requests": out, "stopped": stopped}


def stopped_dataset(dataset: str, error: Exception) -> dict:
    """``batch_requests``' entry for a dataset that ``error`` (a ``DataLossError`` or a
    ``SchemaChangeError``) stops: JSON's own types, as XCom holds them."""
    from loglake.core.errors import DataLossError

    kind = "data_loss" if isinstance(error, DataLossError) else "schema_change"
    return {"dataset": dataset, "kind": kind, "message": str(error)}


STOPPED_BECAUSE = {"data_loss": "lost offsets; `loglake accept-loss` once they are accounted for",
                   "schema_change": "its conf changes the schema in a way its tables cannot take"}


def fail_on_stopped(stopped: list[dict]) -> None:
    """Fail (no retry) naming each dataset that stopped (``batch_requests``' ``stopped``) and why,
    after the others ran."""
    if stopped:
        raise AirflowFailException("datasets that cannot continue until an operator acts (the other datasets ran):\n"
                                   + "\n".join(f"{s['dataset']} ({STOPPED_BECAUSE[s['kind']]}): {s['message']}"
                                                for s in stopped))


@loglake_errors
def accept_loss_task(params: Mapping[str, Any], run_id: str, user: str | None) -> list[str]:
    """The loglake_accept_loss DAG's task: record the dataset's current losses as lost."""
    from loglake.ledger.losses import accept_loss

    hook = LoglakeHook()
    ds = hook.dataset(params["dataset"])
    partition = params.get("partition")
    losses = accept_loss(hook.config, ds, params.get("reason") or "",
                         partition=None if partition is None else int(partition),
                         recorded_by=f"{user or 'unknown'} (Airflow)", run_id=run_id)
    lines = [f"accepted as lost: {loss.describe()}" for loss in losses]
    log.info("%s", "\n".join(lines) if lines else f"{ds.name}: no offsets to accept")
    return lines


@loglake_errors
def erase_task(params: Mapping[str, Any], user: str | None) -> list[str]:
    """The loglake_erase DAG's task: erase the key (masked in the task's logs first)."""
    from airflow.sdk.log import mask_secret

    from loglake.erasure.erase import erase

    key = params.get("key") or ""
    if key:
        mask_secret(key)
    hook = LoglakeHook()
    ds = hook.dataset(params["dataset"])
    result = erase(hook.config, ds, key, reason=params.get("reason") or "", field_name=params.get("field") or None,
                   requested_by=f"{user or 'unknown'} (Airflow)")
    lines = result.lines()
    log.info("%s", "\n".join(lines))
    return lines


def _logged(lines: list[str]):
    def say(line: str) -> None:
        log.info("%s", line)
        lines.append(line)
    return say


def _safe(run_id: str) -> str:
    return run_id.replace("/", "-").replace(":", "-").replace("+", "-")


@loglake_errors
def rebuild_task(params: Mapping[str, Any], run_id: str) -> list[str]:
    """The loglake_rebuild DAG's task: ``loglake rebuild DATASET [--layer L]`` (``loglake.lifecycle.rebuild``)."""
    from loglake.lifecycle.rebuild import run_rebuild

    hook = LoglakeHook()
    ds = hook.checked_dataset(params["dataset"])
    layer = params.get("layer") or "all"
    lines: list[str] = []
    run_rebuild(hook.config, ds, None if layer == "all" else [layer], _safe(run_id), _logged(lines))
    return lines


@loglake_errors
def replay_task(params: Mapping[str, Any], run_id: str) -> list[str]:
    """The loglake_replay DAG's task: ``loglake replay DATASET [--reason-code C] [--dry-run]``."""
    from loglake.lifecycle.replay import run_replay

    hook = LoglakeHook()
    ds = hook.checked_dataset(params["dataset"])
    lines: list[str] = []
    run_replay(hook.config, ds, _safe(run_id), params.get("reason_code") or None, bool(params.get("dry_run")),
               _logged(lines))
    return lines


@loglake_errors
def backfill_requests(params: Mapping[str, Any], run_id: str) -> list[dict]:
    """Validate a backfill request (``plan_backfill``); a dry run only logs the plan."""
    hook = LoglakeHook()
    ds = hook.checked_dataset(params["dataset"])
    if ds.topic not in hook.topics():
        raise AirflowFailException(f"dataset: the topic {ds.topic} of {ds.name} does not exist on "
                                   f"{hook.config.kafka.bootstrap_servers}: there is nothing to backfill")
    plan = hook.plan_backfill(ds, ranges=list(params.get("ranges") or []) or None,
                              from_ts=params.get("from_ts") or None, to_ts=params.get("to_ts") or None)
    log.info("%s", plan.describe())
    if params.get("dry_run"):
        log.info("dry run: nothing recomputed")
        return []
    if plan.empty:
        log.info("%s: the plan is empty; nothing to recompute", ds.name)
        return []
    return [batch_request(plan, run_id)]
