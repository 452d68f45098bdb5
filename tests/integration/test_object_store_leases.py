"""The dataset leases and the speed stream's lease on an object-store lake (issue 25): records
on the store changed by compare-and-swap (versitygw, a real S3 server), no shared filesystem."""

from __future__ import annotations

import json
import threading
import time

import pytest

from loglake.core import objectstore
from loglake.core.errors import StreamRunningError, WriterBusyError
from loglake.ledger import leases, snapshots
from loglake.testing import hold_writer_lease


def test_the_writer_lease_lives_on_the_store_and_a_second_writer_waits_for_it(store_config):
    config = store_config
    assert config.lock_root.startswith("s3a://")
    p, token = hold_writer_lease(config, "job_views", 4)
    try:
        held, _etag = objectstore.get_json(f"{config.lock_root}/job_views.json")
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


def test_a_lease_of_another_host_holds_until_it_expires_then_is_broken(store_config):
    now = time.time()
    uri = f"{store_config.lock_root}/job_views.json"
    assert objectstore.put_json(uri, {"operation": "batch", "run_id": "far", "token": "t", "host": "elsewhere",
                                      "pid": 1, "acquired_at": "then", "expires": now + 2}, None)
    with pytest.raises(WriterBusyError, match="batch run far .pid 1 on elsewhere"):
        with leases.writer(store_config, "job_views", "maintenance", wait_seconds=0):
            pass
    with leases.writer(store_config, "job_views", "maintenance", wait_seconds=10, say=lambda m: None):
        assert time.time() >= now + 2


def test_one_stream_per_dataset_and_a_stream_whose_lease_was_taken_stops(store_config, monkeypatch):
    monkeypatch.setattr(leases, "RENEW_SECONDS", 0.2)
    with leases.stream_lease(store_config, "job_views") as lease:
        assert lease.sure()
        with pytest.raises(StreamRunningError, match="speed stream"):
            with leases.stream_lease(store_config, "job_views"):
                pass
        # Another stream takes the record (as it would once this one's lease expired): the
        # next renewal finds it gone, and the stream stops before its next micro-batch.
        uri = f"{store_config.lock_root}/job_views.stream.json"
        held, etag = objectstore.get_json(uri)
        assert objectstore.put_json(uri, {**held, "token": "other", "host": "elsewhere", "pid": 2}, etag)
        deadline = time.monotonic() + 10
        while lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(StreamRunningError, match="elsewhere"):
            lease.sure()


def test_a_stream_that_could_not_renew_lately_is_not_sure(store_config, monkeypatch):
    monkeypatch.setattr(leases, "RENEW_SECONDS", 60.0)  # no renewal within the test
    monkeypatch.setattr(leases, "TTL_SECONDS", 31.0)
    with leases.stream_lease(store_config, "job_views") as lease:
        assert lease.sure()
        lease.renewed -= 2  # its last renewal 2 s ago: less than TTL - margin (1 s) left
        assert not lease.sure()  # its micro-batches are checked by Delta until it renews


def test_a_pause_request_and_the_checkpoint_are_read_from_the_store(store_config):
    config = store_config
    ds = config.dataset("job_views")
    assert leases.appends_pause(config, ds.name) is None
    with leases.appends_paused(config, ds.name, "maintenance m-1: expire"):
        assert leases.appends_pause(config, ds.name)["what"] == "maintenance m-1: expire"
    assert leases.appends_pause(config, ds.name) is None

    checkpoint = config.checkpoint_path(ds)
    assert checkpoint.startswith("s3a://") and snapshots._stream(config, ds) is None
    objectstore.write_json(f"{checkpoint}/metadata", {"id": "c0ffee"})
    objectstore.write_json(f"{checkpoint}/commits/0", {"nextBatchWatermarkMs": 0})
    app, where = snapshots._stream(config, ds)
    assert app == snapshots.speed_txn_app(ds, "c0ffee")
    assert snapshots._finished(where, 0, None) and not snapshots._finished(where, 1, None)
    assert not snapshots._finished(where, 0, 0)  # not finished as of the epoch
    assert json.loads(objectstore.read_text(f"{checkpoint}/metadata")) == {"id": "c0ffee"}
