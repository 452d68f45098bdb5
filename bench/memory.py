"""P8 memory: the PSS of every process of the platform while events stream in, and while
``loglake_batch`` runs.

Measured on the bench's own platform (``bench.platform_run``): samples every 4 s while
events are produced at a steady rate, and every 5 s during the loglake_batch runs of P5 and P9.
"""

from __future__ import annotations

from bench.harness import Harness, median, result
from bench.platform_run import failed, measured, report
from bench.stack import GIB

TITLE = "platform memory while streaming (PSS)"


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P8" not in only:
        return []
    figures = measured(h, only)
    streaming, batch = figures.streaming, figures.batch
    if "error" in streaming:
        return report(failed("P8", TITLE, "GiB", streaming["error"]), figures)
    return report(_p8(streaming, batch.get("pss") if batch else None), figures)


def _p8(streaming: dict, during_batch: list[dict] | None) -> dict:
    samples = streaming["samples"]
    keys = ["total", "kafka", "speed", "airflow"]
    shared = any(s.get("spark-jobs") for s in samples + (during_batch or []))
    if shared:  # the shared Spark application `loglake up` started for the batch jobs
        keys.append("spark-jobs")
    med = {k: round(median([s[k] for s in samples]) / GIB, 2) for k in keys}
    mx = {k: round(max(s[k] for s in samples) / GIB, 2) for k in keys}
    by_proc = {n: round(median([s["by_process"][n] for s in samples]) / 2**20) for n in samples[0]["by_process"]}
    detail = {"what": "sum of the PSS (psutil memory_full_info) of every process of the platform (broker JVM; the "
                      "speed application running every dataset's stream: its supervisor, driver JVM and Python; the "
                      "shared Spark application of the batch jobs; the four Airflow components "
                      "and all their children) while events are produced at a steady rate",
              "rates_records_per_second": streaming["rates"], "produce_seconds": streaming["seconds"],
              "median_gib": med, "max_gib": mx, "per_process_median_mib": by_proc,
              "processes": samples[-1]["processes"]}
    if during_batch:
        detail["while_loglake_batch_runs"] = {
            "max_gib": {k: round(max(s[k] for s in during_batch) / GIB, 2) for k in keys},
            "median_gib": {k: round(median([s[k] for s in during_batch]) / GIB, 2) for k in keys},
            "samples": len(during_batch)}
    m = result("P8", TITLE, med["total"], "GiB", goal="<= 6",
               met=med["total"] <= 6, reference={"max": mx["total"]},
               runs=[{k: round(s[k] / GIB, 3) for k in keys} for s in samples], detail=detail,
               chart={"kind": "bar", "labels": ["kafka", "speed", "airflow"] + (["spark-jobs"] if shared else [])
                      + ["total", "total max"] + (["total max, batch run"] if during_batch else []),
                      "values": [med["kafka"], med["speed"], med["airflow"]] + ([med["spark-jobs"]] if shared else [])
                      + [med["total"], mx["total"]]
                      + ([detail["while_loglake_batch_runs"]["max_gib"]["total"]] if during_batch else []),
                      "goal": 6, "ylabel": "GiB (PSS)", "title": f"median of {len(samples)} samples", "rotate": 20})
    m["summary"] = (f"median of {len(samples)} samples (max {mx['total']}): kafka {med['kafka']}, speed {med['speed']}, "
                    f"airflow {med['airflow']}" + (f", spark-jobs {med['spark-jobs']}" if shared else "") + " GiB"
                    + (f"; max {detail['while_loglake_batch_runs']['max_gib']['total']} GiB while loglake_batch runs"
                       if during_batch else ""))
    return m
