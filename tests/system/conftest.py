"""Whole DAG runs: ``airflow dags test`` in a subprocess against the real broker, Spark and Delta.

Airflow's configuration is read once per process, so every run is its own process with
the environment ``loglake.local.airflow_env.airflow_env`` builds for the test's config
(its conf/ dir, state dir and topics); the metadata DB is shared by a module's tests.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loglake.local.airflow_env import airflow_bin, airflow_env
from loglake.testing import NO_BROKER, make_config

# DAGs that only tests run (tests/system/dags/), with loglake's plugins like the real ones.
REPO_DAGS_TESTS = Path(__file__).resolve().parent / "dags"


@dataclass
class DagRunResult:
    """What one ``airflow dags test`` did: exit code, output, wall time, and the run's record."""

    returncode: int
    output: str
    seconds: float
    run_id: str | None
    state: str | None
    tasks: dict[tuple[str, int], dict] = field(default_factory=dict)  # (task_id, map_index) → row
    xcom: dict[tuple[str, int], object] = field(default_factory=dict)  # return values


class AirflowDB:
    """One AIRFLOW_HOME and metadata DB, migrated once; runs DAGs for any loglake config."""

    def __init__(self, home: Path):
        self.home = home

    def env(self, config) -> dict[str, str]:
        return airflow_env(config, home=self.home)

    def migrate(self, config) -> None:
        subprocess.run([airflow_bin(), "db", "migrate"], env=self.env(config), cwd=self.home, check=True,
                       capture_output=True, timeout=300)

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.home / "airflow.db")

    def run_ids(self, dag_id: str) -> set[str]:
        with self._db() as db:
            return {r[0] for r in db.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (dag_id,))}

    def dags_test(self, config, dag_id: str, conf: dict | None = None, timeout: float = 600) -> DagRunResult:
        before = self.run_ids(dag_id)
        cmd = [airflow_bin(), "dags", "test", dag_id] + (["-c", json.dumps(conf)] if conf is not None else [])
        started = time.monotonic()
        proc = subprocess.run(cmd, env=self.env(config), cwd=self.home, capture_output=True, text=True,
                              timeout=timeout)
        seconds = time.monotonic() - started
        new = self.run_ids(dag_id) - before
        result = DagRunResult(proc.returncode, proc.stdout + proc.stderr, seconds, None, None)
        if not new:
            return result
        (result.run_id,) = new
        with self._db() as db:
            (result.state,) = db.execute("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?",
                                         (dag_id, result.run_id)).fetchone()
            for task_id, map_index, state, duration, label, tries in db.execute(
                    "SELECT task_id, map_index, state, duration, rendered_map_index, try_number FROM task_instance "
                    "WHERE dag_id = ? AND run_id = ?", (dag_id, result.run_id)):
                result.tasks[task_id, map_index] = {"state": state, "duration": duration, "label": label,
                                                    "try_number": tries}
            for task_id, map_index, value in db.execute(
                    "SELECT task_id, map_index, value FROM xcom WHERE dag_id = ? AND run_id = ? "
                    "AND key = 'return_value'", (dag_id, result.run_id)):
                result.xcom[task_id, map_index] = json.loads(value)
        return result

    def asset_events(self, run_id: str) -> list[dict]:
        with self._db() as db:
            rows = db.execute(
                "SELECT a.name, a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE e.source_run_id = ? ORDER BY a.name", (run_id,)).fetchall()
        return [{"name": n, "uri": u, "extra": json.loads(x) if x else {}} for n, u, x in rows]


@pytest.fixture(scope="module")
def airflow_db(tmp_path_factory) -> AirflowDB:
    home = tmp_path_factory.mktemp("airflow-home")
    root = tmp_path_factory.mktemp("airflow-migrate")
    db = AirflowDB(home)
    # Migrating needs no broker: any config gives the environment.
    db.migrate(make_config(root, NO_BROKER))
    return db
