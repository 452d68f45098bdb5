"""A small client of Airflow 3's REST API: trigger a DAG run and wait for it (demo, ops)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import datetime

from loglake.core.errors import LoglakeError, ProcessError


class AirflowClient:
    """Bearer-token REST calls against ``base_url`` (``POST /auth/token`` first)."""

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body: dict | None = None, ok_missing: bool = False):
        req = urllib.request.Request(
            f"{self.base_url}/api/v2{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            if ok_missing and e.code == 404:
                return None
            raise LoglakeError(f"Airflow {method} {path} answered {e.code}: {e.read().decode(errors='replace')}") \
                from None

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict:
        """Wait until the dag-processor has parsed ``dag_id``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dag = self.call("GET", f"/dags/{dag_id}", ok_missing=True)
            if dag:
                return dag
            time.sleep(1)
        raise ProcessError(f"Airflow did not list DAG {dag_id} within {timeout:.0f}s (see the dag-processor log)")

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """Unpause ``dag_id`` and start a run now; returns its run id."""
        self.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900.0) -> dict:
        """Wait for the run to finish; returns it (``state`` success or failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(1)
        raise ProcessError(f"DAG run {dag_id}/{run_id} did not finish within {timeout:.0f}s")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1):
        entry = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                                 f"return_value?map_index={map_index}", ok_missing=True)
        return None if entry is None else entry.get("value")


def run_seconds(run: dict) -> float:
    """Wall time of a finished DAG run, from its start to its end."""
    start = datetime.fromisoformat(run["start_date"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(run["end_date"].replace("Z", "+00:00"))
    return (end - start).total_seconds()
