"""P5 orchestration overhead: per Spark task of ``loglake_batch``, the Airflow task's duration
minus the spark-submit wall time its summary carries.

Read from the loglake_batch runs P9 measures (``bench.dag_runs``) on the bench's own platform
(``bench.platform_run``), and the first run that absorbed P8's events where there was one.
"""

from __future__ import annotations

from bench.harness import Harness, median, result
from bench.platform_run import failed, measured, report

TITLE = "Airflow overhead per Spark task"


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P5" not in only:
        return []
    figures = measured(h, only)
    if "error" in figures.batch:
        return report(failed("P5", TITLE, "s", figures.batch["error"]), figures)
    return report(_p5(figures.batch), figures)


def _p5(batch: dict) -> dict:
    tasks = []  # one row per task of every run
    for r in batch["runs"]:
        for (task_id, name), t in r["tasks"].items():
            v = t["value"] if isinstance(t["value"], dict) else {}
            spark = v.get("submit_seconds")
            row = {"run": r["run_id"], "task": task_id.split(".")[-1], "dataset": r.get("names", {}).get(name, name),
                   "state": t["state"],
                   "duration": t["duration"], "submit_seconds": spark, "app_seconds": v.get("seconds"),
                   **r["timing"].get((task_id, name), {})}
            if spark is not None and t["duration"] is not None:
                row["overhead"] = round(t["duration"] - spark, 3)
            tasks.append(row)
    spark_tasks = [t for t in tasks if "overhead" in t]
    types = sorted({t["task"] for t in spark_tasks})
    per_type = {k: round(median([t["overhead"] for t in spark_tasks if t["task"] == k]), 2) for k in types}
    value = round(median([t["overhead"] for t in spark_tasks]), 2) if spark_tasks else None
    other = {k: round(median([t["duration"] for t in tasks if t["task"] == k and t["duration"] is not None]), 2)
             for k in sorted({t["task"] for t in tasks if "overhead" not in t and t["duration"] is not None})}
    latency = [t["queued_to_running"] for t in tasks if t.get("queued_to_running") is not None]
    sched = [t["scheduled_to_queued"] for t in tasks if t.get("scheduled_to_queued") is not None]
    detail = {"what": "per Spark task of loglake_batch (recompute, quality per dataset): Airflow task duration minus "
                      "the spark-submit wall time its XCom summary carries (demo._spark_overhead's measure); the runs "
                      "P9 measures (triggered through the REST API on the platform `loglake up` started, fresh events "
                      "before each), and the first run that absorbed P8's events where there was one",
              "events_per_run": batch["sizes"], "runs": len(batch["runs"]), "spark_tasks": len(spark_tasks),
              "overhead_median_per_type": per_type,
              "overhead_max": max((t["overhead"] for t in spark_tasks), default=None),
              "task_minus_app_seconds_median": round(median(
                  [t["duration"] - t["app_seconds"] for t in spark_tasks if t["app_seconds"] is not None]), 2)
              if any(t["app_seconds"] is not None for t in spark_tasks) else None,
              "python_task_duration_median": other,
              "queued_to_running_median": round(median(latency), 2) if latency else None,
              "scheduled_to_queued_median": round(median(sched), 2) if sched else None,
              "run_walls": [round(r["wall"], 1) for r in batch["runs"]],
              "run_spark_seconds": [round(r["spark_seconds"], 1) for r in batch["runs"]],
              "run_states": [r["state"] for r in batch["runs"]], "tasks": tasks}
    if batch["note"]:
        detail["note"] = batch["note"]
    if any(r.get("kind") == "backlog" for r in batch["runs"]):
        detail["first_run_absorbed"] = batch["backlog"]
    m = result("P5", TITLE, value, "s", goal="<= 5",
               met=None if value is None else value <= 5,
               reference={k: f"{v}s" for k, v in per_type.items()},
               runs=[{"run_id": r["run_id"], "state": r["state"], "wall": round(r["wall"], 1),
                      "spark_seconds": round(r["spark_seconds"], 1),
                      "mean_overhead": None if r["mean_overhead"] is None else round(r["mean_overhead"], 2)}
                     for r in batch["runs"]],
               detail=detail,
               chart={"kind": "panels", "panels": [
                   {"kind": "bar", "labels": list(per_type) + ["all"], "values": list(per_type.values()) + [value or 0],
                    "goal": 5, "ylabel": "seconds (task wall − spark-submit wall)",
                    "title": f"median over {len(spark_tasks)} Spark tasks of {len(batch['runs'])} run(s)"},
                   {"kind": "bar", "labels": list(other) + ["queued→running"],
                    "values": list(other.values()) + [detail["queued_to_running_median"] or 0],
                    "ylabel": "seconds", "title": "Python tasks (whole duration), queueing latency (median)"}]})
    m["summary"] = (f"median of {len(spark_tasks)} Spark tasks in {len(batch['runs'])} run(s): "
                    + ", ".join(f"{k} {v}s" for k, v in per_type.items())
                    + f"; queued→running {detail['queued_to_running_median']}s"
                    + (f" ({batch['note']})" if batch["note"] else ""))
    return m
