"""P9 batch freshness: the wall of a ``loglake_batch`` run, from its trigger to its end.

The runs (``bench.dag_runs``) on the bench's own platform (``bench.platform_run``), each over
20,000 new records in each dataset once the speed streams have caught up with them, as many
as fit the budget; per task its queueing and, for a Spark task, its start, work and phases.
"""

from __future__ import annotations

from bench.dag_runs import phase_order, row_text, seconds_text
from bench.harness import Harness, median, result
from bench.platform_run import failed, measured, report
from bench.stack import GIB

TITLE = "batch freshness: loglake_batch run wall"


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P9" not in only:
        return []
    figures = measured(h, only)
    if "error" in figures.batch:
        return report(failed("P9", TITLE, "s", figures.batch["error"]), figures)
    return report(_p9(figures.batch), figures)


def _median_rows(runs: list[dict]) -> list[dict]:
    """Per task (and dataset), the median of each figure over ``runs``' breakdowns, in start order."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        for row in r["breakdown"]:
            groups.setdefault((row["task"], row["dataset"]), []).append(row)
    out = []
    for (task, ds), rows in groups.items():
        m = {"task": task, "dataset": ds, "runs": len(rows)}
        for k in ("scheduled", "start", "end", "duration", "scheduled_to_queued", "queued_to_running",
                  "submit_seconds", "seconds", "start_overhead", "session_seconds", "submit_other",
                  "airflow_overhead", "records", "rows"):
            vals = [row[k] for row in rows if row.get(k) is not None]
            if vals:
                m[k] = round(median(vals), 2)
        phases = phase_order(p for row in rows for p in row.get("phases") or {})
        if phases:
            m["phases"] = {p: round(median([row["phases"][p] for row in rows if p in (row.get("phases") or {})]), 2)
                           for p in phases}
        shared = [row["shared_application"] for row in rows if "shared_application" in row]
        if shared:
            m["shared_application"] = shared[0] if len(set(shared)) == 1 else "mixed"
            m["shared_runs"] = sum(shared)
        out.append(m)
    return sorted(out, key=lambda m: (m.get("start") is None, m.get("start") or 0, m["task"], m["dataset"] or ""))


def _gantt(run: dict, title: str) -> dict:
    """One run's tasks as a timeline (hbar chart): waiting, then the task's parts, from when it was scheduled."""
    rows = run["breakdown"]
    phases = phase_order(p for r in rows for p in r.get("phases") or {})
    seg = {k: [] for k in ("waiting (scheduled → running)", "Airflow (task − submit)", "JVM/session start",
                           "submit, other" if any(r.get("session_seconds") is not None for r in rows)
                           else "_unused", *phases, "job work" if not phases else "job work, other",
                           "Python task")}
    seg.pop("_unused", None)
    labels, left, notes = [], [], []
    for r in rows:
        labels.append(r["task"] + (f" {r['dataset']}" if r.get("dataset") else ""))
        notes.append(f"{seconds_text(r.get('duration'))} s" + (" (shared app)" if r.get("shared_application") else ""))
        wait = (r.get("scheduled_to_queued") or 0) + (r.get("queued_to_running") or 0)
        left.append(max(0.0, (r.get("start") or 0) - wait))
        spark = r.get("submit_seconds") is not None
        session = r.get("session_seconds")
        parts = {"waiting (scheduled → running)": wait,
                 "Airflow (task − submit)": max(0.0, r.get("airflow_overhead") or 0) if spark else 0,
                 "JVM/session start": (session if session is not None else r.get("start_overhead")) if spark else 0,
                 "submit, other": r.get("submit_other") if spark else 0,
                 "Python task": 0 if spark else r.get("duration") or 0}
        ph = r.get("phases") or {}
        for p in phases:
            parts[p] = ph.get(p, 0)
        work = (r.get("seconds") or 0) - sum(ph.values()) if spark else 0
        parts["job work, other" if phases else "job work"] = max(0.0, work)
        for k in seg:
            seg[k].append(max(0.0, parts.get(k) or 0))
    import matplotlib

    palette = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab20b"].colors[::2]]
    colors = {"waiting (scheduled → running)": "#d9d9d9", "Airflow (task − submit)": "#ff7f0e",
              "JVM/session start": "#d62728", "submit, other": "#f7b6d2", "job work": "#1f77b4",
              "job work, other": "#9edae5", "Python task": "#2ca02c",
              **{p: palette[i % len(palette)] for i, p in enumerate(phases)}}
    return {"kind": "hbar", "labels": labels, "left": left, "segments": seg, "notes": notes, "colors": colors,
            "width": 10,
            "xlabel": "seconds after the DAG run started",
            "title": f"{title}: wall {run['wall']:.0f}s; each task from when it was scheduled"}


def _p9(batch: dict) -> dict:
    measured = [r for r in batch["runs"] if r["kind"] == "measured"]
    ok = [r for r in measured if r["state"] == "success"]
    walls = [r["wall"] for r in ok]
    value = round(median(walls), 1) if walls else None
    rows = _median_rows(ok)
    spark_rows = [row for r in ok for row in r["breakdown"]]
    q2r = [row["queued_to_running"] for row in spark_rows if row.get("queued_to_running") is not None]
    s2q = [row["scheduled_to_queued"] for row in spark_rows if row.get("scheduled_to_queued") is not None]
    to_start = [r["trigger_to_start"] for r in ok if r["trigger_to_start"] is not None]
    covered = [r["watermark"]["trigger_to_covered"] for r in ok if r["watermark"]["trigger_to_covered"] is not None]
    pss = batch.get("pss") or []
    n = next(iter(batch["sizes"].values()), 0)
    detail = {"what": "a loglake_batch DAG run triggered through Airflow's REST API (demo.dag_run) on the platform "
                      "`loglake up` started, speed streams running beside it, after "
                      f"{n:,} new records in each of {', '.join(batch['sizes'])} (2 % malformed) were produced and "
                      "the streams had caught up with them. Value: the DAG run's wall (start → end), median over the "
                      "successful runs. Per task: scheduled → queued → running (the TI's timestamps), duration; for "
                      "the Spark tasks their summary's submit_seconds (the submission's wall seen by the task), "
                      "seconds (the job's own work), start_overhead = submit − work (JVM/session start and submit "
                      "overhead), and where present session_seconds, phases, shared_application; airflow_overhead = "
                      "task − submit. trigger_to_covered: seconds from the trigger (the run's queued_at) until the "
                      "batch watermark (ledger.batch_watermarks, polled every second) covers the log ends read "
                      "before the trigger — when a reader sees the records in the batch layer",
              "records_per_dataset_per_run": batch["sizes"], "runs": len(measured), "successful_runs": len(ok),
              "run_walls": [round(r["wall"], 1) for r in measured], "run_states": [r["state"] for r in measured],
              "trigger_to_start_median": round(median(to_start), 2) if to_start else None,
              "trigger_to_watermark_median": round(median(covered), 1) if covered else None,
              "task_medians": rows,
              "queued_to_running_median": round(median(q2r), 2) if q2r else None,
              "scheduled_to_queued_median": round(median(s2q), 2) if s2q else None,
              "scheduled_to_queued_max": round(max(s2q), 2) if s2q else None,
              "spark_seconds_per_run": [round(r["spark_seconds"], 1) for r in measured],
              "pss_max_gib_during_runs": round(max(s["total"] for s in pss) / GIB, 2) if pss else None}
    backlog_runs = [r for r in batch["runs"] if r["kind"] == "backlog"]
    if backlog_runs:
        b = backlog_runs[0]
        detail["backlog_run"] = {"records_before": batch["backlog"], "run_id": b["run_id"], "state": b["state"],
                                 "wall": round(b["wall"], 1), "breakdown": b["breakdown"],
                                 "why": "the records P8 produced, not yet in the batch layer: absorbed by a first "
                                        "run (counted for P5 and P8) so that each P9 run is over the same new records"}
    for k in ("note", "failed_after"):
        if batch.get(k):
            detail[k] = batch[k]
    typical = min(ok, key=lambda r: abs(r["wall"] - value)) if ok else None
    m = result("P9", TITLE, value, "s", goal="<= 60", met=None if value is None else value <= 60,
               reference={"trigger → watermark covers the records": f"{detail['trigger_to_watermark_median']}s",
                          "trigger → run start": f"{detail['trigger_to_start_median']}s"},
               runs=[{"run_id": r["run_id"], "state": r["state"], "wall": round(r["wall"], 1),
                      "trigger_to_start": r["trigger_to_start"], "watermark": r["watermark"],
                      "produced": r["produced"], "produce_seconds": r["produce_seconds"],
                      "catch_up_seconds": r["catch_up_seconds"], "streams_running": r["streams_running"],
                      "spark_seconds": round(r["spark_seconds"], 1), "tasks": r["breakdown"]} for r in measured],
               detail=detail,
               chart=None if typical is None else {"kind": "panels", "height": 5, "panels": [
                   _gantt(typical, f"run {measured.index(typical) + 1} of {len(measured)} (median wall)"),
                   {"kind": "bar", "labels": [f"run {i + 1}" for i in range(len(measured))] + ["→ watermark"],
                    "values": [round(r["wall"], 1) for r in measured] + [detail["trigger_to_watermark_median"] or 0],
                    "goal": 60, "ylabel": "seconds", "width": 4,
                    "title": "DAG run wall per run; trigger → watermark (median)"}]})
    diffs = [row for row in rows if row["task"] in ("diff", "audit")]
    parts = [row_text(row) for row in rows if row["task"] not in ("diff", "audit")]
    for task in ("diff", "audit"):
        d = [row["duration"] for row in diffs if row["task"] == task and row.get("duration") is not None]
        if d:
            parts.append(f"{task} {'/'.join(seconds_text(x) for x in d)} s")
    waits = [row for row in rows if row.get("scheduled_to_queued") is not None]
    longest = max(waits, key=lambda row: row["scheduled_to_queued"]) if waits else None
    m["summary"] = ((f"run wall {value} s (median of {len(ok)}, {n:,} new records per dataset): " + ", ".join(parts)
                     + f"; trigger→start {detail['trigger_to_start_median']} s; watermark covers the records "
                     f"{detail['trigger_to_watermark_median']} s after the trigger; queued→running median "
                     f"{detail['queued_to_running_median']} s"
                     + (f", scheduled→queued up to {seconds_text(longest['scheduled_to_queued'])} s "
                        f"({longest['task']}{' ' + longest['dataset'] if longest['dataset'] else ''})"
                        if longest and longest["scheduled_to_queued"] >= 1 else ""))
                    if ok else f"no successful run ({', '.join(r['state'] for r in measured) or 'none'})")
    if batch.get("note") or batch.get("failed_after"):
        m["summary"] += f" ({batch.get('note') or ''}{'; ' if batch.get('note') and batch.get('failed_after') else ''}"
        m["summary"] += (f"failed after: {batch['failed_after'][:120]}" if batch.get("failed_after") else "") + ")"
    return m
