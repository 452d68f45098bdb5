"""A test DAG (tests/system/test_retries.py): loglake Spark tasks whose requests the test gives.

``transient`` recomputes a valid plan while the broker is briefly down; then ``permanent``
asks for offsets beyond the log end (the job says so: no retry can fix it); ``malformed``
gets a plan of another dataset, which the operator refuses before any spark-submit.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from airflow.sdk import DAG

from loglake_airflow import DEFAULT_ARGS
from loglake_airflow.operators import LoglakeSparkSubmitOperator

with DAG(dag_id="loglake_test_retries", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, default_args=DEFAULT_ARGS, doc_md=__doc__, tags=["loglake-test"]) as dag:
    transient, permanent, malformed = (
        LoglakeSparkSubmitOperator(task_id=task_id, job="batch",
                                   job_request=json.loads(os.environ.get(f"LOGLAKE_TEST_{task_id.upper()}", "{}")))
        for task_id in ("transient", "permanent", "malformed"))
    transient >> permanent
