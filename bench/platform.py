"""P5 orchestration overhead, P7 warm start-up, P8 memory, P9 batch freshness: the whole platform, as
``loglake up`` runs it.

The module starts a platform of its own — an embedded broker on a free port, both speed
streams, Airflow on a free port — from a conf dir and a state dir under the bench root,
with the repo's ``local`` profile settings (what ``make up`` runs), so it never touches a
running ``make up``. Every step goes through the CLI (``loglake up`` / ``loglake down``
in a subprocess) except the measurements.

Order, so that it stays cheap: one cold ``up`` (formats Kafka, migrates Airflow's DB,
creates topics and checkpoints; the scheduled DAGs are paused so no run competes with the
measurements) and ``down``; then ``repeats`` warm ``up`` → healthy → ``down`` (P7), the
last one left up; on it, PSS sampled while events are produced at a steady rate (P8);
then ``loglake_batch`` runs triggered through the REST API, each over 20,000 new records in
each dataset once the speed streams have caught up with them (P9: the run's wall and a
per-task breakdown; P5 from the same runs' Spark tasks; PSS sampled meanwhile for P8's
batch figure), as many as fit the module's time budget — a first run absorbs the records
P8 left (counted for P5 and P8, not P9); finally ``down`` and a check that no process of
the platform is left.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import yaml

from bench.harness import REPO, Harness, median, result

BUDGET = 14 * 60  # seconds for the whole module on 2 cores (`make bench` in all: under 40 min)
BATCH_DAGS = ("loglake_batch", "loglake_maintenance")  # the scheduled ones: paused after the cold start
P9_TITLE = "batch freshness: loglake_batch run wall"
P9_RECORDS = 20_000  # new records per dataset before each P9 run (2,000 with --quick)
P9_DATASETS = ("job_views", "company_ceos")
# The jobs' phases in the order they run (a summary's ``phases`` comes back from XCom with its
# keys sorted); others follow in their own order.
PHASE_ORDER = ("prepare", "read", "validate", "read_validate_write", "write", "quarantine", "commit", "quality",
               "results", "publish", "ledger")
GIB = 2**30


# -- the platform under test ---------------------------------------------------------------

class Platform:
    """A platform of the bench's own: conf dir, state dir, free ports; driven through the CLI."""

    def __init__(self, base: Path):
        from loglake.local.airflow_standalone import COMPONENTS
        from loglake.core.config import load_config
        from loglake.core.processes import free_port
        from loglake.testing import write_conf

        kafka_port = _free_port_pair()
        conf = write_conf(base, f"localhost:{kafka_port}")
        # The settings `make up` runs with (the repo's local profile), on the bench's broker port.
        local = yaml.safe_load((REPO / "conf" / "loglake.yaml").read_text())["profiles"]["local"]
        profile = {**local, "kafka": {**local["kafka"], "bootstrap_servers": f"localhost:{kafka_port}",
                                      "embedded": True}}
        (conf / "loglake.yaml").write_text(yaml.safe_dump({"default_profile": "bench", "profiles": {"bench": profile}}))
        self.home = base / "state"
        self.port = free_port()
        # The scheduled DAGs run once, at the first start (failed at once: nothing to process yet),
        # and never again: a cron point passing during the bench would start a run that
        # competes with the measurements (a paused cron DAG catches up its latest point when
        # P5 unpauses it). P5 triggers its own runs.
        self.env = {**os.environ, "LOGLAKE_CONF": str(conf), "LOGLAKE_HOME": str(self.home),
                    "LOGLAKE_AIRFLOW_PORT": str(self.port), "PYTHONUNBUFFERED": "1",
                    "LOGLAKE_BATCH_SCHEDULE": "@once", "LOGLAKE_MAINTENANCE_SCHEDULE": "@once"}
        for k in ("LOGLAKE_KAFKA_BOOTSTRAP", "LOGLAKE_PROFILE"):
            self.env.pop(k, None)
        self.config = load_config(conf, home=self.home)
        # "spark-jobs": the shared Spark application the batch tasks run in, where `loglake up`
        # starts one (absent: no process, 0 bytes).
        self.components = {"kafka": ["kafka"], "speed": [f"speed-{n}" for n in self.config.datasets],
                           "airflow": [f"airflow-{c}" for c in COMPONENTS], "spark-jobs": ["spark-jobs"]}
        self.seen: dict[int, int] = {}  # every process of the platform ever seen: pid → start time

    def cli(self, action: str) -> Cli:
        """``loglake <action>`` in a subprocess, its output lines timestamped as they come."""
        return Cli([str(Path(sys.executable).parent / "loglake"), action], self.env)

    def trees(self) -> dict[str, dict[int, int]]:
        """Managed process name → its process tree (pid → start time); remembered in ``seen``."""
        from loglake.core.processes import Managed, descendants

        out = {}
        for names in self.components.values():
            for name in names:
                pid = Managed(self.home, name).pid()
                out[name] = descendants(pid) if pid else {}
                self.seen.update(out[name])
        return out

    # -- up, timed per component ---------------------------------------------------------
    def up(self, timeout: float = 300) -> dict:
        """``loglake up`` in a subprocess; seconds from its start until each component is healthy.

        Kafka: the ``kafka:`` line (printed once the broker answers metadata). Airflow: the
        first health answer (api-server) and the first ``healthy`` of each part it reports;
        besides, when each job (scheduler, triggerer, dag-processor) registered in the
        metadata DB. Speed: a probe record is produced to each dataset once Kafka answers;
        the stream is healthy once its committed position covers the probe (it runs its
        query and commits micro-batches; an idle stream reports nothing else); its progress
        file says when that micro-batch started and how long it took.
        """
        from loglake.local.airflow_standalone import EmbeddedAirflow
        from loglake.kafka.admin import dataset_state, log_bounds
        from loglake.local.produce import produce

        wall0 = datetime.now(timezone.utc)
        cli = self.cli("up")
        t0 = cli.t0
        airflow = EmbeddedAirflow(self.config, self.port)
        parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
        times: dict[str, float] = {}
        batches: dict[str, dict] = {}
        probe_ends: dict[str, dict[int, int]] = {}
        wanted = 1 + len(parts) + 1 + len(self.config.datasets)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            now = time.monotonic() - t0
            health = airflow.health(timeout=1.0)
            if health is not None:
                times.setdefault("airflow-api-server", now)
                for p in parts:
                    if (health.get(p) or {}).get("status") == "healthy":
                        times.setdefault(f"airflow-{p.replace('_', '-')}", now)
            kafka_line = cli.first("kafka:")
            if kafka_line is not None and not probe_ends:
                times["kafka"] = kafka_line
                for ds in self.config.datasets.values():
                    produce(self.config, ds, 1, seed=int(now * 1000), progress=False)
                    probe_ends[ds.name] = {p: hi for p, (_lo, hi) in log_bounds(self.config, ds.topic).items() if hi}
            for name, ends in probe_ends.items():
                if f"speed-{name}" not in times:
                    state = dataset_state(self.config, self.config.dataset(name))
                    if all((s.speed_position or 0) >= ends.get(s.partition, 0) for s in state):
                        times[f"speed-{name}"] = time.monotonic() - t0
                        batches[name] = self._progress(name, wall0)
            code = cli.proc.poll()
            if (len(times) == wanted and code is not None) or code not in (None, 0):
                break
            time.sleep(0.5)
        code = cli.finish(timeout=1)
        self.trees()
        if code != 0:
            raise RuntimeError(f"loglake up failed ({code}):\n{cli.text()[-3000:]}")
        healthy = len(times) == wanted
        return {"seconds": round(max(times.values()), 2) if healthy else None, "healthy": healthy,
                "up_command_seconds": round(cli.seconds, 2),
                "components": {k: round(v, 2) for k, v in sorted(times.items(), key=lambda kv: kv[1])},
                "airflow_jobs_started": self._jobs_started(wall0), "speed_probe_batches": batches,
                "airflow_line": next((l for _t, l in cli.lines if l.startswith("airflow: healthy")), None)}

    def _progress(self, name: str, wall0: datetime) -> dict:
        """When (seconds after ``wall0``) the micro-batch in the progress file started, and its duration."""
        try:
            p = json.loads((self.home / "run" / f"speed-{name}.progress.json").read_text())
            started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            return {"batch": p.get("batchId"), "started": round((started - wall0).total_seconds(), 2),
                    "seconds": round(p.get("durationMs", {}).get("triggerExecution", 0) / 1000, 2),
                    "records": p.get("numInputRows")}
        except (OSError, ValueError, KeyError):
            return {}

    def _jobs_started(self, wall0: datetime) -> dict:
        """Seconds after ``wall0`` at which each Airflow job of this start registered (its first loop)."""
        import sqlite3

        out = {}
        try:
            db = sqlite3.connect(f"file:{self.home / 'airflow' / 'airflow.db'}?mode=ro", uri=True, timeout=5)
            with contextlib.closing(db):
                rows = db.execute("SELECT job_type, start_date FROM job ORDER BY id").fetchall()
        except sqlite3.Error:
            return out
        for job_type, start in rows:
            started = datetime.fromisoformat(start).replace(tzinfo=timezone.utc) if start else None
            if started and started >= wall0:
                out.setdefault(job_type, round((started - wall0).total_seconds(), 2))
        return out

    def down(self) -> dict:
        """``loglake down``: its seconds, per step, and whatever process of the platform is still alive after it."""
        from loglake.core.processes import alive, terminate

        gc.collect()  # Kafka clients of this process still in reference cycles: gone before the broker is
        self.trees()
        cli = self.cli("down")
        code = cli.finish(timeout=180)
        left = alive(self.seen)
        if left:  # never leave anything behind, but say so
            terminate(left, timeout=10)
        steps = {}
        for t, line in cli.lines:
            if ":" in line and "stopped" in line:
                steps[line.split(":")[0]] = round(t, 2)
        return {"seconds": round(cli.seconds, 2), "ok": code == 0, "steps": steps, "left_behind": sorted(left),
                "output": None if code == 0 else cli.text()[-2000:]}

    # -- memory ---------------------------------------------------------------------------
    def pss(self) -> dict:
        """PSS (bytes) per component and per managed process, summed over each process tree."""
        trees = self.trees()
        from loglake.core.processes import pss_bytes

        by_name = {name: pss_bytes(tree) for name, tree in trees.items()}
        counts = {name: len(tree) for name, tree in trees.items()}
        comps = {c: sum(by_name[n] for n in names) for c, names in self.components.items()}
        return {"total": sum(comps.values()), **comps, "by_process": by_name, "processes": counts}


class Cli:
    """A CLI subprocess whose output lines are read (and timestamped) by a thread."""

    def __init__(self, cmd: list[str], env: dict[str, str]):
        self.lines: list[tuple[float, str]] = []
        self.t0 = time.monotonic()
        self.seconds = 0.0
        self.proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, line.rstrip()))
        self.seconds = time.monotonic() - self.t0

    def first(self, prefix: str) -> float | None:
        return next((t for t, l in self.lines if l.startswith(prefix)), None)

    def finish(self, timeout: float) -> int | str:
        """Its exit code after at most ``timeout`` more seconds (killed after that: ``"timeout"``)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = "timeout"
        self.reader.join(5)
        if not self.seconds:
            self.seconds = time.monotonic() - self.t0
        return code

    def text(self) -> str:
        return "\n".join(l for _t, l in self.lines)


def _free_port_pair() -> int:
    """A free port whose successor is free too (the embedded broker's controller takes port + 1)."""
    from loglake.core.processes import free_port, port_open

    for _ in range(50):
        p = free_port()
        if p < 65535 and not port_open(p + 1):
            return p
    raise RuntimeError("no free pair of ports")


class Sampler(threading.Thread):
    """PSS of the platform every ``interval`` seconds until stopped."""

    def __init__(self, plat: Platform, interval: float):
        super().__init__(daemon=True)
        self.plat, self.interval, self.samples = plat, interval, []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            t = time.monotonic()
            self.samples.append(self.plat.pss())
            self.done.wait(max(0.0, self.interval - (time.monotonic() - t)))

    def stop(self) -> list[dict]:
        self.done.set()
        self.join(30)
        return self.samples


# -- the module --------------------------------------------------------------------------------

def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    want = {m for m in ("P5", "P7", "P8", "P9") if only is None or m in only}
    if not want:
        return []
    h.stop_spark()  # the cores are the platform's now
    t_module = time.monotonic()
    plat = Platform(h.root / "platform")
    h.log(f"platform: state {plat.home}, kafka {plat.config.kafka.bootstrap_servers}, airflow port {plat.port}")
    out: list[dict] = []
    downs: list[dict] = []
    final = None
    try:
        cold = plat.up()
        h.log(f"cold up (format, migrate, topics): healthy after {cold['seconds']}s {cold['components']}")
        paused = _pause_scheduled(plat.config)
        h.log(f"scheduled DAGs paused; runs stopped: {paused or 'none'}")
        ups = []
        if "P7" in want:
            for i in range(h.repeats):
                downs.append(plat.down())
                h.log(f"down in {downs[-1]['seconds']}s {downs[-1]['steps']}; "
                      f"left behind {downs[-1]['left_behind'] or 'nothing'}")
                ups.append(plat.up())
                h.log(f"warm up {i + 1}/{h.repeats}: healthy after {ups[-1]['seconds']}s {ups[-1]['components']}")
            out.append(_p7(ups, cold, downs))
        streaming = _attempt(h, "P8", lambda: _p8_measure(h, plat)) if "P8" in want else None
        batch = (_attempt(h, "P5/P9", lambda: _batch_measure(h, plat, t_module)) if want & {"P5", "P9"}
                 else None)
        if batch is not None:
            if "P5" in want:
                out.append(_failed("P5", batch["error"]) if "error" in batch else _p5(batch))
            if "P9" in want:
                out.append(_failed("P9", batch["error"]) if "error" in batch else _p9(batch))
        if streaming is not None:
            out.append(_failed("P8", streaming["error"]) if "error" in streaming else
                       _p8(streaming, batch.get("pss") if batch else None))
    finally:
        final = plat.down()
        h.log(f"final down in {final['seconds']}s; left behind: {final['left_behind'] or 'nothing'}")
    for m in out:
        m["detail"]["final_down"] = final
    return out


def _attempt(h: Harness, metric: str, fn) -> dict:
    """``fn()``; if it fails, ``{"error": ...}`` (the other metrics of the module keep their figures)."""
    try:
        return fn()
    except Exception as e:
        traceback.print_exc()
        h.log(f"{metric} failed: {type(e).__name__}: {e}")
        return {"error": f"{type(e).__name__}: {e}"}


def _failed(metric: str, error: str) -> dict:
    titles = {"P5": ("Airflow overhead per Spark task", "s"), "P8": ("platform memory while streaming (PSS)", "GiB"),
              "P9": (P9_TITLE, "s")}
    m = result(metric, titles[metric][0], None, titles[metric][1], detail={"error": error})
    m["summary"] = f"failed: {error[:200]}"
    return m


def _pause_scheduled(config) -> list[str]:
    """Pause the scheduled DAGs and fail the runs their first parse created (nothing to process yet),
    so no scheduled run competes with the measurements; P5 triggers its own runs (which unpauses)."""
    from loglake.local.demo import _client

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


# -- P7 -------------------------------------------------------------------------------------

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
    m = result("P7", "warm start-up to healthy", value, "s", goal="<= 60", met=None if value is None else value <= 60,
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


# -- P8 -------------------------------------------------------------------------------------

def _p8_measure(h: Harness, plat: Platform) -> dict:
    """PSS samples while events stream in at a steady rate (job_views and company_ceos)."""
    from loglake.local.produce import produce

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


def _p8(streaming: dict, during_batch: list[dict] | None) -> dict:
    samples = streaming["samples"]
    keys = ["total", "kafka", "speed", "airflow"]
    shared = any(s.get("spark-jobs") for s in samples + (during_batch or []))
    if shared:  # the shared Spark application `loglake up` started for the batch jobs
        keys.append("spark-jobs")
    med = {k: round(median([s[k] for s in samples]) / GIB, 2) for k in keys}
    mx = {k: round(max(s[k] for s in samples) / GIB, 2) for k in keys}
    by_proc = {n: round(median([s["by_process"][n] for s in samples]) / 2**20) for n in samples[0]["by_process"]}
    detail = {"what": "sum of the PSS (psutil memory_full_info) of every process of the platform (broker JVM; per "
                      "speed stream its supervisor, spark-submit, driver JVM and Python; the four Airflow components "
                      "and all their children) while events are produced at a steady rate",
              "rates_records_per_second": streaming["rates"], "produce_seconds": streaming["seconds"],
              "median_gib": med, "max_gib": mx, "per_process_median_mib": by_proc,
              "processes": samples[-1]["processes"]}
    if during_batch:
        detail["while_loglake_batch_runs"] = {
            "max_gib": {k: round(max(s[k] for s in during_batch) / GIB, 2) for k in keys},
            "median_gib": {k: round(median([s[k] for s in during_batch]) / GIB, 2) for k in keys},
            "samples": len(during_batch)}
    m = result("P8", "platform memory while streaming (PSS)", med["total"], "GiB", goal="<= 6",
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


# -- the loglake_batch runs: P9, and P5 from their Spark tasks ------------------------------

def _batch_measure(h: Harness, plat: Platform, t_module: float) -> dict:
    """``loglake_batch`` runs triggered through the REST API, each over fresh records in every
    dataset of ``P9_DATASETS`` (once the speed streams have caught up with them), as many as fit
    the module's budget; the platform's PSS sampled meanwhile (P8's batch figure).

    When the log holds more than a few records the batch layer has not recomputed yet (P8's
    events), a first run absorbs them: its Spark tasks count for P5 and its memory for P8, but
    it is not one of P9's runs, which are each over the same number of new records."""
    from loglake.local.demo import _client, wait_caught_up

    config = plat.config
    _airflow, client = _client(config)
    n = 2000 if h.quick else P9_RECORDS
    sizes = {name: n for name in P9_DATASETS if name in config.datasets}
    runs, note, failed_after = [], None, None
    sampler = Sampler(plat, 5.0)
    sampler.start()
    try:
        wait_caught_up(config, timeout=300)
        backlog = _backlog(config)
        try:
            if any(backlog.get(name, 0) > 0.05 * k for name, k in sizes.items()):
                h.log(f"P9: the log holds {backlog} records the batch layer has not recomputed (P8's events): "
                      "a first run absorbs them (counted for P5 and P8, not P9)")
                runs.append(_batch_run(h, plat, client, {}, "backlog", "absorbing the backlog"))
            while (measured := sum(r["kind"] == "measured" for r in runs)) < h.repeats:
                left = BUDGET - (time.monotonic() - t_module)
                if measured and left < runs[-1]["cycle_seconds"] * 1.2 + 60:
                    note = (f"{measured} of {h.repeats} runs: another (~{runs[-1]['cycle_seconds']:.0f}s with its "
                            f"records and the streams' catch-up) would not fit the module's {BUDGET // 60} min "
                            f"budget ({left:.0f}s left)")
                    h.log("P9: " + note)
                    break
                runs.append(_batch_run(h, plat, client, sizes, "measured", f"{measured + 1}/{h.repeats}"))
        except Exception as e:  # the runs done keep their figures
            if not runs:
                raise
            traceback.print_exc()
            failed_after = f"{type(e).__name__}: {e}"
            h.log(f"P9: failed after {len(runs)} run(s): {failed_after}")
    finally:
        pss = sampler.stop()
    return {"runs": runs, "note": note, "failed_after": failed_after, "sizes": sizes, "backlog": backlog,
            "pss": pss}


def _backlog(config) -> dict[str, int]:
    """Per dataset, how many records the log holds beyond the batch watermark (``loglake status``'s figure)."""
    from loglake.ops.status import dataset_status

    return {name: sum(p.batch_lag for p in dataset_status(config, ds).partitions)
            for name, ds in config.datasets.items()}


def _batch_run(h: Harness, plat: Platform, client, sizes: dict[str, int], kind: str, label: str) -> dict:
    """Produce ``sizes`` records (2 % malformed), wait until the streams caught up, trigger
    ``loglake_batch`` and wait for it; its tasks (demo.dag_run's), their timestamps, the
    per-task breakdown and when the batch watermark covered the log ends read before the trigger."""
    from loglake.local.demo import _spark_overhead, dag_run, wait_caught_up
    from loglake.kafka.admin import log_bounds
    from loglake.local.produce import produce

    config = plat.config
    t0 = time.monotonic()
    produced = {}
    for name, n in sizes.items():
        res = produce(config, config.dataset(name), n, bad_fraction=0.02, progress=False)
        produced[name] = {"records": res.records, "good": res.good, "bad": res.bad}
    t_produced = time.monotonic()
    wait_caught_up(config, timeout=300)
    t_caught_up = time.monotonic()
    bounds = {name: log_bounds(config, ds.topic) for name, ds in config.datasets.items()}
    # What the watermark must cover: the new records' datasets (all with a backlog for the first run).
    names = list(sizes) or [n for n, b in _backlog(config).items() if b]
    watch = _WatermarkWatch(config, {n: {p: hi for p, (lo, hi) in bounds[n].items() if hi > lo} for n in names},
                            {n: {p: lo for p, (lo, _hi) in bounds[n].items()} for n in names})
    trees = plat.trees()
    streams = {n: bool(trees.get(f"speed-{n}")) for n in config.datasets}
    h.log(f"P9: loglake_batch run {label}: produced {sizes or 'nothing'} in {t_produced - t0:.1f}s, streams caught "
          f"up {t_caught_up - t_produced:.1f}s later (running: {streams}); triggering ...")
    watch.start()
    try:
        run = dag_run(client, "loglake_batch", scheduled=False)
    finally:
        watch.stop()
    dr = client.call("GET", f"/dags/loglake_batch/dagRuns/{run['run_id']}")
    tis = client.task_instances("loglake_batch", run["run_id"])
    spark, mean = _spark_overhead(run)
    queued_at, start = _ts(dr.get("queued_at")), _ts(dr.get("start_date"))
    run.update(kind=kind, spark_seconds=spark, mean_overhead=mean,
               timing={_ti_key(ti): _ti_times(ti) for ti in tis}, names=_dataset_names(run, tis),
               produced=produced, produce_seconds=round(t_produced - t0, 2),
               catch_up_seconds=round(t_caught_up - t_produced, 2), streams_running=streams,
               queued_at=dr.get("queued_at"), start_date=dr.get("start_date"), end_date=dr.get("end_date"),
               trigger_to_start=round((start - queued_at).total_seconds(), 2) if start and queued_at else None,
               watermark=watch.report(queued_at), breakdown=_breakdown(run, dr, tis))
    run["cycle_seconds"] = round(time.monotonic() - t0, 1)
    wm = run["watermark"]
    h.log(f"P9: run {run['run_id']} {run['state']} in {run['wall']:.1f}s (trigger→start {run['trigger_to_start']}s; "
          f"watermark covers the records {wm['trigger_to_covered']}s after the trigger {wm['per_dataset']}); "
          f"Spark {spark:.0f}s, mean Airflow overhead per Spark task {mean if mean is None else round(mean, 2)}s")
    for row in run["breakdown"]:
        h.log("P9:   " + _row_text(row))
    return run


class _WatermarkWatch(threading.Thread):
    """Polls the batch watermarks (``loglake.ledger.ranges.batch_watermarks``, delta-rs, no JVM) every
    ``interval`` seconds until they cover ``targets`` (dataset → partition → log end)."""

    def __init__(self, config, targets: dict[str, dict[int, int]], earliest: dict[str, dict[int, int]],
                 interval: float = 1.0):
        super().__init__(daemon=True)
        self.config, self.targets, self.earliest, self.interval = config, targets, earliest, interval
        self.covered: dict[str, datetime] = {}
        self.polls, self.poll_seconds, self.error = 0, 0.0, None
        self.done = threading.Event()

    def check(self) -> None:
        from loglake.ledger.ranges import batch_watermarks

        for name, ends in self.targets.items():
            if name in self.covered:
                continue
            marks = batch_watermarks(self.config, self.config.dataset(name), earliest=self.earliest[name])
            if all(marks.get(p, -1) >= end for p, end in ends.items()):
                self.covered[name] = datetime.now(timezone.utc)

    def run(self):
        while not self.done.is_set() and len(self.covered) < len(self.targets):
            t = time.monotonic()
            try:
                self.check()
            except Exception as e:  # a read racing a commit: the next poll
                self.error = f"{type(e).__name__}: {e}"
            self.polls += 1
            self.poll_seconds += time.monotonic() - t
            self.done.wait(max(0.0, self.interval - (time.monotonic() - t)))

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        with contextlib.suppress(Exception):
            self.check()  # covered after the last poll: stamped now (an upper bound)

    def report(self, trigger: datetime | None) -> dict:
        per = {n: round((self.covered[n] - trigger).total_seconds(), 2) if trigger and n in self.covered else None
               for n in self.targets}
        done = bool(per) and all(v is not None for v in per.values())
        return {"trigger_to_covered": max(per.values()) if done else None, "per_dataset": per,
                "polls": self.polls, "poll_ms_mean": round(1000 * self.poll_seconds / self.polls) if self.polls else None,
                "poll_error": self.error}


def _ts(v: str | None) -> datetime | None:
    return datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None


def _ti_key(ti: dict) -> tuple[str, str]:
    """demo.dag_run's key of a task instance: (task id, dataset or map index)."""
    return ti["task_id"], ti.get("rendered_map_index") or str(ti["map_index"])


def _dataset_names(run: dict, tis: list[dict]) -> dict[str, str]:
    """Map index → dataset (the mapped group's tasks share an index): the name recompute and
    quality render as their map index, else the ``dataset`` their summaries (or diff's rows) name."""
    names = {str(ti["map_index"]): ti["rendered_map_index"] for ti in tis
             if ti["map_index"] >= 0 and ti.get("rendered_map_index") and not str(ti["rendered_map_index"]).isdigit()}
    for (_task_id, key), t in run["tasks"].items():
        v = t.get("value")
        v = v[0] if isinstance(v, list) and v else v
        if key.isdigit() and isinstance(v, dict) and isinstance(v.get("dataset"), str):
            names.setdefault(key, v["dataset"])
    return names


def _breakdown(run: dict, dr: dict, tis: list[dict]) -> list[dict]:
    """One row per task instance of a run, in start order: when it was scheduled, started and
    ended (seconds after the run's start), its queueing, duration and, for a Spark task, what
    its summary says of the submission (see ``_spark_parts``)."""
    t0 = _ts(dr.get("start_date"))
    names = _dataset_names(run, tis)

    def offset(v):
        t = _ts(v)
        return round((t - t0).total_seconds(), 2) if t and t0 else None

    rows = []
    for ti in tis:
        task = run["tasks"].get(_ti_key(ti), {})
        value = task.get("value")
        row = {"task": ti["task_id"].split(".")[-1],
               "dataset": names.get(str(ti["map_index"])) if ti["map_index"] >= 0 else None,
               "state": ti["state"], "scheduled": offset(ti.get("scheduled_when")), "start": offset(ti.get("start_date")),
               "end": offset(ti.get("end_date")), "duration": ti.get("duration"), **_ti_times(ti)}
        if isinstance(value, dict) and value.get("submit_seconds") is not None:
            row.update(_spark_parts(value, ti.get("duration")))
        rows.append(row)
    return sorted(rows, key=lambda r: (r["start"] is None, r["start"] or 0, r["task"], r["dataset"] or ""))


def _spark_parts(v: dict, duration: float | None) -> dict:
    """A Spark task's summary, taken apart: ``submit_seconds`` (the submission's wall, seen by the
    task), ``seconds`` (the job's own work), ``start_overhead`` = submit − work (JVM/session start
    and submit overhead); where the summary has them, ``session_seconds`` (JVM + session start;
    ``start_seconds`` in some versions) with ``submit_other`` = submit − work − session,
    ``phases`` (name → seconds) and ``shared_application``; ``airflow_overhead`` = task − submit."""
    submit, work = v["submit_seconds"], v.get("seconds")
    out = {"submit_seconds": submit, "seconds": work}
    if work is not None:
        out["start_overhead"] = round(submit - work, 3)
    session = v.get("session_seconds", v.get("start_seconds"))
    if isinstance(session, (int, float)):
        out["session_seconds"] = round(session, 3)
        if work is not None:
            out["submit_other"] = round(submit - work - session, 3)
    phases = v.get("phases")
    if isinstance(phases, dict):
        out["phases"] = {k: round(phases[k], 3) for k in _phase_order(phases) if isinstance(phases[k], (int, float))}
    if "shared_application" in v:
        out["shared_application"] = bool(v["shared_application"])
    if duration is not None:
        out["airflow_overhead"] = round(duration - submit, 3)
    if v.get("records") is not None:  # recompute: records written + quarantined
        out["records"] = v["records"] + (v.get("quarantined") or 0)
    if v.get("rows") is not None:  # quality: rows of the ranges it checked
        out["rows"] = v["rows"]
    return out


def _phase_order(names) -> list[str]:
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: (PHASE_ORDER.index(n) if n in PHASE_ORDER else len(PHASE_ORDER), names.index(n)))


def _s(v: float | None) -> str:
    """Seconds, short: one decimal under 10."""
    if v is None:
        return "?"
    return f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}"


def _row_text(r: dict) -> str:
    """One task's line: 'recompute job_views 31 s (start 20, work 9 [read 2, write 5])'."""
    label = r["task"] + (f" {r['dataset']}" if r.get("dataset") else "")
    text = f"{label} {_s(r.get('duration'))} s"
    if r.get("submit_seconds") is None:
        return text
    shared = r.get("shared_application")
    inner = (["shared app"] if shared is True else
             [f"shared app in {r.get('shared_runs')} of {r.get('runs')} runs"] if shared == "mixed" else [])
    if r.get("start_overhead") is not None:
        inner.append(f"start {_s(r['start_overhead'])}"
                     + (f" (session {_s(r['session_seconds'])})" if r.get("session_seconds") is not None else ""))
    if r.get("seconds") is not None:
        inner.append(f"work {_s(r['seconds'])}"
                     + (" [" + ", ".join(f"{k} {_s(x)}" for k, x in r["phases"].items()) + "]" if r.get("phases") else ""))
    return text + (f" ({', '.join(inner)})" if inner else "")


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
        phases = _phase_order(p for row in rows for p in row.get("phases") or {})
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
    phases = _phase_order(p for r in rows for p in r.get("phases") or {})
    seg = {k: [] for k in ("waiting (scheduled → running)", "Airflow (task − submit)", "JVM/session start",
                           "submit, other" if any(r.get("session_seconds") is not None for r in rows)
                           else "_unused", *phases, "job work" if not phases else "job work, other",
                           "Python task")}
    seg.pop("_unused", None)
    labels, left, notes = [], [], []
    for r in rows:
        labels.append(r["task"] + (f" {r['dataset']}" if r.get("dataset") else ""))
        notes.append(f"{_s(r.get('duration'))} s" + (" (shared app)" if r.get("shared_application") else ""))
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
    m = result("P9", P9_TITLE, value, "s", goal="<= 60", met=None if value is None else value <= 60,
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
    parts = [_row_text(row) for row in rows if row["task"] not in ("diff", "audit")]
    for task in ("diff", "audit"):
        d = [row["duration"] for row in diffs if row["task"] == task and row.get("duration") is not None]
        if d:
            parts.append(f"{task} {'/'.join(_s(x) for x in d)} s")
    waits = [row for row in rows if row.get("scheduled_to_queued") is not None]
    longest = max(waits, key=lambda row: row["scheduled_to_queued"]) if waits else None
    m["summary"] = ((f"run wall {value} s (median of {len(ok)}, {n:,} new records per dataset): " + ", ".join(parts)
                     + f"; trigger→start {detail['trigger_to_start_median']} s; watermark covers the records "
                     f"{detail['trigger_to_watermark_median']} s after the trigger; queued→running median "
                     f"{detail['queued_to_running_median']} s"
                     + (f", scheduled→queued up to {_s(longest['scheduled_to_queued'])} s "
                        f"({longest['task']}{' ' + longest['dataset'] if longest['dataset'] else ''})"
                        if longest and longest["scheduled_to_queued"] >= 1 else ""))
                    if ok else f"no successful run ({', '.join(r['state'] for r in measured) or 'none'})")
    if batch.get("note") or batch.get("failed_after"):
        m["summary"] += f" ({batch.get('note') or ''}{'; ' if batch.get('note') and batch.get('failed_after') else ''}"
        m["summary"] += (f"failed after: {batch['failed_after'][:120]}" if batch.get("failed_after") else "") + ")"
    return m


def _ti_times(ti: dict) -> dict:
    """Seconds from scheduled to queued, and from queued to running, of one task instance."""
    sched, queued, start = _ts(ti.get("scheduled_when")), _ts(ti.get("queued_when")), _ts(ti.get("start_date"))
    return {"scheduled_to_queued": round((queued - sched).total_seconds(), 2) if sched and queued else None,
            "queued_to_running": round((start - queued).total_seconds(), 2) if queued and start else None}


# -- P5 -------------------------------------------------------------------------------------

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
    m = result("P5", "Airflow overhead per Spark task", value, "s", goal="<= 5",
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
