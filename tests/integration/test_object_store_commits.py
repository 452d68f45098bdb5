"""Two engines commit to one Delta table on the object store at once, on no shared lock: a
Spark writer (its own process, with loglake's Spark settings for an ``s3a://`` lake) and a
delta-rs writer (loglake's delta-rs options). Each version must be created by exactly one of
them, through the store's conditional create (``If-None-Match: *``): Spark through
``io.loglake.storage.S3ConditionalLogStore``, delta-rs by default.

With Delta's own S3 log store (``S3SingleDriverLogStore``: look, then overwrite) the same race
loses delta-rs commits: Spark's commit file replaces one delta-rs had just created, and that
append's row is gone from the table although delta-rs reported it committed. ``race`` and
``audit`` show it when given ``log_store=DELTA_DEFAULT``.

Spark reaches the store through ``SlowCommits``, which holds each PUT of a commit file for
``COMMIT_LATENCY``: a real store's PUT takes tens of milliseconds, loopback's well under one, and
that time is the window in which a look-then-write log store overwrites another writer's commit.
Everything else (and delta-rs) goes to the store at loopback speed.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from loglake.core import objectstore
from loglake.core.config import Config
from loglake.jobs.launch import S3_LOG_STORE, job_env
from loglake.testing.conf import NO_BROKER, make_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DELTA_DEFAULT = "io.delta.storage.S3SingleDriverLogStore"  # Delta's own for s3a://
SPARK_APPENDS = 8
# delta-rs appends all the while Spark appends, one every RS_INTERVAL seconds at most, and each
# commit PUT of Spark's takes COMMIT_LATENCY: a commit attempt of Spark's meets one of delta-rs'
# about half the time. With Delta's own log store every one of 5 runs here lost delta-rs commits
# (3 to 7 of them for Spark's 8 appends); with loglake's, Spark's attempts that lose are refused
# (412) and made again at the next version (26 and 36 attempts for the 8 appends in 2 runs). Not
# more often: Spark, the slower writer, would spend minutes catching up.
# RS_MAX_APPENDS keeps a stuck Spark writer from growing the log without end.
RS_INTERVAL = 0.3
COMMIT_LATENCY = 0.15
RS_MAX_APPENDS = 150
SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64())])

# The Spark writer: warm (a first append to a table of its own, a read of the race's table),
# say it is ready, wait for the start, then ``appends`` appends of one row each.
_SPARK_WRITER = """
import json, sys, time
from pathlib import Path
from loglake.core.config import load_config
from loglake.jobs.session import get_spark

table, scratch, appends, signals, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
spark = get_spark(load_config(), "loglake-commit-race", extra=json.loads(extra))
schema = "writer string, seq long"
spark.createDataFrame([("warm-up", 0)], schema).write.format("delta").mode("append").save(scratch)
spark.read.format("delta").load(table).count()
(signals / "ready").touch()
while not (signals / "go").exists():
    time.sleep(0.005)
for seq in range(appends):
    spark.createDataFrame([("spark", seq)], schema).coalesce(1).write.format("delta").mode("append").save(table)
(signals / "log-store").write_text(spark.conf.get("spark.delta.logStore.s3a.impl"))
(signals / "done").touch()
spark.stop()
"""


class SlowCommits:
    """A TCP proxy on loopback to ``upstream_port`` that holds each request that PUTs a Delta commit
    file (``.../_delta_log/<20 digits>.json``) for ``latency`` seconds before passing it on."""

    _COMMIT_PUT = re.compile(rb"^PUT \S*/_delta_log/\d{20}\.json[ ?]")

    def __init__(self, upstream_port: int, latency: float):
        self.upstream_port = upstream_port
        self.latency = latency
        self.held = 0  # commit PUTs held so far
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> SlowCommits:
        threading.Thread(target=self._accept, name="slow-commits", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for src, dst, hold in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(src, dst, hold), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, hold: bool) -> None:
        try:
            while chunk := src.recv(65536):
                # A request's head starts a chunk (the SDK's HTTP client writes no pipelined requests).
                if hold and self._COMMIT_PUT.match(chunk):
                    self.held += 1
                    time.sleep(self.latency)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


@dataclass
class Race:
    spark_appends: int
    rs_appended: list[int] = field(default_factory=list)  # the seq of each append delta-rs reported done
    seconds: float = 0.0
    spark_log_store: str = ""  # the Delta log store the Spark writer committed through


def lake_config(gateway, root: Path, endpoint: str) -> Config:
    """A config whose lake is on a bucket of its own on ``gateway``, reached at ``endpoint``."""
    bucket = f"race-{uuid.uuid4().hex[:10]}"
    gateway.create_bucket(bucket)
    store = {**gateway.settings(gateway.write_credentials_file(root / "credentials")), "endpoint": endpoint}
    return make_config(root, NO_BROKER, lake={"root": f"s3a://{bucket}/lake", "object_store": store})


def _rows(writer: str, seq: int) -> pa.Table:
    return pa.Table.from_pylist([{"writer": writer, "seq": seq}], schema=SCHEMA)


def race(config: Config, table: str, work: Path, rs_endpoint: str, appends: int = SPARK_APPENDS,
         log_store: str | None = None, rs_interval: float = RS_INTERVAL, rs_max: int = RS_MAX_APPENDS) -> Race:
    """Create ``table`` (version 0, delta-rs), then Spark's ``appends`` appends and delta-rs'
    appends, started at the same moment; delta-rs appends until Spark is done (one every
    ``rs_interval`` seconds at most, ``rs_max`` at most), reaching the store at ``rs_endpoint``.
    ``log_store`` replaces loglake's Delta log store in the Spark writer."""
    location, options = objectstore.delta_location(table, config.object_store)
    options = {**options, "AWS_ENDPOINT_URL": rs_endpoint}
    write_deltalake(location, SCHEMA.empty_table(), storage_options=options)
    signals = work / "signals"
    signals.mkdir(parents=True)
    script = work / "spark_writer.py"
    script.write_text(_SPARK_WRITER)
    extra = {"spark.delta.logStore.s3a.impl": log_store} if log_store else {}
    scratch = table.rstrip("/") + "-warm-up"
    log = work / "spark_writer.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(script), table, scratch, str(appends), str(signals),
                                 json.dumps(extra)], env=job_env(config, spark_submitted=False),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait(lambda: (signals / "ready").exists(), proc, log, 180, "the Spark writer to be ready")
        outcome = Race(appends)
        failure: list[BaseException] = []

        def rs_writer() -> None:
            try:
                while not (signals / "done").exists() and proc.poll() is None \
                        and len(outcome.rs_appended) < rs_max:
                    start = time.monotonic()
                    seq = len(outcome.rs_appended)
                    write_deltalake(location, _rows("delta-rs", seq), mode="append", storage_options=options)
                    outcome.rs_appended.append(seq)
                    time.sleep(max(0.0, rs_interval - (time.monotonic() - start)))
            except BaseException as e:  # re-raised below, in the test's thread
                failure.append(e)

        t0 = time.monotonic()
        (signals / "go").touch()
        writer = threading.Thread(target=rs_writer, name="delta-rs-writer")
        writer.start()
        _wait(lambda: proc.poll() is not None, proc, log, 240, "the Spark writer to finish", exited_ok=True)
        writer.join(60)
        outcome.seconds = time.monotonic() - t0
        if failure:
            raise failure[0]
        assert proc.returncode == 0, f"the Spark writer failed (exit {proc.returncode}):\n{_tail(log)}"
        outcome.spark_log_store = (signals / "log-store").read_text()
        return outcome
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait(done, proc, log: Path, timeout: float, what: str, exited_ok: bool = False) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None and not exited_ok:
            raise AssertionError(f"the Spark writer exited ({proc.returncode}) before {what}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


_COMMIT = re.compile(r"/_delta_log/(\d{20})\.json$")


def commits(table: str, store) -> dict[int, list[dict]]:
    """Every commit file of ``table`` on the store: version -> its actions."""
    bucket, prefix = objectstore.split(table.rstrip("/") + "/_delta_log/")
    s3 = objectstore.client(store, table)
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            m = _COMMIT.search("/" + obj["Key"])
            if m:
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
                found[int(m.group(1))] = [json.loads(line) for line in body.splitlines() if line.strip()]
    return found


def _engine(actions: list[dict]) -> str | None:
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    engine = info.get("engineInfo") or ""
    return "spark" if engine.startswith("Apache-Spark") else "delta-rs" if engine.startswith("delta-rs") else None


def spark_retried(table: str, store) -> list[int]:
    """The versions Spark committed past another writer's commits: its transaction read an
    older version than the one before (its first attempt found its version taken, 412)."""
    retried = []
    for version, actions in commits(table, store).items():
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if _engine(actions) == "spark" and info.get("readVersion", version - 1) < version - 1:
            retried.append(version)
    return sorted(retried)


def audit(table: str, outcome: Race, store) -> list[str]:
    """What is wrong with ``table`` after ``race``: rows not there exactly once, versions not
    0..M, commit files that are not one writer's."""
    problems = []
    expected = [("spark", s) for s in range(outcome.spark_appends)] + [("delta-rs", s) for s in outcome.rs_appended]
    location, options = objectstore.delta_location(table, store)
    rows = DeltaTable(location, storage_options=options).to_pyarrow_table().to_pylist()
    counts: dict[tuple, int] = {}
    for r in rows:
        counts[(r["writer"], r["seq"])] = counts.get((r["writer"], r["seq"]), 0) + 1
    lost = sorted(k for k in expected if k not in counts)
    twice = sorted(k for k, n in counts.items() if n > 1)
    extra = sorted(set(counts) - set(expected))
    if lost:
        problems.append(f"{len(lost)} appended rows are not in the table (commits lost): {lost}")
    if twice:
        problems.append(f"rows more than once: {twice}")
    if extra:
        problems.append(f"rows nobody appended: {extra}")

    log = commits(table, store)
    top = len(expected)  # version 0 creates the table, then one version per append
    if sorted(log) != list(range(top + 1)):
        missing, beyond = sorted(set(range(top + 1)) - set(log)), sorted(set(log) - set(range(top + 1)))
        problems.append(f"versions are not 0..{top}: missing {missing}, beyond {beyond}")
    for version, actions in sorted(log.items()):
        if version == 0:
            continue
        engine = _engine(actions)
        adds = [a["add"] for a in actions if "add" in a]
        written = set()
        for add in adds:
            stats = json.loads(add.get("stats") or "{}")
            if stats.get("numRecords"):
                written.add((stats["minValues"]["writer"], stats["minValues"]["seq"]))
                written.add((stats["maxValues"]["writer"], stats["maxValues"]["seq"]))
        if engine is None or len(written) != 1 or next(iter(written))[0] != engine:
            problems.append(f"version {version} is not one writer's append: engine {engine}, rows {sorted(written)}")
    return problems


def test_spark_and_delta_rs_racing_on_the_store_each_commit_every_append_once(s3_gateway, tmp_path):
    with SlowCommits(s3_gateway.port, COMMIT_LATENCY) as slow:
        config = lake_config(s3_gateway, tmp_path, slow.endpoint)
        table = f"{config.lake_root}/race/events"
        outcome = race(config, table, tmp_path, s3_gateway.endpoint)
        assert outcome.spark_log_store == S3_LOG_STORE
        assert slow.held >= SPARK_APPENDS  # Spark's commits went through the proxy
        assert audit(table, outcome, config.object_store) == []
        # A race indeed: delta-rs appended all along, and Spark's commits found their versions taken.
        assert len(outcome.rs_appended) >= SPARK_APPENDS, outcome
        assert spark_retried(table, config.object_store), outcome
