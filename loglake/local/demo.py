"""``loglake demo``: the whole platform on one machine, and what it shows.

Kafka, the speed streams and Airflow come up; sample events are produced; the speed
layer is checked exact; the scheduled ``loglake_batch`` run writes, validates (quality
gate), publishes, diffs and audits every dataset; ``loglake_maintenance`` compacts,
expires and vacuums while the streams run, then audits again; finally a query over the
serving view is compared with a full recompute from the log.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from loglake.core.config import Config, Dataset
from loglake.core.processes import wait_for
from loglake.jobs.launch import job_env
from loglake.jobs.registry import job
from loglake.jobs.summaries import BatchSummary, JobSummary, QualitySummary
from loglake.kafka.admin import dataset_state, log_bounds
from loglake.ledger.results import last_maintenance
from loglake.tables import layer_table, query, table_counts
from loglake.local import stack
from loglake.local.airflow_client import AirflowClient, run_seconds
from loglake.local.airflow_standalone import EmbeddedAirflow
from loglake.local.produce import produce
from loglake.maintenance.runs import format_log_rows
from loglake.ops.audit_report import AuditResult
from loglake.ops.diff import DiffResult
from loglake.speed.control import streams

# Over the provenance columns every dataset has: rows, distinct offsets and their span per partition.
DEMO_SQL = ("SELECT _partition, count(*) AS rows, count(DISTINCT _offset) AS offsets, min(_offset) AS first, "
            "max(_offset) AS last FROM {view} GROUP BY _partition ORDER BY _partition")


def wait_caught_up(config: Config, timeout: float = 300.0) -> None:
    for stream in streams(config):
        wait_for(lambda: all(s.speed_position == s.end for s in dataset_state(config, stream.ds)), timeout,
                 f"speed {stream.ds.name} to reach the log end", 1.0, log=stream.process)


def _client(config: Config):
    airflow = EmbeddedAirflow(config)
    return airflow, AirflowClient(airflow.url, airflow.token())


# What each task of loglake's DAGs returns (its XCom), read back into the value it was made from.
TASK_VALUES = {
    "dataset.recompute": job("batch").parse,
    "dataset.quality": job("quality").parse,
    "dataset.maintain": job("maintenance").parse,
    "dataset.diff": lambda v: [DiffResult.from_dict(d) for d in v],
    "dataset.audit": AuditResult.from_dict,
}


@dataclass(frozen=True)
class TaskRun:
    """One task instance of a DAG run: its state, duration, and its return value as the typed
    value the task made (a job's summary, the diffs, the audit), None when it returned none."""

    task_id: str
    name: str  # the mapped task's dataset (its rendered map index)
    state: str
    duration: float | None
    value: Any = None


@dataclass(frozen=True)
class DagRun:
    run_id: str
    state: str
    wall: float
    tasks: tuple[TaskRun, ...]

    def values(self, task_id: str, kind: type) -> list:
        """The values of the task ``task_id`` that succeeded with a value of type ``kind``."""
        return [t.value for t in self.tasks if t.task_id == task_id and isinstance(t.value, kind)]


def task_value(task_id: str, value: Any) -> Any:
    """The typed value a task's XCom holds (``TASK_VALUES``); None for none."""
    if value is None or task_id not in TASK_VALUES:
        return None
    return TASK_VALUES[task_id](value)


def dag_run(client, dag_id: str, scheduled: bool) -> dict:
    """Wait for a run of ``dag_id`` (the scheduled one if ``scheduled`` and it starts within
    a minute, else a triggered one); its state, wall time, and per task its duration and
    return value as the REST API gives it, keyed ``(task_id, dataset)`` (``typed_run`` reads it)."""

    client.wait_for_dag(dag_id)
    runs = []
    deadline = time.monotonic() + (60 if scheduled else 0)
    while scheduled and time.monotonic() < deadline and not runs:
        runs = client.call("GET", f"/dags/{dag_id}/dagRuns?order_by=-start_date&limit=1")["dag_runs"]
        time.sleep(1)
    run_id = runs[0]["dag_run_id"] if runs else client.trigger(dag_id)
    run = client.wait_run(dag_id, run_id)
    tasks = {}
    for ti in client.task_instances(dag_id, run_id):
        value = client.xcom(dag_id, run_id, ti["task_id"], ti["map_index"]) if ti["state"] == "success" else None
        tasks[ti["task_id"], ti.get("rendered_map_index") or str(ti["map_index"])] = {
            "state": ti["state"], "duration": ti.get("duration"), "value": value}
    return {"run_id": run_id, "state": run["state"], "wall": run_seconds(run), "tasks": tasks}


def typed_run(run: dict) -> DagRun:
    """``dag_run``'s record with each task's value read back into its type."""
    tasks = [TaskRun(task_id, name, t["state"], t["duration"], task_value(task_id, t["value"]))
             for (task_id, name), t in run["tasks"].items()]
    return DagRun(run["run_id"], run["state"], run["wall"], tuple(sorted(tasks, key=lambda t: (t.task_id, t.name))))


def _spark_overhead(run: DagRun) -> tuple[float, float | None]:
    """(the Spark tasks' submission wall in total, mean Airflow overhead per Spark task)."""
    spark, overheads = 0.0, []
    for t in run.tasks:
        if isinstance(t.value, JobSummary) and t.value.submit_seconds is not None and t.duration is not None:
            spark += t.value.submit_seconds
            overheads.append(t.duration - t.value.submit_seconds)
    return spark, (sum(overheads) / len(overheads) if overheads else None)


def report_batch(run: DagRun) -> bool:
    spark, overhead = _spark_overhead(run)
    print(f"loglake_batch run {run.run_id}: {run.state} in {run.wall:.1f}s, of which Spark jobs "
          f"{spark:.1f}s (submission wall)"
          + (f"; Airflow overhead per Spark task (task wall - submission wall) {overhead:.1f}s" if overhead else ""))
    for t in run.tasks:
        if t.state != "success":
            print(f"  {t.task_id}[{t.name}]: {t.state}")
        elif isinstance(t.value, BatchSummary):
            print(format_recompute(t.name, t.value))
        elif isinstance(t.value, QualitySummary):
            print(format_quality(t.name, t.value))
    for diffs in run.values("dataset.diff", list):
        for d in diffs:
            print(f"  diff    {d.dataset}[{d.partition}] [{d.start}, {d.end}): "
                  f"{d.missing_in_speed.count} missing in speed, "
                  f"{d.missing_in_batch.count if d.missing_in_batch else '-'} missing in batch, "
                  f"{d.changed.rows} changed")
    for a in run.values("dataset.audit", AuditResult):
        print_audit(a)
    return run.state == "success"


def format_recompute(name: str, v: BatchSummary) -> str:
    rate = f"{v.records_per_second:,} records/s" if v.records_per_second else "n/a"
    where = "in the shared Spark application" if v.shared_application else "spark-submit"
    waited = f" (of which {v.start_wait_seconds}s waiting for it to start)" if v.start_wait_seconds else ""
    return (f"  write   {name}: {v.records} rows, {v.quarantined} quarantined in {v.seconds}s ({rate}), "
            f"{where} {v.submit_seconds}s{waited}")


def format_quality(name: str, v: QualitySummary) -> str:
    warned = "; ".join(f"{w.expectation}({w.column}) {w.unexpected_count} unexpected" for w in v.warned)
    return (f"  quality {name}: {v.expectations} expectation(s) on {v.rows} rows: "
            f"{'published' if v.published else 'NOT published'}" + (f"; warnings: {warned}" if warned else ""))


def print_audit(a: AuditResult) -> None:
    print(f"  audit   {a.dataset}: {'ok' if a.ok else 'FAILED'}: {a.offsets_checked:,} offsets checked, "
          f"{a.missing} missing, {a.duplicated} duplicated, {a.unexpected} unexpected")


def report_maintenance(config: Config, run: DagRun) -> bool:
    spark, _overhead = _spark_overhead(run)
    print(f"loglake_maintenance run {run.run_id}: {run.state} in {run.wall:.1f}s (Spark jobs {spark:.1f}s), "
          "while the streams write:")
    for ds in config.datasets.values():
        rows = last_maintenance(config, ds)
        if rows:
            print("\n".join(format_log_rows(rows)))
    for t in run.tasks:
        if t.state != "success":
            print(f"  {t.task_id}[{t.name}]: {t.state}")
        elif isinstance(t.value, AuditResult):
            print_audit(t.value)
    return run.state == "success"


def batch_quarantined(config: Config, ds: Dataset) -> int:
    t = layer_table(config, ds, "quarantine")
    return 0 if t is None else query(t, "SELECT count(*) AS n FROM t WHERE _layer = 'batch'")[0]["n"]


def run_demo(config: Config, count: int, bad_fraction: float) -> int:
    t0 = time.monotonic()
    if config.kafka.embedded:
        stack.broker(config).start()
    for ds in config.datasets.values():
        n = count if ds.kind == "events" else max(count // 10, 100)
        res = produce(config, ds, n, bad_fraction=bad_fraction, progress=True)
        print(f"produced {res.records} records to {ds.topic}: {res.good} good, {res.bad} malformed "
              f"({res.rate:,.0f} records/s)")
    stack.up(config)
    wait_caught_up(config)
    print("speed layer: every stream at the log end")
    ok = True
    for ds in config.datasets.values():
        counts = table_counts(config, ds)
        log_total = sum(hi - lo for lo, hi in log_bounds(config, ds.topic).values())
        speed_quarantined = counts["quarantine"] - batch_quarantined(config, ds)
        exact = counts["speed"] + speed_quarantined == log_total
        print(f"  {ds.name}: log {log_total} records = speed {counts['speed']} + speed quarantine "
              f"{speed_quarantined}: {'yes' if exact else 'NO'}")
        ok &= exact

    airflow, client = _client(config)
    print("\nairflow: waiting for the scheduled loglake_batch run (write → quality → publish, diff, audit) ...")
    ok &= report_batch(typed_run(dag_run(client, "loglake_batch", scheduled=True)))
    print("\nairflow: triggering loglake_maintenance (expire, optimize, vacuum; then audit) ...")
    ok &= report_maintenance(config, typed_run(dag_run(client, "loglake_maintenance", scheduled=False)))

    ok &= compare_serving_view(config)
    print(f"\nthe loglake page: {airflow.url}/plugin/loglake (every layer per partition, quality, audit, "
          f"tables; Data Docs at {airflow.url}/loglake/docs/)")
    print(f"demo: {'OK' if ok else 'MISMATCH'} in {time.monotonic() - t0:.1f}s; the platform is still up "
          "(`loglake status`; `make down` stops it)")
    return 0 if ok else 1


def compare_serving_view(config: Config) -> bool:
    """A query over the serving view, and the same over a full recompute from the log
    (``loglake/batch/compare.py``, a Spark driver of its own, over every events dataset)."""
    r = subprocess.run([sys.executable, "-m", "loglake.batch.compare", DEMO_SQL], env=job_env(config, False),
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode not in (0, 1):
        print(f"the comparison failed (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:] or ''}")
    return r.returncode == 0
