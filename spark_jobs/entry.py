"""The entry point every Spark job shares: the job protocol (``loglake.jobs``) on the job's side.

``run(job, argv, body)`` parses the ``JobRequest``, loads the configuration (from the
environment spark-submit was given: LOGLAKE_CONF, LOGLAKE_HOME, LOGLAKE_PROFILE), starts
the session, runs ``body(spark, config, ds, request)`` and reports its summary. A failure
is reported too — ``{"error", "error_type", "transient"}`` — so the caller knows whether
another attempt may help, and the job exits with 2 (loglake's own errors, shown without a
traceback) or re-raises (anything else: the traceback is what a developer needs).
"""

from __future__ import annotations

import sys
from typing import Callable

from loglake.config import Config, Dataset, load_config
from loglake.errors import LoglakeError
from loglake.jobs import JobRequest, failure, report, summary_file_of


def run(job: str, argv: list[str] | None, body: Callable[..., dict]) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    summary_file = summary_file_of(argv)
    try:
        request = JobRequest.parse(job, argv)
        config: Config = load_config()
        ds: Dataset = config.dataset(request.dataset)
        from spark_jobs.session import get_spark

        spark = get_spark(config, f"loglake-{job}-{ds.name}")
        try:
            summary = body(spark, config, ds, request)
        finally:
            spark.stop()  # drains the listener bus before Python goes away
        report(summary, summary_file)
        return 0
    except LoglakeError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        report(failure(e), summary_file)
        return 2
    except Exception as e:
        report(failure(e), summary_file)
        raise
