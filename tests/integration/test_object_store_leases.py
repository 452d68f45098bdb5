"""The dataset leases and the speed stream's lease on an object-store lake (issue 25): records
on the store changed by compare-and-swap (versitygw, a real S3 server), no shared filesystem.
A writer cut off from the store (a proxy in front of it, issue 44): it renews through a short
outage, and once another host took its lease it commits nothing more."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from loglake.core import objectstore
from loglake.core.errors import LoglakeError, StreamRunningError, WriterBusyError
from loglake import leases
from loglake.ledger import snapshots
from loglake.testing import NO_BROKER, hold_writer_lease, make_config, take_writer_lease
from loglake.testing.proxy import StoreProxy
from loglake.lake import delta_io


def test_the_writer_lease_lives_on_the_store_and_a_second_writer_waits_for_it(store_config):
    config = store_config
    assert config.lock_root.startswith("s3a://")
    p, token = hold_writer_lease(config, "job_views", 4)
    try:
        held, _etag = objectstore.get_json(config.object_store, f"{config.lock_root}/job_views.json")
        assert held["token"] == token and held["run_id"] == "run-7"
        with pytest.raises(WriterBusyError, match="maintenance run run-7"):
            with leases.writer(config, "job_views", "batch", wait_seconds=0):
                pass
        started = time.monotonic()
        with leases.writer(config, "job_views", "batch", "run-8", wait_seconds=60, say=lambda m: None):
            assert leases.holders(config, ["job_views"])["job_views"]["run_id"] == "run-8"
        assert time.monotonic() - started > 1  # it waited for the holder to release
    finally:
        p.wait(timeout=60)
    assert leases.holders(config, ["job_views"]) == {}


def test_of_writers_racing_for_a_free_lease_exactly_one_takes_it(store_config):
    lock = leases.DatasetLock(store_config, "company_ceos")
    gate = threading.Barrier(8)
    won: list[str] = []

    def race(i: int) -> None:
        gate.wait()
        token, _held, _nested = lock.try_acquire("batch", f"run-{i}")
        if token:
            won.append(token)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert lock.holder()["token"] == won[0]


def test_a_lease_of_another_host_holds_for_its_life_then_is_broken(store_config):
    uri = f"{store_config.lock_root}/job_views.json"
    assert objectstore.put_json(store_config.object_store, uri, {
        "operation": "batch", "run_id": "far", "token": "t", "host": "elsewhere", "pid": 1, "acquired_at": "then",
        "ttl": 2, "expires": 0}, None)
    with pytest.raises(WriterBusyError, match="batch run far .pid 1 on elsewhere"):
        with leases.writer(store_config, "job_views", "maintenance", wait_seconds=0):
            pass
    t0 = time.monotonic()
    with leases.writer(store_config, "job_views", "maintenance", wait_seconds=10, say=lambda m: None):
        assert time.monotonic() - t0 >= 2  # seen unchanged for its life, on this process's clock


def test_one_stream_per_dataset_and_a_stream_whose_lease_was_taken_stops(store_config, monkeypatch):
    monkeypatch.setattr(leases.records, "RENEW_SECONDS", 0.2)
    with leases.stream_lease(store_config, "job_views") as lease:
        lease.check()
        with pytest.raises(StreamRunningError, match="speed stream"):
            with leases.stream_lease(store_config, "job_views"):
                pass
        # Another stream takes the record (as it would once this one's lease expired): the
        # next renewal finds it gone, and the stream stops before its next micro-batch.
        uri = f"{store_config.lock_root}/job_views.stream.json"
        held, etag = objectstore.get_json(store_config.object_store, uri)
        assert objectstore.put_json(store_config.object_store, uri, {**held, "token": "other", "host": "elsewhere",
                                                                 "where": "elsewhere", "pid": 2}, etag)
        deadline = time.monotonic() + 10
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(StreamRunningError, match="elsewhere"):
            lease.check()


def test_on_the_store_every_micro_batch_is_checked_and_a_taken_lease_is_found_at_the_commit(store_config,
                                                                                            monkeypatch):
    """The lease on the store is no fence (a stream can pause past its life): every micro-batch's
    commits are checked by Delta, and ``check`` (before a micro-batch commits) asks the store
    itself, not what the renewals last found."""
    monkeypatch.setattr(leases.records, "RENEW_SECONDS", 60.0)  # no renewal within the test
    with leases.stream_lease(store_config, "job_views") as lease:
        assert lease.checked
        uri = f"{store_config.lock_root}/job_views.stream.json"
        held, etag = objectstore.get_json(store_config.object_store, uri)
        assert objectstore.put_json(store_config.object_store, uri, {**held, "token": "other", "host": "elsewhere",
                                                                 "where": "elsewhere", "pid": 2}, etag)
        with pytest.raises(StreamRunningError, match="elsewhere"):
            lease.check()


def test_a_pause_request_and_the_checkpoint_are_read_from_the_store(store_config):
    config = store_config
    ds = config.dataset("job_views")
    assert leases.appends_pause(config, ds.name) is None
    with leases.appends_paused(config, ds.name, "maintenance m-1: expire"):
        assert leases.appends_pause(config, ds.name)["what"] == "maintenance m-1: expire"
    assert leases.appends_pause(config, ds.name) is None

    checkpoint = config.checkpoint_path(ds)
    assert checkpoint.startswith("s3a://") and snapshots._stream(config, ds) is None
    objectstore.write_json(config.object_store, f"{checkpoint}/metadata", {"id": "c0ffee"})
    objectstore.write_json(config.object_store, f"{checkpoint}/commits/0", {"nextBatchWatermarkMs": 0})
    app, where = snapshots._stream(config, ds)
    assert app == snapshots.speed_txn_app(ds, "c0ffee")
    store = config.object_store
    assert snapshots._finished(where, 0, None, store) and not snapshots._finished(where, 1, None, store)
    assert not snapshots._finished(where, 0, 0, store)  # not finished as of the epoch
    assert json.loads(objectstore.read_text(config.object_store, f"{checkpoint}/metadata")) == {"id": "c0ffee"}


def _leases_behind(tmp_path, s3_gateway, endpoint: str, name: str):
    """A config whose tables are on this machine's filesystem and whose leases are on the suite's
    store (``lake.locks``), reached at ``endpoint`` (the store, or a proxy in front of it)."""
    bucket = "locks-" + tmp_path.name[-20:].lower().replace("_", "-")
    s3_gateway.create_bucket(bucket)
    store = {**s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "s3-credentials")),
             "endpoint": endpoint}
    lake = {"root": str(tmp_path / "lake"), "locks": f"s3a://{bucket}/locks", "object_store": store}
    return make_config(tmp_path / name, NO_BROKER, lake=lake)


def _taker(config, seconds_to_wait: float, hold: float = 0.0) -> subprocess.Popen:
    return take_writer_lease(config, "job_views", seconds_to_wait, hold, env={"LOGLAKE_LEASE_TTL_SECONDS": "3"})


@pytest.fixture
def two_hosts(tmp_path, s3_gateway, monkeypatch):
    """(this process's config, whose leases it reaches through a proxy it can cut; another host's
    config, reaching the same leases directly; the proxy). Leases live 3 s, renewed every 0.5 s."""
    monkeypatch.setattr(leases.records, "TTL_SECONDS", 3.0)
    monkeypatch.setattr(leases.records, "RENEW_SECONDS", 0.5)
    with StoreProxy(s3_gateway.port) as proxy:
        here = _leases_behind(tmp_path, s3_gateway, proxy.endpoint, "here")
        there = _leases_behind(tmp_path, s3_gateway, s3_gateway.endpoint, "there")
        yield here, there, proxy


def test_a_writer_renews_through_a_store_outage_shorter_than_its_lease(two_hosts):
    here, there, proxy = two_hosts
    with leases.writer(here, "job_views", "batch", "run-1"):
        proxy.down()
        time.sleep(1.5)  # three renewals fail: the store does not answer (less than the lease's 3 s)
        proxy.up()
        assert proxy.refused
        # Another host watches the lease for twice its life: the holder renews it all along.
        taker = _taker(there, 6)
        out, _ = taker.communicate(timeout=60)
        assert out.startswith("busy") and "batch run run-1" in out, out
        leases.check_lease("the next commit")  # still ours
    assert leases.holders(there, ["job_views"]) == {}


def test_a_writer_that_lost_its_lease_commits_nothing_more_and_fails_naming_the_new_holder(two_hosts, spark):
    here, there, proxy = two_hosts
    path = str(here.home / "batch-table")
    with leases.writer(here, "job_views", "batch", "run-1"):
        delta_io.replace_rows(spark, spark.range(0, 10).withColumnRenamed("id", "_offset"), path,
                              "_offset >= 0 AND _offset < 10")
        proxy.down()  # its renewals fail for longer than the lease lives, while another host watches it
        taker = _taker(there, 30, hold=30)
        try:
            line = taker.stdout.readline()
            assert line.startswith("took"), line
            proxy.up()
            with pytest.raises(LoglakeError) as e:
                delta_io.replace_rows(spark, spark.range(10, 20).withColumnRenamed("id", "_offset"), path,
                                      "_offset >= 10 AND _offset < 20")
            assert type(e.value).__name__ == "LeaseLostError" and e.value.transient
            assert "maintenance run run-7" in str(e.value) and "batch run run-1" in str(e.value)
            rows = sorted(r["_offset"] for r in spark.read.format("delta").load(path).collect())
            assert rows == list(range(10))  # the second commit was never made
        finally:
            taker.kill()
            taker.wait()


def test_the_containers_init_makes_the_lakes_bucket_on_the_store(tmp_path, s3_gateway):
    """docker/loglake-container.py's `init` makes the lake's bucket on a store that starts empty
    (versitygw in the compose stack), with the config's own store settings."""
    import importlib.util
    import uuid

    from loglake.core import paths
    from loglake.testing.conf import NO_BROKER, make_config

    script = paths.REPO_ROOT / "docker" / "loglake-container.py"
    spec = importlib.util.spec_from_file_location("loglake_container", script)
    container = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(container)
    bucket = f"fresh-{uuid.uuid4().hex[:8]}"
    store = s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "s3-credentials"))
    config = make_config(tmp_path / "c", NO_BROKER, lake={"root": f"s3a://{bucket}/lake", "object_store": store})
    container.ensure_bucket(config)
    container.ensure_bucket(config)  # there already: left as it is
    assert objectstore.client(config.object_store, config.lake_root).head_bucket(Bucket=bucket)
