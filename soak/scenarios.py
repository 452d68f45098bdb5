"""Fault scenarios: loglake's exactness under crashes, run at any scale.

Each scenario takes a ``Lab`` (a broker and per-scenario configs) and a ``scale`` and
returns a ``Outcome``: records, faults injected, offsets lost and duplicated, recovery
seconds per fault. ``tests/reliability`` runs them small inside ``make test``;
``soak/run.py`` (``make soak``) runs them at full size and writes the figures.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Outcome:
    id: str
    title: str
    records: int = 0
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    recovery_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    command: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.duplicated == 0

    def to_dict(self) -> dict:
        rec = self.recovery_seconds
        return {"id": self.id, "title": self.title, "records": self.records, "faults": self.faults,
                "lost": self.lost, "duplicated": self.duplicated, "exact": self.exact,
                "recovery_seconds": {"max": max(rec) if rec else None,
                                     "median": float(np.median(rec)) if rec else None, "each": rec},
                "seconds": round(self.seconds, 1), "command": self.command, "notes": self.notes}


class Lab:
    """A broker, a Spark session and fresh configs (own conf dir, topics, state) under ``root``.

    ``spark`` is the caller's session (the test suite's), or one started on first use.
    ``own_broker()`` gives a scenario a broker of its own to kill and restart.
    """

    def __init__(self, root: Path, bootstrap: str, spark=None):
        self.root, self.bootstrap = root, bootstrap
        self._spark = spark
        self._n = 0

    def config(self, bootstrap: str | None = None, **conf_kwargs):
        from loglake.config import load_config
        from loglake.sandbox import write_conf

        self._n += 1
        base = self.root / f"lab-{self._n}"
        conf_kwargs.setdefault("spark", {"conf": {"spark.ui.showConsoleProgress": "false"}})
        return load_config(write_conf(base, bootstrap or self.bootstrap, **conf_kwargs), home=base / "state")

    @property
    def spark(self):
        if self._spark is None:
            from spark_jobs.session import get_spark

            config = self.config()
            self._spark = get_spark(config, "loglake-soak", log_file=self.root / "spark-session.log")
        return self._spark

    def own_broker(self, heap: str = "512m"):
        """A new embedded broker on free ports (not started); the caller stops it."""
        from loglake.embedded_kafka import EmbeddedKafka
        from loglake.processes import free_port

        self._n += 1
        return EmbeddedKafka(self.root / f"kafka-{self._n}", port=free_port(), controller_port=free_port(), heap=heap)


def _landed(config, ds) -> np.ndarray:
    """(partition, offset) of every row the speed layer landed (speed ∪ its quarantine), with repeats."""
    from loglake.tables import open_table, query

    out = []
    for layer, where in (("speed", ""), ("quarantine", " WHERE \"_layer\" = 'speed'")):
        table = open_table(config.table_path(ds, layer))
        if table is not None:
            out += [(r["_partition"], r["_offset"]) for r in query(table, f"SELECT \"_partition\", \"_offset\" FROM t{where}")]
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def count_exactly_once(config, ds, ends: dict[int, int]) -> tuple[int, int]:
    """(lost, duplicated) offsets of the speed layer against the log ``[0, end)`` per partition."""
    from loglake.coverage import check_exactly_once

    rows = _landed(config, ds)
    lost = dup = 0
    for p, end in ends.items():
        cov = check_exactly_once(np.arange(end), rows[rows[:, 0] == p][:, 1], 0, end)
        lost += len(cov.missing) + len(cov.unexpected)
        dup += len(cov.duplicated)
    return lost, dup


def speed_kills(lab: Lab, records: int, kills: int, *, seed: int = 1, bad_fraction: float = 0.01,
                rate: float | None = None) -> Outcome:
    """R1: SIGKILL the speed job ``kills`` times at random moments while ``records`` arrive
    over 6 partitions; then every offset must be in speed ∪ quarantine exactly once."""
    from loglake.kafka_admin import group_offsets, log_bounds
    from loglake.processes import descendants, wait_for
    from loglake.produce import produce
    from loglake.streams import SpeedStream

    started = time.monotonic()
    config = lab.config(speed={"trigger_interval": "1 second"})
    ds = config.dataset("job_views")
    out = Outcome("R1", f"SIGKILL the speed job {kills}x during {records:,} records over {ds.partitions} partitions",
                  records=records, command=f"soak R1 records={records} kills={kills}")
    rng = random.Random(seed)
    produced: dict = {}
    rate = rate or max(200.0, records / max(30.0, kills * 25.0))
    producer = threading.Thread(target=lambda: produced.update(r=produce(
        config, ds, records, rate=rate, bad_fraction=bad_fraction, seed=seed)), daemon=True)
    stream = SpeedStream(config, ds)
    stream.start()
    try:
        producer.start()
        for _ in range(kills):
            time.sleep(rng.uniform(3.0, 12.0))
            supervisor = stream.pid()
            job = [p for p in descendants(supervisor) if p != supervisor] if supervisor else []
            if not job:
                continue
            for pid in job:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed_at, killed_wall = time.monotonic(), time.time()
            ends_then = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
            out.faults += 1
            # Recovered: the restarted query runs, and has committed what the log held at the kill.
            marker = stream.progress_file.with_suffix(".started")

            def recovered() -> bool:
                if not (marker.exists() and marker.stat().st_mtime > killed_wall):
                    return False
                now = group_offsets(config, ds.consumer_group, ds.topic, ds.partitions)
                return all((now.get(p) or 0) >= e for p, e in ends_then.items())

            wait_for(recovered, 300, "the speed job to run again and commit past the kill", log=stream.process)
            out.recovery_seconds.append(round(time.monotonic() - killed_at, 1))
        producer.join()
        ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
        wait_for(lambda: group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends, 600,
                 "the stream to catch up with the log end", log=stream.process)
    finally:
        stream.stop()
    out.lost, out.duplicated = count_exactly_once(config, ds, ends)
    out.records = sum(ends.values())
    out.seconds = time.monotonic() - started
    return out


# R8: what an operator may type, and the field each must be refused by (nothing runs).
BAD_CLI = [
    (["backfill", "job_views'; DROP TABLE batch.job_views; --", "--range", "0:0-1"], "unknown dataset"),
    (["backfill", "job_views", "--range", "0:0-5; DROP TABLE batch.job_views"], "ranges[0]"),
    (["backfill", "job_views", "--range", "0:0-5 OR 1=1"], "ranges[0]"),
    (["backfill", "job_views", "--range", "99:0-1"], "ranges[0].partition"),
    (["backfill", "job_views", "--range", "0:5-1"], "ranges[0].start"),
    (["backfill", "job_views", "--range", "0:0-999999999"], "ranges[0].end"),
    (["backfill", "job_views", "--range", "0:-3-1"], "ranges[0]"),
    (["backfill", "job_views", "--from", "2026-01-01' OR '1'='1", "--to", "2026-01-02"], "from_ts"),
    (["backfill", "job_views", "--range", "0:0-1", "--from", "2026-01-01", "--to", "2026-01-02"], "ranges"),
    (["backfill", "company_ceos", "--range", "0:0-1"], "dataset"),
    (["accept-loss", "job_views", "--reason", "  "], "reason"),
    (["accept-loss", "job_views", "--partition", "42", "--reason", "x"], "partition"),
    (["produce", "job_views; rm -rf /", "--count", "1"], "unknown dataset"),
    (["query", "DELETE FROM batch.job_views"], "read-only"),
]

BAD_PARAMS = [
    ({"dataset": "job_views", "ranges": ["0:0-5; DROP TABLE x"]}, "ranges[0]"),
    ({"dataset": "../../etc/passwd", "ranges": ["0:0-1"]}, "unknown dataset"),
    ({"dataset": "job_views", "ranges": ["0:3-1"]}, "ranges[0].start"),
    ({"dataset": "job_views", "from_ts": "yesterday; rm -rf /", "to_ts": "2026-01-01T00:00:00Z"}, "from_ts"),
    ({"dataset": "job_views"}, "ranges"),
]

BAD_CONF = [
    ("job_views.yaml", "kind: events\npartitions: [six\n", "job_views.yaml"),
    ("job_views.yaml", None, "partitions"),  # partitions: "six"
    ("job_views.yaml", None, "pattern"),     # a pattern Java refuses
    ("job_views.yaml", None, "surprise"),    # an unknown key
]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under ``root`` with its size and mtime: what a refused command must not change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime)
            for p in root.rglob("*") if p.is_file() and "logs" not in p.parts}


def bad_input(lab: Lab) -> Outcome:
    """R8: malformed config, unknown datasets, out-of-bounds ranges, injection-like values in
    CLI arguments and DAG params: each refused at the edge naming the field; nothing written."""
    import subprocess
    import sys

    import yaml

    from loglake.config import load_config
    from loglake.errors import ConfigError
    from loglake.produce import produce

    started = time.monotonic()
    config = lab.config()
    ds = config.dataset("job_views")
    produce(config, ds, 50, seed=8)
    out = Outcome("R8", "bad operator input: config, CLI arguments, DAG params", command="soak R8")
    before = _tree(config.home)
    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)}
    for args, field_ in BAD_CLI:
        r = subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env, capture_output=True, text=True,
                           timeout=300)
        out.faults += 1
        if r.returncode == 0 or field_ not in r.stderr or "Traceback" in r.stderr:
            out.notes.append(f"not refused as expected: loglake {' '.join(args)} -> {r.returncode}: {r.stderr[-300:]}")

    from loglake_airflow.plans import backfill_args  # the DAG's plan task body (plugins on sys.path)

    os.environ.update({"LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)})
    for params, field_ in BAD_PARAMS:
        out.faults += 1
        try:
            backfill_args({"ranges": None, "from_ts": None, "to_ts": None, "dry_run": False, **params}, "r8/run")
            out.notes.append(f"DAG params accepted: {params}")
        except Exception as e:  # AirflowFailException naming the field
            if field_ not in str(e) or type(e).__name__ != "AirflowFailException":
                out.notes.append(f"DAG params {params}: {type(e).__name__}: {e}")

    source = (config.conf_dir / "datasets" / "job_views.yaml").read_text()
    for name, text, field_ in BAD_CONF:
        out.faults += 1
        data = yaml.safe_load(source)
        if text is None:
            if field_ == "partitions":
                data["partitions"] = "six"
            elif field_ == "pattern":
                data["schema"]["view_id"]["pattern"] = "^(?P<id>[0-9a-f]+)$"
            else:
                data[field_] = True
            text = yaml.safe_dump(data)
        broken = lab.root / f"conf-{out.faults}"
        import shutil

        shutil.copytree(config.conf_dir, broken)
        (broken / "datasets" / name).write_text(text)
        try:
            load_config(broken, home=config.home)
            out.notes.append(f"config accepted: {field_}")
        except ConfigError as e:
            if field_ not in str(e):
                out.notes.append(f"config {field_}: {e}")
    changed = [k for k, v in _tree(config.home).items() if before.get(k) != v]
    changed += [k for k in before if not (config.home / k).exists()]
    if changed:
        out.notes.append(f"files changed by refused input: {changed[:10]}")
    out.lost = len(out.notes)  # a refusal that did not happen counts as a defect
    out.seconds = time.monotonic() - started
    return out
