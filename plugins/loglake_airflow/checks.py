"""The check tasks' bodies: the explained diff after each batch range, and the offset audit.

Both run in the Airflow worker without a JVM (delta-rs and confluent-kafka), so they
cost seconds, not a Spark application. Their lines are in the task log; the result is
the task's return value.
"""

from __future__ import annotations

import logging

from airflow.sdk.exceptions import AirflowFailException

from loglake_airflow.errors import loglake_errors
from loglake_airflow.hooks import LoglakeHook

log = logging.getLogger(__name__)


@loglake_errors
def diff_after_batch(request: dict) -> list[dict]:
    """Compare batch with speed rows for every range the batch job (``request``, a batch
    request as XCom holds it) just wrote and published.

    A difference is explained (missing in either layer, changed columns with samples),
    not judged: the task succeeds whatever it finds.
    """
    from loglake.jobs.requests import BatchRequest, JobRequest
    from loglake.ops.diff import diff_plan, format_diff

    batch = JobRequest.from_dict(request, BatchRequest.job)
    hook = LoglakeHook()
    diffs = diff_plan(hook.config, hook.dataset(batch.dataset), batch.plan)
    for d in diffs:
        log.info("%s", "\n".join(format_diff(d)))
    return [d.to_dict() for d in diffs]


@loglake_errors
def audit(request: dict) -> dict:
    """Audit the dataset of ``request`` (a job's request as XCom holds it; its run id is
    recorded with the result): every retained offset exactly once in its layer.

    Anything missing, duplicated or unexpected fails the task at once (a retry reads the
    same tables) with the offending offsets; the result is stored in ``_audit_results``.
    """
    from loglake.jobs.requests import JobRequest
    from loglake.ops.audit import audit_dataset
    from loglake.ops.audit_report import format_audit

    after = JobRequest.from_dict(request)
    hook = LoglakeHook()
    result = audit_dataset(hook.config, hook.dataset(after.dataset), after.run_id)
    lines = format_audit(result)
    log.info("%s", "\n".join(lines))
    if not result.ok:
        raise AirflowFailException("\n".join(lines))
    return {k: v for k, v in result.to_dict().items() if k != "partitions"}
