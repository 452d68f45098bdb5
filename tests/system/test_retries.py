"""Errors that know whether a retry can help, through a real operator run.

A Spark task whose broker is briefly unavailable fails with a transient error and gets the
retries its DAG declares: the second attempt, after the broker is back, writes the range
exactly. A job that reports a permanent error (offsets beyond the log end), and a request
the operator refuses before submitting it, fail once. (The quality gate's permanent
failure is in test_dags.py.)
"""

from __future__ import annotations

import json
import subprocess

import pytest

from loglake.local.airflow_env import airflow_bin
from loglake.core.config import load_config
from loglake.local.broker import EmbeddedKafka
from loglake.jobs.requests import BatchRequest
from loglake.kafka.admin import log_bounds
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan
from loglake.core.processes import wait_for
from loglake.local.produce import produce
from loglake.testing import write_conf
from loglake.tables import open_table, query

from tests.system.conftest import REPO_DAGS_TESTS

pytestmark = pytest.mark.system


def task_rows(db, run_id: str) -> dict[str, dict]:
    with db._db() as conn:
        return {t: {"state": s, "try_number": n} for t, s, n in conn.execute(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = 'loglake_test_retries' "
            "AND run_id = ?", (run_id,))}


def test_transient_failures_are_retried_and_permanent_ones_fail_once(tmp_path, airflow_db):
    kafka = EmbeddedKafka.on_free_ports(tmp_path / "kafka-home")
    try:
        config = load_config(write_conf(tmp_path, kafka.bootstrap), home=tmp_path / "state")
        ds = config.dataset("job_views")
        produce(config, ds, 300, bad_fraction=0.1, seed=61, progress=False)
        ranges = [OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in log_bounds(config, ds.topic).items()]
        good = BatchRequest(ds.name, Plan(ds.name, tuple(ranges), "backfill"), run_id="retried")
        beyond = Plan(ds.name, (OffsetRange(ds.topic, 0, 0, ranges[0].end + 100),), "backfill")
        bad = BatchRequest(ds.name, beyond, run_id="beyond")
        malformed = {"job": "batch", "dataset": ds.name, "plan": json.loads(Plan("company_ceos", (), "backfill").to_json()),
                     "run_id": "m"}
        kafka.stop()  # briefly unavailable: the first attempt meets no broker

        env = {**airflow_db.env(config), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_DAGS_TESTS),
               "LOGLAKE_RETRY_DELAY_SECONDS": "3",
               "LOGLAKE_TEST_TRANSIENT": json.dumps(good.to_dict()), "LOGLAKE_TEST_PERMANENT": json.dumps(bad.to_dict()),
               "LOGLAKE_TEST_MALFORMED": json.dumps(malformed)}
        before = airflow_db.run_ids("loglake_test_retries")
        proc = subprocess.Popen([airflow_bin(), "dags", "test", "loglake_test_retries"], env=env,
                                cwd=airflow_db.home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            run_id = wait_for(lambda: next(iter(airflow_db.run_ids("loglake_test_retries") - before), None), 120,
                              "the test DAG run to start")
            # The broker comes back once the first attempt failed and waits for its retry.
            wait_for(lambda: task_rows(airflow_db, run_id).get("transient", {}).get("state") == "up_for_retry",
                     240, "the transient task to fail its first attempt and wait for a retry")
            kafka.start()
            output, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        tasks = task_rows(airflow_db, run_id)
        assert tasks["transient"] == {"state": "success", "try_number": 2}, output[-4000:]
        assert tasks["permanent"] == {"state": "failed", "try_number": 1}, output[-4000:]
        assert tasks["malformed"] == {"state": "failed", "try_number": 1}, output[-4000:]
        assert "KafkaUnavailableError" in output  # what the first attempt met
        assert "AirflowFailException: ParamError: ranges[0].end: end" in output  # the job's own verdict
        assert "AirflowFailException: plan: the plan is for dataset 'company_ceos'" in output  # the operator's

        rows = []
        for layer, where in (("batch", "TRUE"), ("quarantine", "_layer = 'batch'")):
            rows += query(open_table(config.table_path(ds, layer)), f"SELECT _partition, _offset FROM t WHERE {where}")
        assert sorted((r["_partition"], r["_offset"]) for r in rows) == sorted(
            (r.partition, o) for r in ranges for o in range(r.start, r.end))
    finally:
        kafka.stop()
