"""P5 orchestration overhead, P7 warm start-up, P8 memory: the whole platform, as ``loglake up`` runs it.

The module starts a platform of its own — an embedded broker on a free port, both speed
streams, Airflow on a free port — from a conf dir and a state dir under the bench root,
with the repo's ``local`` profile settings (what ``make up`` runs), so it never touches a
running ``make up``. Every step goes through the CLI (``loglake up`` / ``loglake down``
in a subprocess) except the measurements.

Order, so that it stays cheap: one cold ``up`` (formats Kafka, migrates Airflow's DB,
creates topics and checkpoints; the scheduled DAGs are paused so no run competes with the
measurements) and ``down``; then ``repeats`` warm ``up`` → healthy → ``down`` (P7), the
last one left up; on it, PSS sampled while events are produced at a steady rate (P8);
then ``loglake_batch`` runs triggered through the REST API with fresh events each (P5),
as many as fit the module's time budget; finally ``down`` and a check that no process of
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

BUDGET = 12 * 60  # seconds for the whole module on 2 cores
BATCH_DAGS = ("loglake_batch", "loglake_maintenance")  # the scheduled ones: paused after the cold start
GIB = 2**30


# -- the platform under test ---------------------------------------------------------------

class Platform:
    """A platform of the bench's own: conf dir, state dir, free ports; driven through the CLI."""

    def __init__(self, base: Path):
        from loglake.airflow_embedded import COMPONENTS
        from loglake.config import load_config
        from loglake.processes import free_port
        from loglake.sandbox import write_conf

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
        self.components = {"kafka": ["kafka"], "speed": [f"speed-{n}" for n in self.config.datasets],
                           "airflow": [f"airflow-{c}" for c in COMPONENTS]}
        self.seen: dict[int, int] = {}  # every process of the platform ever seen: pid → start time

    def cli(self, action: str) -> Cli:
        """``loglake <action>`` in a subprocess, its output lines timestamped as they come."""
        return Cli([str(Path(sys.executable).parent / "loglake"), action], self.env)

    def trees(self) -> dict[str, dict[int, int]]:
        """Managed process name → its process tree (pid → start time); remembered in ``seen``."""
        from loglake.processes import Managed, descendants

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
        from loglake.airflow_embedded import EmbeddedAirflow
        from loglake.kafka_admin import dataset_state, log_bounds
        from loglake.produce import produce

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
        from loglake.processes import alive, terminate

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
        from loglake.processes import pss_bytes

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
    from loglake.processes import free_port, port_open

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
    want = {m for m in ("P5", "P7", "P8") if only is None or m in only}
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
        batch = _attempt(h, "P5", lambda: _p5_measure(h, plat, t_module)) if "P5" in want else None
        if batch is not None:
            out.append(_failed("P5", batch["error"]) if "error" in batch else _p5(batch))
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
    titles = {"P5": ("Airflow overhead per Spark task", "s"), "P8": ("platform memory while streaming (PSS)", "GiB")}
    m = result(metric, titles[metric][0], None, titles[metric][1], detail={"error": error})
    m["summary"] = f"failed: {error[:200]}"
    return m


def _pause_scheduled(config) -> list[str]:
    """Pause the scheduled DAGs and fail the runs their first parse created (nothing to process yet),
    so no scheduled run competes with the measurements; P5 triggers its own runs (which unpauses)."""
    from loglake.demo import _client

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
    from loglake.produce import produce

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
               chart={"kind": "bar", "labels": ["kafka", "speed", "airflow", "total", "total max"]
                      + (["total max, batch run"] if during_batch else []),
                      "values": [med["kafka"], med["speed"], med["airflow"], med["total"], mx["total"]]
                      + ([detail["while_loglake_batch_runs"]["max_gib"]["total"]] if during_batch else []),
                      "goal": 6, "ylabel": "GiB (PSS)", "title": f"median of {len(samples)} samples", "rotate": 20})
    m["summary"] = (f"median of {len(samples)} samples (max {mx['total']}): kafka {med['kafka']}, speed {med['speed']}, "
                    f"airflow {med['airflow']} GiB"
                    + (f"; max {detail['while_loglake_batch_runs']['max_gib']['total']} GiB while loglake_batch runs"
                       if during_batch else ""))
    return m


# -- P5 -------------------------------------------------------------------------------------

def _p5_measure(h: Harness, plat: Platform, t_module: float) -> dict:
    """``loglake_batch`` runs triggered through the REST API, fresh events before each, within the budget."""
    from loglake.demo import _client, _spark_overhead, dag_run, wait_caught_up
    from loglake.produce import produce

    _airflow, client = _client(plat.config)
    sizes = {"job_views": 2000, "company_ceos": 200} if h.quick else {"job_views": 10000, "company_ceos": 1000}
    runs, note = [], None
    sampler = Sampler(plat, 5.0)
    sampler.start()
    try:
        for i in range(h.repeats):
            left = BUDGET - (time.monotonic() - t_module)
            if runs and left < runs[-1]["wall"] * 1.2 + 60:
                note = (f"{len(runs)} of {h.repeats} runs: another (~{runs[-1]['wall']:.0f}s) would not fit the "
                        f"module's {BUDGET // 60} min budget ({left:.0f}s left)")
                h.log("P5: " + note)
                break
            for name, n in sizes.items():
                if name in plat.config.datasets:
                    produce(plat.config, plat.config.dataset(name), n, bad_fraction=0.02, progress=False)
            wait_caught_up(plat.config, timeout=180)
            h.log(f"P5: loglake_batch run {i + 1}/{h.repeats} ...")
            run = dag_run(client, "loglake_batch", scheduled=False)
            tis = {(ti["task_id"], ti.get("rendered_map_index") or str(ti["map_index"])): ti
                   for ti in client.task_instances("loglake_batch", run["run_id"])}
            spark, mean = _spark_overhead(run)
            run["spark_seconds"], run["mean_overhead"] = spark, mean
            run["timing"] = {k: _ti_times(ti) for k, ti in tis.items()}
            runs.append(run)
            h.log(f"P5: run {run['run_id']} {run['state']} in {run['wall']:.0f}s, Spark {spark:.0f}s, "
                  f"mean overhead per Spark task {mean if mean is None else round(mean, 2)}s")
    finally:
        pss = sampler.stop()
    return {"runs": runs, "note": note, "sizes": sizes, "pss": pss}


def _ti_times(ti: dict) -> dict:
    """Seconds from scheduled to queued, and from queued to running, of one task instance."""
    from datetime import datetime

    def ts(k):
        v = ti.get(k)
        return datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None

    sched, queued, start = ts("scheduled_when"), ts("queued_when"), ts("start_date")
    return {"scheduled_to_queued": round((queued - sched).total_seconds(), 2) if sched and queued else None,
            "queued_to_running": round((start - queued).total_seconds(), 2) if queued and start else None}


def _p5(batch: dict) -> dict:
    tasks = []  # one row per task of every run
    for r in batch["runs"]:
        for (task_id, name), t in r["tasks"].items():
            v = t["value"] if isinstance(t["value"], dict) else {}
            spark = v.get("submit_seconds")
            row = {"run": r["run_id"], "task": task_id.split(".")[-1], "dataset": name, "state": t["state"],
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
                      "the spark-submit wall time its XCom summary carries (demo._spark_overhead's measure); runs "
                      "triggered through the REST API on the platform `loglake up` started, fresh events before each",
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
