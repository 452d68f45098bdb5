"""Exactly once when two speed streams of one dataset meet on an object-store lake (issue 44), as
Jepsen would break them: the stream process paused (SIGSTOP) past its lease's life while a second
host's stream takes over, then resumed (before a micro-batch commits, and inside its commit); a
second host whose clock runs two minutes ahead (Debian's ``faketime``); another stream creating a
micro-batch's plan while the first creates it.

Each stream is the speed job as a speed container runs it (spark-submit, in a process group of
its own); each host has a state directory of its own, and the tables, checkpoint and leases are
on the suite's S3 server (versitygw). What landed is counted by delta-rs reading the Delta tables
directly and held against the log's offsets as a bare Kafka client reads them: no loglake reader.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable

from loglake.core import objectstore
from loglake.jobs.launch import application, job_env, submit_command
from loglake.jobs.protocol import read_failure
from loglake import leases
from loglake.local.produce import produce
from loglake.speed.control import SpeedStream
from loglake.testing import make_config, run_loglake
from loglake.testing.proxy import StoreProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# The streams' leases live this long (seconds): a pause past it takes seconds, not minutes.
TTL = 6
FAKETIME = shutil.which("faketime")


class Stream:
    """A speed stream of ``ds`` on ``config`` (``loglake speed start``'s job, without its
    supervisor), in a process group of its own, its output in ``log``; ``conf``: more Spark settings."""

    def __init__(self, config, ds, log: Path, available_now: bool = False, conf: dict[str, str] | None = None):
        self.config, self.ds, self.log = config, ds, log
        self.stream = SpeedStream(config, ds)
        self.stream.summary_file.unlink(missing_ok=True)
        request = self.stream.request(available_now).with_summary_file(self.stream.summary_file)
        with open(log, "ab") as out:
            command = submit_command(config, application(request.job), request.argv(), "loglake-speed", conf)
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True,
                                         env={**job_env(config), "LOGLAKE_LEASE_TTL_SECONDS": str(TTL)})

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)  # the whole stream: spark-submit's JVM and the Python driver

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the stream did not end within {timeout:.0f}s:\n{self.tail()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait()

    def failure(self):
        """How the job said it ended (its summary), if it failed."""
        return read_failure(self.stream.summary_file)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def hosts(tmp_path, kafka_bootstrap, s3_lake):
    """Two hosts' configs: state directories of their own, the same topics, lake and leases."""
    suffix = uuid.uuid4().hex[:8]
    return [make_config(tmp_path / name, kafka_bootstrap, lake=s3_lake, topic_suffix=suffix)
            for name in ("host-a", "host-b")]


def log_ends(config, topic: str) -> dict[int, int]:
    """Each partition's end offset, from a bare Kafka client."""
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": f"count-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        consumer.close()


def landed(config, ds) -> collections.Counter:
    """(partition, offset) → how many rows the speed layer holds for it (its table and its part of
    quarantine), read by delta-rs from the Delta tables themselves."""
    counts: collections.Counter = collections.Counter()
    for layer in ("speed", "quarantine"):
        uri, options = objectstore.delta_location(config.table_path(ds, layer), config.object_store)
        try:
            table = DeltaTable(uri, storage_options=options).to_pyarrow_table()
        except Exception:  # noqa: BLE001 — no table yet: nothing landed there
            continue
        rows = table.to_pydict()
        for i, (p, o) in enumerate(zip(rows["_partition"], rows["_offset"])):
            if layer == "speed" or rows["_layer"][i] == "speed":
                counts[(p, o)] += 1
    return counts


def exactness(config, ds) -> tuple[int, int, int]:
    """(records in the log, offsets lost, offsets duplicated) of the speed layer."""
    ends = log_ends(config, ds.topic)
    counts = landed(config, ds)
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    lost = len(expected - set(counts)) + len(set(counts) - expected)
    duplicated = sum(1 for n in counts.values() if n > 1)
    return len(expected), lost, duplicated


def wait_landed(config, ds, records: int, timeout: float, stream: Stream) -> None:
    deadline = time.monotonic() + timeout
    while sum(landed(config, ds).values()) < records:
        if stream.proc.poll() is not None:
            raise AssertionError(f"the stream ended ({stream.proc.returncode}):\n{stream.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{records} records not landed within {timeout:.0f}s:\n{stream.tail()}")
        time.sleep(1)


def batch_files(config, ds, kind: str) -> list[int]:
    """The micro-batch ids of the checkpoint's ``offsets`` or ``commits`` files."""
    listed = objectstore.listing(config.object_store, f"{config.checkpoint_path(ds)}/{kind}/")
    names = [uri.rsplit("/", 1)[1] for uri in listed]
    return sorted(int(n) for n in names if n.isdigit())


def python_ahead(directory: Path, offset: str) -> Path:
    """This Python under ``faketime offset``: the speed job's driver, where loglake reads clocks
    (and takes leases), its clock shifted. Spark's JVM keeps the machine's: libfaketime's clock
    hangs its timed waits, and it reads no lease."""
    script = directory / "python-ahead"
    script.write_text(f'#!/bin/sh\nexec {FAKETIME} "{offset}" {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


def take_over(config, ds, log: Path, timeout: float) -> Stream:
    """Run the speed job of ``config``'s host to the log's end (available-now), started again while
    it finds the lease held (a live lease is refused; an expired one, taken): the run that ended."""
    deadline = time.monotonic() + timeout
    while True:
        stream = Stream(config, ds, log, available_now=True)
        code = stream.wait(max(60.0, deadline - time.monotonic()))
        failed = stream.failure()
        if code == 0 or failed is None or "runs already" not in failed.error or time.monotonic() > deadline:
            return stream
        time.sleep(3)


# make test-long only; make test covers its parts: a stream paused past its lease while another host's
# stream takes over, resumed and stopped, in test_a_stream_paused_inside_its_commit_...; a lease found
# taken before a micro-batch commits in test_object_store_leases; a pause request in test_delta_conflicts.
@pytest.mark.long
def test_a_stream_paused_past_its_lease_while_another_host_takes_over_lands_no_offset_twice(hosts, tmp_path):
    a, b = hosts
    ds = a.dataset("job_views")
    produce(a, ds, 300, bad_fraction=0.1, seed=1)
    first = Stream(a, ds, tmp_path / "host-a.log")
    try:
        wait_landed(a, ds, 300, 240, first)
        # A writer asks the stream to hold its appends (as maintenance does): its next micro-batch is
        # planned, then waits inside the micro-batch, its commits still to come.
        with leases.appends_paused(a, ds.name, "test: hold the next micro-batch"):
            produce(a, ds, 200, bad_fraction=0.1, seed=2)
            deadline = time.monotonic() + 120
            while not (batch_files(a, ds, "offsets")[-1:] > batch_files(a, ds, "commits")[-1:]):
                assert time.monotonic() < deadline, first.tail()
                time.sleep(0.5)
            time.sleep(3)  # inside the micro-batch, waiting
            first.signal(signal.SIGSTOP)  # paused: no renewal, no commit
        # Another host's stream: it takes the lease once it has seen it unchanged for its life,
        # replays the planned micro-batch and goes on to the log's end.
        second = take_over(b, ds, tmp_path / "host-b.log", 240)
        assert second.proc.returncode == 0, second.tail()
        first.signal(signal.SIGCONT)  # resumed: its micro-batch goes on where it stopped
        code = first.wait(120)
    finally:
        first.stop()
    produce(a, ds, 100, bad_fraction=0.1, seed=3)
    after = Stream(b, ds, tmp_path / "host-b.log", available_now=True)
    assert after.wait(300) == 0, after.tail()
    records, lost, duplicated = exactness(a, ds)
    assert (records, lost, duplicated) == (600, 0, 0)
    # The resumed stream committed nothing and stopped, saying why (loglake's error, transient).
    failed = first.failure()
    assert code != 0 and failed is not None and failed.error_type == "StreamRunningError", first.tail()
    assert failed.transient and "speed stream" in failed.error, failed


def test_a_stream_paused_inside_its_commit_while_another_host_commits_that_micro_batch_lands_it_once(
        tmp_path, kafka_bootstrap, s3_gateway):
    """The worst moment to pause: after every check a stream makes of its lease, inside the commit
    of a micro-batch's rows (its commit file on its way to the store). Another host's stream takes
    the lease and commits that micro-batch; the first, resumed, must not land it again: its commit
    is Delta's compare-and-swap on the micro-batch's transaction id, not a blind append."""
    with StoreProxy(s3_gateway.port) as proxy:
        bucket = f"lake-{uuid.uuid4().hex[:8]}"
        s3_gateway.create_bucket(bucket)
        store = s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "s3-credentials"))
        suffix = uuid.uuid4().hex[:8]

        def host(name: str, endpoint: str):
            lake = {"root": f"s3a://{bucket}/lake", "checkpoints": f"s3a://{bucket}/checkpoints",
                    "object_store": {**store, "endpoint": endpoint}}
            return make_config(tmp_path / name, kafka_bootstrap, lake=lake, topic_suffix=suffix)

        a = host("host-a", proxy.endpoint)  # host a reaches the store through the proxy
        b = host("host-b", s3_gateway.endpoint)  # (loaded last: this process reads the store directly)
        ds = a.dataset("job_views")
        produce(a, ds, 300, bad_fraction=0.1, seed=7)
        first = Stream(a, ds, tmp_path / "host-a.log")
        other: dict = {}

        def pause_inside_the_commit(_head: bytes) -> None:
            first.signal(signal.SIGSTOP)
            try:
                other["stream"] = take_over(b, ds, tmp_path / "host-b.log", 240)
            finally:
                first.signal(signal.SIGCONT)  # then the held commit goes on to the store

        try:
            wait_landed(b, ds, 300, 240, first)
            proxy.on_request(rf"PUT /{bucket}/lake/speed/{ds.name}/_delta_log/\d{{20}}\.json[ ?]",
                             pause_inside_the_commit)
            produce(a, ds, 200, bad_fraction=0.1, seed=8)
            code = first.wait(400)
        finally:
            first.stop()
        assert other["stream"].proc.returncode == 0, other["stream"].tail()
    produce(a, ds, 100, bad_fraction=0.1, seed=9)
    after = Stream(b, ds, tmp_path / "host-b.log", available_now=True)
    assert after.wait(300) == 0, after.tail()
    assert exactness(b, ds) == (600, 0, 0)
    failed = first.failure()
    assert code != 0 and failed is not None and failed.error_type == "StreamRunningError", first.tail()


@pytest.mark.skipif(FAKETIME is None, reason="Debian's faketime is not installed (make setup-test installs it)")
def test_a_host_whose_clock_runs_two_minutes_ahead_cannot_take_a_live_streams_lease(hosts, tmp_path):
    a, b = hosts
    ds = a.dataset("job_views")
    produce(a, ds, 200, bad_fraction=0.1, seed=4)
    first = Stream(a, ds, tmp_path / "host-a.log")
    try:
        wait_landed(a, ds, 200, 240, first)
        # The lease's record says, by host a's clock, until when it holds; host b reads it two
        # minutes later than that by its own clock. It must still see a lease that is renewed.
        lease = leases.DatasetLock(a, ds.name, "stream")
        token = lease.holder()["token"]  # host a's stream holds it
        python = python_ahead(tmp_path, "+2 minutes")
        skew = float(subprocess.run([str(python), "-c", "import time; print(time.time())"], capture_output=True,
                                    text=True, check=True).stdout) - time.time()
        assert 110 < skew < 130, skew
        ahead = Stream(b, ds, tmp_path / "host-b.log", available_now=True,
                       conf={"spark.pyspark.driver.python": str(python)})
        produce(a, ds, 200, bad_fraction=0.1, seed=5)
        ahead.wait(300)
        assert (lease.holder() or {}).get("token") == token, ahead.tail()  # never taken from host a
        failed = ahead.failure()
        assert failed is not None and failed.error_type == "StreamRunningError", ahead.tail()
        assert "speed stream" in failed.error and "on " in failed.error, failed  # names host a's stream
        wait_landed(a, ds, 400, 240, first)
        assert first.proc.poll() is None, first.tail()  # host a's stream runs on
    finally:
        first.stop()
    records, lost, duplicated = exactness(a, ds)
    assert (records, lost, duplicated) == (400, 0, 0)


def test_a_micro_batch_whose_plan_another_stream_created_first_is_not_replanned(tmp_path, kafka_bootstrap,
                                                                               s3_gateway):
    """Another stream creates ``offsets/1`` (its plan for micro-batch 1) while this one is creating
    it: the store refuses this one's, the other's plan stands and this stream stops, saying so."""
    with StoreProxy(s3_gateway.port) as proxy:
        bucket = f"lake-{uuid.uuid4().hex[:8]}"
        s3_gateway.create_bucket(bucket)
        store = {**s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "s3-credentials")),
                 "endpoint": proxy.endpoint}
        config = make_config(tmp_path, kafka_bootstrap, speed={"max_offsets_per_trigger": 100},
                             lake={"root": f"s3a://{bucket}/lake", "checkpoints": f"s3a://{bucket}/checkpoints",
                                   "object_store": store})
        ds = config.dataset("job_views")
        produce(config, ds, 300, seed=6)
        key = f"checkpoints/speed/{ds.name}/offsets"
        direct = s3_gateway.client()
        other = {}

        def other_stream_plans_batch_1(_head: bytes) -> None:
            # Another stream's plan: (here) the offsets of batch 0, a range this stream did not plan.
            other["plan"] = direct.get_object(Bucket=bucket, Key=f"{key}/0")["Body"].read()
            direct.put_object(Bucket=bucket, Key=f"{key}/1", Body=other["plan"])

        proxy.on_request(rf"PUT /{bucket}/{key}/1[ ?]", other_stream_plans_batch_1)
        run = run_loglake(config, "speed", "run", ds.name, "--available-now", timeout=600)
        assert other, "the stream never created offsets/1"
        assert direct.get_object(Bucket=bucket, Key=f"{key}/1")["Body"].read() == other["plan"]
        assert run.returncode != 0, run.stdout + run.stderr
        assert "StreamRunningError" in run.stderr and "another stream planned" in run.stderr, run.stderr
        assert "Traceback" not in run.stdout + run.stderr
