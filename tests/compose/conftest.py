"""`make test-compose`: the docker/ stack built, started and put through faults (issue 25).

Collected only when LOGLAKE_TEST_COMPOSE is set (the target sets it): `make test` never starts
a container. The stack is a compose project of its own (``loglake-test``) on free loopback
ports, so a `make compose-up` stack beside it is left alone; it is removed with its volumes at
the end (LOGLAKE_KEEP_STACK=1 keeps it for a look; LOGLAKE_REUSE_STACK=1 starts from it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from loglake.core.processes import free_port

collect_ignore_glob = [] if os.environ.get("LOGLAKE_TEST_COMPOSE") else ["test_*.py"]

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(os.environ.get("LOGLAKE_COMPOSE_RESULTS", REPO / ".loglake" / "test-compose" / "results.json"))


def _stack_module():
    spec = importlib.util.spec_from_file_location("loglake_docker_stack", REPO / "docker" / "stack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Stack:
    """The running stack as a test drives it: compose, docker, the host's loglake, Airflow."""

    def __init__(self, module):
        self.m = module
        self.project = module.PROJECT
        self.network = f"{self.project}_default"
        self.results: dict = {}

    def container(self, service: str) -> str:
        return f"{self.project}-{service}-1"

    def docker(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([self.m._docker(), *args], capture_output=True, text=True, check=check, timeout=timeout)

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.m.compose(*args, check=check, capture=True)

    def run_in(self, service: str, script: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``python -c script`` in a new container of ``service`` (its environment, secrets, network)."""
        cmd = [*self.m.compose_cmd(), "-f", str(self.m.COMPOSE_FILE), "-p", self.project, "run", "--rm", "--no-deps",
               "-T", service, "/opt/loglake/.venv/bin/python", "-c", script]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def env(self) -> dict[str, str]:
        return self.m.host_env()

    def loglake(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        exe = REPO / ".venv" / "bin" / "loglake"
        return subprocess.run([str(exe), *args], env={**os.environ, **self.env()}, capture_output=True, text=True,
                              timeout=timeout)

    def config(self):
        from loglake.core.config import load_config

        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            return load_config(REPO / "conf", profile="cluster", home=self.env()["LOGLAKE_HOME"])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def airflow(self):
        from loglake.local.airflow_client import AirflowClient

        return AirflowClient(self.m.AIRFLOW_URL, self.m.token("admin"))

    def record(self, key: str, value) -> None:
        self.results[key] = value
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(self.results, indent=2, sort_keys=True, default=str))
        print(f"test-compose: {key} = {value}", file=sys.stderr, flush=True)

    def memory_mib(self) -> float:
        """The stack's containers' memory now (``docker stats --no-stream``), MiB."""
        out = self.docker("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}").stdout
        total = 0.0
        for line in out.splitlines():
            name, _, usage = line.partition(" ")
            if not name.startswith(f"{self.project}-"):
                continue
            used = usage.split("/")[0].strip()
            num, unit = float(used.rstrip("KMGiB")), used.lstrip("0123456789.")
            total += num * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "B": 1 / 2**20}.get(unit, 1)
        return round(total, 1)


@pytest.fixture(scope="session")
def stack():
    ports = {"LOGLAKE_AIRFLOW_PORT": free_port(), "LOGLAKE_S3_PORT": free_port(),
             **{f"LOGLAKE_KAFKA_{n}_PORT": free_port() for n in (1, 2, 3)}}
    os.environ.update({k: str(v) for k, v in ports.items()})
    os.environ.setdefault("LOGLAKE_COMPOSE_PROJECT", "loglake-test")
    # A scheduled batch run soon after start; maintenance never due (it would expire speed rows
    # the exactness checks count); a task whose Celery worker died is given up after 60 s.
    os.environ.setdefault("LOGLAKE_BATCH_SCHEDULE", "*/4 * * * *")
    os.environ.setdefault("LOGLAKE_MAINTENANCE_SCHEDULE", "0 0 29 2 *")
    os.environ.setdefault("LOGLAKE_TASK_HEARTBEAT_TIMEOUT", "60")
    module = _stack_module()
    s = Stack(module)
    if not os.environ.get("LOGLAKE_REUSE_STACK"):  # (a stack kept by LOGLAKE_KEEP_STACK, to iterate on a test)
        s.compose("down", "--volumes", check=False)  # a leftover of an interrupted run
    started = time.monotonic()
    assert module.up(900) == 0, "the stack did not come up healthy (python docker/stack.py compose logs SERVICE)"
    s.record("up_seconds", round(time.monotonic() - started, 1))
    s.record("memory_mib_idle", s.memory_mib())
    try:
        yield s
    finally:
        if not os.environ.get("LOGLAKE_KEEP_STACK"):
            s.compose("down", "--volumes", check=False)


# --- exactness, counted without loglake's own reading code ---------------------------------------


def log_offsets(config, topic: str) -> set[tuple[int, int]]:
    """Every (partition, offset) of a committed record in ``topic``, read from Kafka."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config.kafka_client_conf(), "group.id": f"test-compose-count-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts}
        consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _hi) in ends.items()])
        todo = {p for p, (lo, hi) in ends.items() if hi > lo}
        seen: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 300
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    todo.discard(msg.partition())
                continue
            seen.add((msg.partition(), msg.offset()))
            if msg.offset() + 1 >= ends[msg.partition()][1]:
                todo.discard(msg.partition())
        assert not todo, f"could not read partitions {sorted(todo)} of {topic} to their end"
        return seen
    finally:
        consumer.close()


def table_offsets(path: str, layer: str | None = None) -> list[tuple[int, int]]:
    """(partition, offset) of every row of the Delta table at ``path`` (a quarantine's of ``layer``)."""
    from deltalake import DeltaTable

    from loglake.core.objectstore import delta_location

    uri, options = delta_location(path)
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return []
    cols = ["_partition", "_offset"] + (["_layer"] if layer else [])
    t = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=cols).to_pylist()
    return [(r["_partition"], r["_offset"]) for r in t if layer is None or r["_layer"] == layer]


def count_against_log(config, ds, layer: str = "speed", below: dict[int, int] | None = None) -> dict:
    """Lost, duplicated and unexpected offsets of ``layer`` (its table and its quarantine rows)
    against the log; ``below``: only offsets under each partition's bound (a batch watermark)."""
    log = log_offsets(config, ds.topic)
    if below is not None:
        log = {(p, o) for p, o in log if o < below.get(p, 0)}
    rows = Counter(table_offsets(config.table_path(ds, layer))
                   + table_offsets(config.table_path(ds, "quarantine"), layer))
    if below is not None:
        rows = Counter({k: v for k, v in rows.items() if k[1] < below.get(k[0], 0)})
    return {"log": len(log), "lost": len(log - rows.keys()), "duplicated": sum(v - 1 for v in rows.values() if v > 1),
            "unexpected": len(rows.keys() - log)}
