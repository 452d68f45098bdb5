"""One run of the bench's own platform (``bench.stack``), measured once for P5, P7, P8 and P9.

Each of the four metrics is a module of its own (``bench.overhead``, ``bench.startup``,
``bench.memory``, ``bench.batch_freshness``); the first of them to run measures, on one
platform, the phases the wanted metrics need, and the others report from the same figures.

Order, so that it stays cheap: one cold ``up`` (formats Kafka, migrates Airflow's DB, creates
topics and checkpoints; the scheduled DAGs are paused so no run competes with the
measurements); then ``repeats`` ``down`` → warm ``up`` → healthy (P7), the last one left up;
on it, PSS sampled while events are produced at a steady rate (P8); then ``loglake_batch``
runs triggered through the REST API (``bench.dag_runs``: P9, and P5 from the same runs' Spark
tasks; PSS sampled meanwhile for P8's batch figure) — a first run absorbs the records P8 left
(counted for P5 and P8, not P9); finally ``down`` and a check that no process of the platform
is left.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field

from bench import dag_runs
from bench.harness import Harness, median, result
from bench.stack import GIB, Platform, Sampler
from loglake.local.demo import _client
from loglake.local.produce import produce

METRICS = ("P5", "P7", "P8", "P9")
BATCH_DAGS = ("loglake_batch", "loglake_maintenance")  # the scheduled ones: paused after the cold start


@dataclass
class Figures:
    """What one platform run measured (a phase's figures are ``{"error": ...}`` when it failed)."""

    cold: dict                                           # the cold start
    ups: list[dict] = field(default_factory=list)        # P7's warm starts
    downs: list[dict] = field(default_factory=list)      # the ``down`` before each
    streaming: dict | None = None                        # P8's PSS samples while events stream in
    batch: dict | None = None                            # the loglake_batch runs (``bench.dag_runs.measure``)
    final: dict | None = None                            # the last ``down``
    seconds: float = 0.0                                 # the whole run


def measured(h: Harness, only: set[str] | None) -> Figures:
    """The platform's figures for the wanted ones of ``METRICS``: measured by the first module
    that asks, in this bench run."""
    want = {m for m in METRICS if only is None or m in only}
    return h.once("platform", lambda: _measure(h, want))


def report(m: dict, figures: Figures) -> list[dict]:
    """``m`` with what every metric of the platform run carries: its last ``down``, its seconds."""
    m["detail"]["final_down"] = figures.final
    m["module_seconds"] = figures.seconds
    return [m]


def failed(metric: str, title: str, unit: str, error: str) -> dict:
    """The metric of a phase that failed: no value, the error."""
    m = result(metric, title, None, unit, detail={"error": error})
    m["summary"] = f"failed: {error[:200]}"
    return m


def _measure(h: Harness, want: set[str]) -> Figures:
    h.stop_spark()  # the cores are the platform's now
    t0 = time.monotonic()
    plat = Platform(h.root / "platform")
    h.log(f"platform: state {plat.home}, kafka {plat.config.kafka.bootstrap_servers}, airflow port {plat.port}")
    try:
        figures = Figures(plat.up())
        h.log(f"cold up (format, migrate, topics): healthy after {figures.cold['seconds']}s "
              f"{figures.cold['components']}")
        paused = _pause_scheduled(plat.config)
        h.log(f"scheduled DAGs paused; runs stopped: {paused or 'none'}")
        if "P7" in want:
            for i in range(h.repeats):
                figures.downs.append(plat.down())
                h.log(f"down in {figures.downs[-1]['seconds']}s {figures.downs[-1]['steps']}; "
                      f"left behind {figures.downs[-1]['left_behind'] or 'nothing'}")
                figures.ups.append(plat.up())
                h.log(f"warm up {i + 1}/{h.repeats}: healthy after {figures.ups[-1]['seconds']}s "
                      f"{figures.ups[-1]['components']}")
        if "P8" in want:
            figures.streaming = _attempt(h, "P8", lambda: _streaming(h, plat))
        if want & {"P5", "P9"}:
            figures.batch = _attempt(h, "P5/P9", lambda: dag_runs.measure(h, plat, t0))
    finally:
        final = plat.down()
        h.log(f"final down in {final['seconds']}s; left behind: {final['left_behind'] or 'nothing'}")
    figures.final = final
    figures.seconds = round(time.monotonic() - t0, 1)
    return figures


def _attempt(h: Harness, phase: str, fn) -> dict:
    """``fn()``; if it fails, ``{"error": ...}`` (the other phases keep their figures)."""
    try:
        return fn()
    except Exception as e:
        traceback.print_exc()
        h.log(f"{phase} failed: {type(e).__name__}: {e}")
        return {"error": f"{type(e).__name__}: {e}"}


def _pause_scheduled(config) -> list[str]:
    """Pause the scheduled DAGs and fail the runs their first parse created (nothing to process yet),
    so no scheduled run competes with the measurements; P5 triggers its own runs (which unpauses)."""
    _airflow, client = _client(config)
    deadline = time.monotonic() + 30
    for dag_id in BATCH_DAGS:
        client.wait_for_dag(dag_id)
        # Its one (@once) run first: paused before that, the run would come when P5 unpauses it.
        while (time.monotonic() < deadline
               and not client.call("GET", f"/dags/{dag_id}/dagRuns?limit=1")["dag_runs"]):
            time.sleep(1)
        client.call("PATCH", f"/dags/{dag_id}", {"is_paused": True})
    time.sleep(2)  # a scheduler loop that read the DAG before the pause may still create its run
    stopped = []
    for dag_id in BATCH_DAGS:
        for r in client.call("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]:
            if r["state"] not in ("success", "failed"):
                client.call("PATCH", f"/dags/{dag_id}/dagRuns/{r['dag_run_id']}", {"state": "failed"})
                stopped.append((dag_id, r["dag_run_id"]))
    # Until their task processes are gone: `down` with a task still running waits for it.
    deadline = time.monotonic() + 90
    while stopped and time.monotonic() < deadline and any(
            ti["state"] in ("running", "queued", "restarting")
            for dag_id, run_id in stopped for ti in client.task_instances(dag_id, run_id)):
        time.sleep(1)
    return [f"{d}/{r}" for d, r in stopped]


def _streaming(h: Harness, plat: Platform) -> dict:
    """P8's PSS samples while events stream in at a steady rate (job_views and company_ceos)."""
    seconds = 20 if h.quick else 60
    rates = {"job_views": 500, "company_ceos": 20}
    threads = []
    for name, rate in rates.items():
        if name in plat.config.datasets:
            ds = plat.config.dataset(name)
            threads.append(threading.Thread(target=produce, args=(plat.config, ds, rate * seconds), daemon=True,
                                            kwargs={"rate": rate, "bad_fraction": 0.02, "progress": False}))
    h.log(f"P8: producing {rates} records/s for {seconds}s, sampling PSS every 4s")
    for t in threads:
        t.start()
    time.sleep(5)  # the streams see data before the first sample
    sampler = Sampler(plat, 4.0)
    sampler.start()
    for t in threads:
        t.join(seconds + 60)
    samples = sampler.stop()
    h.log(f"P8: {len(samples)} samples, total PSS median {median([s['total'] for s in samples]) / GIB:.2f} GiB")
    return {"samples": samples, "rates": rates, "seconds": seconds}
