"""The entry point every Spark job shares: the job protocol (``loglake.jobs.protocol``) on the job's side.

``run(job, argv, body)`` reads the job's request from its arguments (``--request JSON``,
``loglake.jobs.requests``), loads the configuration (from the
environment spark-submit was given: LOGLAKE_CONF, LOGLAKE_HOME, LOGLAKE_PROFILE), starts
the session, runs ``body(spark, config, ds, request)`` and reports its summary. A failure
is reported too — ``{"error", "error_type", "transient"}`` — so the caller knows whether
another attempt may help, and the job exits with 2 (loglake's own errors, shown without a
traceback) or re-raises (anything else: the traceback is what a developer needs).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Callable

import psutil

from loglake.core.config import Config, Dataset, load_config
from loglake.core.errors import ConfigError, JobFailure, KafkaAuthenticationError, LoglakeError
from loglake.jobs import registry
from loglake.jobs.protocol import report
from loglake.jobs.requests import JobRequest, summary_file_of
from loglake.jobs.session import get_spark
from loglake.jobs.summaries import BatchSummary, JobSummary, QualitySummary
from loglake.leases import writer
from loglake.schema_versions import check as check_schema
from loglake.observe import series
from loglake.observe.lineage import job_lineage
from loglake.schemaregistry.resolve import resolve

def run(job: str, argv: list[str] | None, body: Callable[..., JobSummary]) -> int:
    """The job under spark-submit: its own Spark session, stopped at the end; exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    summary_file = summary_file_of(argv)
    try:
        summary = execute(JobRequest.from_argv(job, argv), body, own_session)
        report(summary, summary_file)
        return 0
    except Exception as e:
        failure, understood = as_failure(e)
        report(failure, summary_file)
        if not understood:
            raise
        return 2


def as_failure(error: Exception) -> tuple[JobFailure, bool]:
    """The failure a job reports for ``error``, and whether loglake understands it: its own
    error or a JVM failure it knows (``known_jvm_error``), said in one line on stderr here;
    anything else wants its traceback, the caller's to show."""
    known = error if isinstance(error, LoglakeError) else known_jvm_error(error)
    if known is None:
        return JobFailure.of(error), False
    print(f"{type(known).__name__}: {known}", file=sys.stderr, flush=True)
    return JobFailure.of(known), True


def execute(request: JobRequest, body: Callable[..., JobSummary], session, *, inherited: str | None = None,
            export: bool = True, cancel: threading.Event | None = None) -> JobSummary:
    """Load the configuration, resolve the dataset once (a registry format's fields, read from
    its subject: ``body`` and the component functions it calls take it resolved), check the
    schema and, under the dataset's lease for a writer, run ``body`` in the Spark session
    ``session(config, name)`` gives
    (a context manager yielding ``(spark, start_seconds, shared)``). The summary says how
    long the session took to be ready (``start_seconds``) and whether it was the shared
    application's (``shared_application``). ``inherited``/``export``/``cancel``: ``locks.writer``'s
    (``cancel`` set: the caller went away; a job still waiting for the lease stops at once).
    """
    job = request.job
    config: Config = load_config()
    # A registry format's fields: read from the subject (loglake.schemaregistry.resolve).
    ds: Dataset = resolve(config, config.dataset(request.dataset))
    check_schema(config, ds)  # a breaking schema change: refused before the JVM starts
    # One writer per dataset: the lease is taken before the JVM starts (a job that waits
    # costs no memory) and held until the session stopped. The session is opened inside it:
    # the shared application's slot and quality gate come after the lease (the order of
    # locks in loglake.jobs.server), never before.
    lease = (writer(config, ds.name, job, request.run_id, inherited=inherited, export=export, cancel=cancel)
             if registry.job(job).writes else nullcontext())
    t0 = time.monotonic()
    events = job_lineage(config, job, ds, request.run_id, request.ranges(), request.rebuilt_layer(),
                         request.lineage_parent)
    if events is not None:
        events.start()
    try:
        with lease:
            with session(config, f"loglake-{job}-{ds.name}") as (spark, start_seconds, shared):
                summary = body(spark, config, ds, request)
    except BaseException as e:
        series.record(config, ds.name, "job", job=job, run_id=request.run_id, ok=False,
                      seconds=round(time.monotonic() - t0, 3))
        if events is not None:
            events.fail(e)
        raise
    summary = replace(summary, start_seconds=round(start_seconds, 3), shared_application=shared)
    record_job(config, ds.name, job, summary)
    if events is not None:
        events.complete(summary.to_dict())
    return summary


def record_job(config: Config, dataset: str, job: str, summary: JobSummary) -> None:
    """The job's event in the dataset's metrics series (``loglake.observe.series``): its seconds
    and phases; a batch run's records and quarantined ones by reason; whether it published."""
    quality = getattr(summary, "quality", None) or summary
    extra = {}
    if isinstance(summary, BatchSummary):
        extra = {"records": summary.records, "quarantined": summary.quarantined_by_reason}
    if isinstance(quality, QualitySummary) and quality.published:
        extra["published_records"] = quality.published_records
    series.record(config, dataset, "job", job=job, run_id=summary.run_id, ok=True, seconds=summary.seconds,
                  phases=summary.phases, published=bool(getattr(quality, "published", False)), **extra)


@contextmanager
def own_session(config: Config, name: str):
    """This process's Spark session (a JVM of its own), stopped after the block; its start
    counted from spark-submit's (this process's parent's) start."""
    try:
        since = psutil.Process(os.getppid()).create_time() if os.environ.get("LOGLAKE_UNDER_SPARK_SUBMIT") else None
    except psutil.Error:
        since = None
    t0 = time.time()
    spark = get_spark(config, name)
    try:
        yield spark, time.time() - (since or t0), False
    finally:
        spark.stop()  # drains the listener bus before Python goes away


def known_jvm_error(error: BaseException) -> LoglakeError | None:
    """A JVM-side failure loglake understands, as loglake's own error (None: not one).

    A field's ``pattern`` that Java's regex engine refuses (config load refuses the known
    cases; this names any other) is a configuration error: permanent, so the supervisor
    stops restarting the stream instead of failing the same way for ever.
    """
    text = str(error)
    # The Java client refused by the broker (credentials or TLS; the stream's password changed
    # under it): permanent, like the confluent-kafka clients' refusal (loglake.kafka.admin).
    for marker in ("org.apache.kafka.common.errors.SaslAuthenticationException",
                   "org.apache.kafka.common.errors.SslAuthenticationException"):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            return KafkaAuthenticationError(f"Kafka refused the job's Kafka client: {line.split(marker, 1)[1].lstrip(': ')}")
    for marker in ("[INVALID_PARAMETER_VALUE.PATTERN]", "java.util.regex.PatternSyntaxException"):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            detail = line.split(marker, 1)[1].lstrip(": ").split(" SQLSTATE")[0]
            return ConfigError(f"a field's pattern is not a valid Java regular expression (Spark applies "
                               f"patterns with Java's engine): {detail}", key="schema.<field>.pattern")
    return None
