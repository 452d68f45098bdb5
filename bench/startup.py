"""P7 warm start-up: ``loglake up`` until every component of the platform is healthy.

Measured on the bench's own platform (``bench.platform_run``): a cold start, then ``repeats``
``down`` → warm ``up`` cycles, each timed per component (``bench.stack.Platform.up``).
"""

from __future__ import annotations

from bench.harness import Harness, median, result
from bench.platform_run import measured, report

TITLE = "warm start-up to healthy"


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P7" not in only:
        return []
    figures = measured(h, only)
    return report(_p7(figures.ups, figures.cold, figures.downs), figures)


def _timeline(u: dict) -> dict[str, float]:
    """Seconds after `loglake up` started at which each part of one start was ready."""
    c = u["components"]
    out = {"kafka": c.get("kafka")}
    out.update({f"airflow {j.replace('Job', '').lower().replace('dagprocessor', 'dag-processor')} job":
                v for j, v in u["airflow_jobs_started"].items()})
    out["airflow api-server answers"] = c.get("airflow-api-server")
    airflow = [v for k, v in c.items() if k.startswith("airflow-")]
    out["airflow all healthy"] = max(airflow) if len(airflow) == 5 else None
    for k, v in c.items():
        if k.startswith("speed-"):
            b = u["speed_probe_batches"].get(k[len("speed-"):], {})
            if b.get("started") is not None:
                out[f"{k} micro-batch start"] = b["started"]
            out[f"{k} healthy"] = v
    return {k: v for k, v in out.items() if v is not None}


def _p7(ups: list[dict], cold: dict, downs: list[dict]) -> dict:
    totals = [u["seconds"] for u in ups if u["seconds"] is not None]
    value = round(median(totals), 1) if totals else None
    lines = [_timeline(u) for u in ups]
    keys = sorted({k for t in lines for k in t}, key=lambda k: median([t[k] for t in lines if k in t]))
    per_comp = {k: round(median([t[k] for t in lines if k in t]), 1) for k in keys}
    healthy = {k: v for k, v in per_comp.items() if k == "kafka" or k.endswith("healthy")}
    last = max(healthy, key=healthy.get) if healthy else "-"
    m = result("P7", TITLE, value, "s", goal="<= 60", met=None if value is None else value <= 60,
               reference={"cold start (format, migrate)": cold["seconds"],
                          "slowest component": f"{last} {per_comp.get(last)}s"},
               runs=[{"seconds": u["seconds"], "up_command_seconds": u["up_command_seconds"],
                      "timeline": t} for u, t in zip(ups, lines)],
               detail={"what": "`loglake up` (subprocess) until Kafka answers, every speed stream has committed a "
                               "micro-batch holding a probe record produced once Kafka answers, and Airflow's health "
                               "endpoint reports metadatabase, scheduler, dag-processor and triggerer healthy; warm = "
                               "jars, venv, Kafka storage, topics, checkpoints and migrated Airflow DB already there "
                               "(a cold up/down before); repo `local` profile settings. Timeline: seconds after the "
                               "start; 'job' = when an Airflow component registered its job in the metadata DB; "
                               "'micro-batch start' = when the speed micro-batch that held the probe started",
                       "timeline_median_seconds": per_comp,
                       "up_command_median_seconds": round(median([u["up_command_seconds"] for u in ups]), 1),
                       "airflow_lines": [u["airflow_line"] for u in ups],
                       "speed_probe_batches": [u["speed_probe_batches"] for u in ups],
                       "cold": {**cold, "timeline": _timeline(cold)},
                       "downs": downs},
               chart={"kind": "panels", "panels": [
                   {"kind": "bar", "labels": [f"run {i + 1}" for i in range(len(ups))],
                    "values": [u["seconds"] or 0 for u in ups], "goal": 60, "ylabel": "seconds to all healthy",
                    "title": "warm up → all healthy, per run"},
                   {"kind": "bar", "labels": list(per_comp), "values": list(per_comp.values()), "goal": 60,
                    "ylabel": "seconds after `loglake up`", "title": "median timeline of a warm start",
                    "rotate": 60}]})
    m["summary"] = (f"median of {len(ups)}; ready after (median s): "
                    + ", ".join(f"{k} {v}" for k, v in healthy.items())
                    + f"; `up` returns after {m['detail']['up_command_median_seconds']}s; cold {cold['seconds']}s")
    return m
