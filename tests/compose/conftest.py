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
        # Per topic, the (partition, offset) of each record the tests' producer made malformed (its
        # own account): the quarantine must hold these and no other.
        self.malformed: dict[str, set[tuple[int, int]]] = {}

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
        from loglake.testing.commands import environment

        with environment(self.env()):
            return load_config(REPO / "conf", profile="cluster", home=self.env()["LOGLAKE_HOME"])

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
             "LOGLAKE_PROMETHEUS_PORT": free_port(), **{f"LOGLAKE_KAFKA_{n}_PORT": free_port() for n in (1, 2, 3)}}
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


def log_records(config, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bool, int]]:
    """Every committed record of ``topic``, read from Kafka: (partition, offset) → (its key, whether
    it is a tombstone (no value), its timestamp in ms)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config.kafka_client_conf(), "group.id": f"test-compose-count-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts}
        consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _hi) in ends.items()])
        todo = {p for p, (lo, hi) in ends.items() if hi > lo}
        seen: dict[tuple[int, int], tuple[bytes | None, bool, int]] = {}
        deadline = time.monotonic() + 300
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    todo.discard(msg.partition())
                continue
            seen[(msg.partition(), msg.offset())] = (msg.key(), msg.value() is None, msg.timestamp()[1])
            if msg.offset() + 1 >= ends[msg.partition()][1]:
                todo.discard(msg.partition())
        assert not todo, f"could not read partitions {sorted(todo)} of {topic} to their end"
        return seen
    finally:
        consumer.close()


def table_offsets(config, path: str, layer: str | None = None) -> list[tuple[int, int]]:
    """(partition, offset) of every row of the Delta table at ``path`` (a quarantine's of ``layer``)."""
    from deltalake import DeltaTable

    from loglake.core.objectstore import delta_location

    uri, options = delta_location(path, config.object_store)
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return []
    cols = ["_partition", "_offset"] + (["_layer"] if layer else [])
    t = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=cols).to_pylist()
    return [(r["_partition"], r["_offset"]) for r in t if layer is None or r["_layer"] == layer]


def newest_per_key(records: dict[tuple[int, int], tuple[bytes | None, bool, int]]) -> set[tuple[int, int]]:
    """Of a changelog's records, the (partition, offset) of each key's newest change that is not a
    tombstone: what its batch table holds. Within a partition offset order decides; a key spread
    over partitions is ordered by Kafka time (docs: changelog order)."""
    def newer(a: tuple[int, int], b: tuple[int, int]) -> bool:
        if a[0] == b[0]:
            return a[1] > b[1]
        return (records[a][2], *a) > (records[b][2], *b)

    newest: dict[bytes | None, tuple[int, int]] = {}
    for at, (key, _tombstone, _ts) in records.items():
        if key not in newest or newer(at, newest[key]):
            newest[key] = at
    return {at for at in newest.values() if not records[at][1]}


def count_against_log(config, ds, layer: str = "speed", below: dict[int, int] | None = None,
                      malformed: set[tuple[int, int]] | frozenset = frozenset()) -> dict:
    """Lost, duplicated and unexpected offsets of ``layer`` (its table and its quarantine rows)
    against the log; ``below``: only offsets under each partition's bound (a batch watermark).
    ``malformed``: the offsets the producer made malformed; the quarantine must hold those
    (``malformed_in_table``: one in the table instead) and no other (``wrongly_quarantined``:
    a valid record taken out of the layer).

    Every offset is in the table or the quarantine once, except in a changelog's batch table,
    which holds each key's newest valid change unless that is a tombstone: there the table must
    hold exactly those, and every other offset is in the quarantine, superseded or deleted."""
    records = log_records(config, ds.topic)
    if below is not None:
        records = {(p, o): r for (p, o), r in records.items() if o < below.get(p, 0)}
    log = set(records)
    table = Counter(table_offsets(config, config.table_path(ds, layer)))
    quarantined = Counter(table_offsets(config, config.table_path(ds, "quarantine"), layer))
    if below is not None:
        table, quarantined = (Counter({k: v for k, v in c.items() if k[1] < below.get(k[0], 0)})
                              for c in (table, quarantined))
    landed = table + quarantined
    duplicated = sum(v - 1 for v in landed.values() if v > 1)
    against_producer = {"malformed_in_table": len((malformed & log) & table.keys()),
                        "wrongly_quarantined": len(quarantined.keys() - malformed)}
    if ds.kind == "changelog" and layer == "batch":
        expected = newest_per_key({at: r for at, r in records.items() if at not in quarantined})
        return {"log": len(log), "lost": len(expected - table.keys()), "duplicated": duplicated,
                "unexpected": len(table.keys() - expected) + len(quarantined.keys() - log),
                "superseded_or_deleted": len(log - landed.keys() - expected), **against_producer}
    return {"log": len(log), "lost": len(log - landed.keys()), "duplicated": duplicated,
            "unexpected": len(landed.keys() - log), **against_producer}
