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

from loglake.core.config import Config, Dataset
from loglake.core.processes import wait_for
from loglake.jobs.launch import job_env
from loglake.kafka.admin import dataset_state, log_bounds
from loglake.ledger.results import last_maintenance
from loglake.ledger.tables import open_table, query, table_counts
from loglake.local import stack
from loglake.local.airflow_client import AirflowClient, run_seconds
from loglake.local.airflow_standalone import EmbeddedAirflow
from loglake.local.produce import produce
from loglake.maintenance.runs import format_log_rows
from loglake.ops.audit import AuditResult
from loglake.ops.diff import DiffResult
from loglake.speed.streams import streams

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


def dag_run(client, dag_id: str, scheduled: bool) -> dict:
    """Wait for a run of ``dag_id`` (the scheduled one if ``scheduled`` and it starts within
    a minute, else a triggered one); its state, wall time, and per task its duration and
    return value, keyed ``(task_id, dataset)``."""

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


def _spark_overhead(run: dict) -> tuple[float, float | None]:
    """(spark-submit seconds in total, mean Airflow overhead per Spark task)."""
    spark, overheads = 0.0, []
    for t in run["tasks"].values():
        v = t["value"]
        if isinstance(v, dict) and v.get("submit_seconds") is not None and t["duration"] is not None:
            spark += v["submit_seconds"]
            overheads.append(t["duration"] - v["submit_seconds"])
    return spark, (sum(overheads) / len(overheads) if overheads else None)


def report_batch(run: dict) -> bool:
    spark, overhead = _spark_overhead(run)
    print(f"loglake_batch run {run['run_id']}: {run['state']} in {run['wall']:.1f}s, of which Spark jobs "
          f"{spark:.1f}s (submission wall)"
          + (f"; Airflow overhead per Spark task (task wall - submission wall) {overhead:.1f}s" if overhead else ""))
    for (task_id, name), t in sorted(run["tasks"].items()):
        v = t["value"] or {}
        if t["state"] != "success":
            print(f"  {task_id}[{name}]: {t['state']}")
        elif task_id == "dataset.recompute":
            rate = v.get("records_per_second")
            print(f"  write   {name}: {v.get('records')} rows, {v.get('quarantined')} quarantined in "
                  f"{v.get('seconds')}s ({f'{rate:,} records/s' if rate else 'n/a'}), "
                  f"{'in the shared Spark application' if v.get('shared_application') else 'spark-submit'} "
                  f"{v.get('submit_seconds')}s"
                  + (f" (of which {v['start_wait_seconds']}s waiting for it to start)"
                     if v.get("start_wait_seconds") else ""))
        elif task_id == "dataset.quality":
            warned = "; ".join(f"{w['expectation']}({w['column']}) {w['unexpected_count']} unexpected"
                               for w in v.get("warned", []))
            print(f"  quality {name}: {v.get('expectations')} expectation(s) on {v.get('rows')} rows: "
                  f"{'published' if v.get('published') else 'NOT published'}" + (f"; warnings: {warned}" if warned else ""))
    for (task_id, _i), t in sorted(run["tasks"].items()):
        if task_id == "dataset.diff" and t["value"]:
            for d in map(DiffResult.from_dict, t["value"]):
                print(f"  diff    {d.dataset}[{d.partition}] [{d.start}, {d.end}): "
                      f"{d.missing_in_speed.count} missing in speed, "
                      f"{d.missing_in_batch.count if d.missing_in_batch else '-'} missing in batch, "
                      f"{d.changed.rows} changed")
        elif task_id == "dataset.audit" and t["value"]:
            print_audit(AuditResult.from_dict(t["value"]))
    return run["state"] == "success"


def print_audit(a: AuditResult) -> None:
    print(f"  audit   {a.dataset}: {'ok' if a.ok else 'FAILED'}: {a.offsets_checked:,} offsets checked, "
          f"{a.missing} missing, {a.duplicated} duplicated, {a.unexpected} unexpected")


def report_maintenance(config: Config, run: dict) -> bool:
    spark, _overhead = _spark_overhead(run)
    print(f"loglake_maintenance run {run['run_id']}: {run['state']} in {run['wall']:.1f}s (Spark jobs {spark:.1f}s), "
          "while the streams write:")
    for ds in config.datasets.values():
        rows = last_maintenance(config, ds)
        if rows:
            print("\n".join(format_log_rows(rows)))
    for (task_id, name), t in sorted(run["tasks"].items()):
        if task_id == "dataset.audit" and t["value"]:
            print_audit(AuditResult.from_dict(t["value"]))
        elif t["state"] != "success":
            print(f"  {task_id}[{name}]: {t['state']}")
    return run["state"] == "success"


def batch_quarantined(config: Config, ds: Dataset) -> int:
    t = open_table(config.table_path(ds, "quarantine"))
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
    ok &= report_batch(dag_run(client, "loglake_batch", scheduled=True))
    print("\nairflow: triggering loglake_maintenance (expire, optimize, vacuum; then audit) ...")
    ok &= report_maintenance(config, dag_run(client, "loglake_maintenance", scheduled=False))

    ok &= compare_serving_view(config)
    print(f"\nthe loglake page: {airflow.url}/plugin/loglake (every layer per partition, quality, audit, "
          f"tables; Data Docs at {airflow.url}/loglake/docs/)")
    print(f"demo: {'OK' if ok else 'MISMATCH'} in {time.monotonic() - t0:.1f}s; the platform is still up "
          "(`loglake status`; `make down` stops it)")
    return 0 if ok else 1


def compare_serving_view(config: Config) -> bool:
    """A query over the serving view, and the same over a full recompute from the log
    (``spark_jobs/compare.py``, a Spark driver of its own, over every events dataset)."""
    r = subprocess.run([sys.executable, "-m", "spark_jobs.compare", DEMO_SQL], env=job_env(config, False),
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode not in (0, 1):
        print(f"the comparison failed (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:] or ''}")
    return r.returncode == 0
