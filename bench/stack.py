"""A platform of the bench's own, as ``loglake up`` runs it: P5, P7, P8 and P9 are measured on one.

``Platform`` starts everything — an embedded broker on a free port, both speed streams,
Airflow on a free port — from a conf dir and a state dir under the bench root, with the
repo's ``local`` profile settings (what ``make up`` runs), so it never touches a running
``make up``. Every step goes through the CLI (``loglake up`` / ``loglake down`` in a
subprocess, ``Cli``) except the measurements: when each component turned healthy, the
memory (PSS) of every process of the platform (``Sampler``), what is left after ``down``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from loglake.core.config import load_config
from loglake.core.paths import REPO_ROOT
from loglake.core.processes import Managed, alive, descendants, free_port, pss_bytes, terminate
from loglake.kafka.admin import dataset_state, log_bounds
from loglake.local.airflow_standalone import COMPONENTS, EmbeddedAirflow
from loglake.local.produce import produce
from loglake.testing import write_conf

GIB = 2**30


class Platform:
    """A platform of the bench's own: conf dir, state dir, free ports; driven through the CLI."""

    def __init__(self, base: Path):
        kafka_port = free_port()
        conf = write_conf(base, f"localhost:{kafka_port}")
        # The settings `make up` runs with (the repo's local profile), on the bench's broker port.
        local = yaml.safe_load((REPO_ROOT / "conf" / "loglake.yaml").read_text())["profiles"]["local"]
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
        # "speed": the speed application, which runs every dataset's stream (a loglake before
        # it, measured by bench.compare with this harness, ran one process per dataset).
        self.components = {"kafka": ["kafka"], "speed": ["speed", *(f"speed-{n}" for n in self.config.datasets)],
                           "airflow": [f"airflow-{c}" for c in COMPONENTS], "spark-jobs": ["spark-jobs"]}
        self.seen: dict[int, int] = {}  # every process of the platform ever seen: pid → start time

    def cli(self, action: str) -> Cli:
        """``loglake <action>`` in a subprocess, its output lines timestamped as they come."""
        return Cli([str(Path(sys.executable).parent / "loglake"), action], self.env)

    def trees(self) -> dict[str, dict[int, int]]:
        """Managed process name → its process tree (pid → start time); remembered in ``seen``."""
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
        self.proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
