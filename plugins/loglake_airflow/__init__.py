"""The Airflow side of loglake: what the thin DAG files in ``dags/`` import.

``datasets`` (the dataset names and the table Assets), ``hooks`` and ``operators`` (Spark
jobs submitted like the CLI submits them), ``plans`` (the planning tasks' bodies) and
``params`` (the backfill form). Nothing here reads files, connections or the network
at import time: configuration is loaded when a task runs.
"""

from __future__ import annotations

from datetime import timedelta

# Every loglake task: retried (a broker restart or a Spark OOM is worth a second try;
# invalid input fails at once through AirflowFailException), owned and bounded in time.
DEFAULT_ARGS = {
    "owner": "loglake",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "execution_timeout": timedelta(hours=2),
}
