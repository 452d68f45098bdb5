"""The Airflow side of loglake, laid out as a provider's: what the thin DAG files in ``dags/`` import.

``hooks`` (``LoglakeHook``: the configuration and loglake's readers, once per task),
``operators`` (Spark jobs submitted like the CLI submits them), ``sensors`` (the batch
watermark advanced, the speed layer caught up), ``errors`` (permanent or transient: the
one mapping onto Airflow's exceptions), ``plans`` and ``checks`` (the tasks' bodies),
``groups`` (the mapped task groups), ``params`` (the forms' typed ``Param``s) and
``datasets`` (the dataset names and the table Assets). Nothing here reads files,
connections or the network at import time, and loglake itself is imported inside the
functions that use it: a DAG file is parsed without loading it, and configuration is
loaded when a task runs.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

# Every loglake task: retried after a transient failure (the broker restarting, a Delta
# conflict that outlasted the job's own retries, a Spark OOM), with exponential backoff
# from LOGLAKE_RETRY_DELAY_SECONDS (60 by default); a permanent one (invalid input, data
# loss, a failed quality gate) fails at once through AirflowFailException. Owned and
# bounded in time.
DEFAULT_ARGS = {
    "owner": "loglake",
    "retries": 2,
    "retry_delay": timedelta(seconds=float(os.environ.get("LOGLAKE_RETRY_DELAY_SECONDS", "60"))),
    "retry_exponential_backoff": True,
    "execution_timeout": timedelta(hours=2),
}

# What every loglake DAG declares alike: no catch-up (a run plans from the watermark, so a
# skipped interval loses nothing), one run at a time, the task defaults above, the tag.
DAG_DEFAULTS = {
    "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
    "catchup": False,
    "max_active_runs": 1,
    "default_args": DEFAULT_ARGS,
    "tags": ["loglake"],
}
