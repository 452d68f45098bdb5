"""One writer per dataset (issue 11, item 5): the lease, its holder, a crashed holder."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from loglake import leases
from loglake.core.config import load_config
from loglake.core.errors import ConfigError, JobCancelled, WriterBusyError
from loglake.testing import hold_writer_lease, take_writer_lease, write_conf


@pytest.fixture
def config(tmp_path):
    return load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")


def test_a_second_writer_is_refused_naming_the_holder_and_waits_for_it(config):
    p, token = hold_writer_lease(config, "job_views", 3)
    try:
        assert token
        held = leases.holders(config, ["job_views", "company_ceos"])
        assert list(held) == ["job_views"] and held["job_views"]["pid"] == p.pid
        with pytest.raises(WriterBusyError) as e:
            with leases.writer(config, "job_views", "batch", wait_seconds=0):
                pass
        assert e.value.transient
        assert f"maintenance run run-7 (pid {p.pid} on" in str(e.value)
        # Another dataset is free meanwhile.
        with leases.writer(config, "company_ceos", "batch", wait_seconds=0):
            pass
        # A writer that waits gets the lease once the holder lets go.
        t0 = time.monotonic()
        with leases.writer(config, "job_views", "batch", "run-8", wait_seconds=30, say=lambda m: None):
            assert time.monotonic() - t0 > 0.5
            assert leases.holders(config, ["job_views"])["job_views"]["run_id"] == "run-8"
    finally:
        p.kill()
    assert leases.holders(config, ["job_views"]) == {}



def test_a_writer_waiting_for_the_lease_stops_at_once_when_cancelled(config):
    """The shared Spark application's job whose caller went away: its wait for the lease ends
    when ``cancel`` is set, not when the holder lets go, and it never takes the lease."""
    import threading

    p, token = hold_writer_lease(config, "job_views", 30)
    try:
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        t0 = time.monotonic()
        with pytest.raises(JobCancelled) as e:
            with leases.writer(config, "job_views", "batch", "run-9", wait_seconds=60, say=lambda m: None,
                              cancel=cancel):
                pytest.fail("the cancelled writer ran its block")
        assert time.monotonic() - t0 < 5
        assert e.value.transient and "job_views" in str(e.value)
        assert leases.holders(config, ["job_views"])["job_views"]["pid"] == p.pid
    finally:
        p.kill()
        p.wait()

def test_a_crashed_holder_never_blocks(config):
    p, _token = hold_writer_lease(config, "job_views", 300)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # Its lease is still there, but its pid is gone: taken at once.
    assert json.loads(leases.DatasetLock(config, "job_views").path.read_text())["pid"] == p.pid
    with leases.writer(config, "job_views", "batch", wait_seconds=0):
        pass


def test_a_lease_of_another_host_holds_for_its_life_on_the_takers_own_clock(config):
    """Expiry reads no clock of the holder's: its ``expires`` (here far in the past, as a holder
    whose clock runs behind would write it) is never compared; a taker breaks the lease once it has
    seen the record unchanged for the lease's ``ttl`` on its own clock."""
    lock = leases.DatasetLock(config, "job_views")
    lock.dir.mkdir(parents=True)
    lock.path.write_text(json.dumps({"operation": "batch", "run_id": "far", "token": "t", "host": "elsewhere",
                                     "pid": 1, "acquired_at": "then", "ttl": 2, "expires": time.time() - 3600}))
    with pytest.raises(WriterBusyError, match="batch run far .pid 1 on elsewhere"):
        with leases.writer(config, "job_views", "maintenance", wait_seconds=0):
            pass
    t0 = time.monotonic()
    with leases.writer(config, "job_views", "maintenance", wait_seconds=10, say=lambda m: None):
        assert time.monotonic() - t0 >= 2


def test_a_holder_with_this_host_name_in_another_pid_namespace_is_not_judged_by_its_pid(config):
    """Two replicas of a compose service share a host name, each in a pid namespace of its own:
    the other's pid, absent here, says nothing about whether it runs."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    lock = leases.DatasetLock(config, "job_views")
    lock.dir.mkdir(parents=True)
    lock.path.write_text(json.dumps({"operation": "batch", "run_id": "replica-2", "token": "t",
                                     "host": socket.gethostname(), "where": "another-boot/pid:[4026532000]",
                                     "pid": gone.pid, "acquired_at": "then", "ttl": 2, "expires": time.time() + 2}))
    with pytest.raises(WriterBusyError, match="batch run replica-2"):
        with leases.writer(config, "job_views", "maintenance", wait_seconds=0):
            pass


def test_a_job_of_the_holder_writes_under_its_lease(config):
    with leases.writer(config, "job_views", "backfill", "bf-1") as token:
        assert os.environ[leases.TOKEN_ENV] == token
        # The jobs the holder starts inherit the token: they enter without waiting, and leave
        # the lease to the holder.
        p, child_token = hold_writer_lease(config, "job_views", 0, env={**os.environ})
        p.wait(timeout=30)
        assert child_token == token
        assert leases.holders(config, ["job_views"])["job_views"]["run_id"] == "bf-1"
    assert leases.TOKEN_ENV not in os.environ
    assert leases.holders(config, ["job_views"]) == {}


def test_the_holder_renews_its_lease(config, monkeypatch):
    monkeypatch.setattr(leases.records, "TTL_SECONDS", 1.0)
    monkeypatch.setattr(leases.records, "RENEW_SECONDS", 0.2)
    with leases.writer(config, "job_views", "maintenance", "long"):
        time.sleep(2.0)  # twice the lease's life: renewed meanwhile
        held = json.loads(leases.DatasetLock(config, "job_views").path.read_text())
        assert held["expires"] > time.time() and held["run_id"] == "long"
        assert leases.holders(config, ["job_views"])["job_views"]["run_id"] == "long"


def test_the_holder_renews_through_an_outage_of_its_leases_directory_shorter_than_its_life(config, monkeypatch):
    """A renewal that fails (the leases' directory unreachable: a network mount's hiccup) is tried
    again while the lease lives: another host watching it afterwards for twice its life finds it
    renewed all along, and cannot take it."""
    monkeypatch.setattr(leases.records, "TTL_SECONDS", 3.0)
    monkeypatch.setattr(leases.records, "RENEW_SECONDS", 0.5)
    directory = leases.lock_dir(config)
    with leases.writer(config, "job_views", "batch", "run-1"):
        away = directory.with_name(directory.name + ".away")
        directory.rename(away)
        directory.write_text("")  # its path is no directory: every renewal fails meanwhile
        time.sleep(1.5)
        directory.unlink()
        away.rename(directory)
        taker = take_writer_lease(config, "job_views", 6, env={"LOGLAKE_LEASE_TTL_SECONDS": "3"})
        out, _ = taker.communicate(timeout=60)
        assert out.startswith("busy") and "batch run run-1" in out, out


def test_an_object_store_lake_keeps_its_leases_on_the_store_unless_a_directory_is_named(tmp_path):
    conf = write_conf(tmp_path, "localhost:9")
    profile = conf / "loglake.yaml"
    text = profile.read_text()

    def load(lake: str):
        profile.write_text(text.replace("  test:\n", f"  test:\n    lake: {lake}\n", 1))
        return load_config(conf, home=tmp_path / "state")

    def refused(lake: str, key: str, fragment: str) -> None:
        with pytest.raises(ConfigError) as e:
            load(lake)
        assert e.value.key == f"profiles.test.lake.{key}" and fragment in str(e.value)

    config = load("{root: 's3a://bucket/lake'}")
    assert config.lock_root == "s3a://bucket/lake/_loglake_locks"
    assert config.object_store is not None and config.object_store.endpoint is None  # AWS S3, default chain

    refused("{root: 's3a://bucket/lake', locks: 'hdfs://nn/l'}", "locks", "neither a directory nor an s3a:// location")
    refused("{root: 's3://bucket/lake'}", "root", "s3a://bucket/lake")
    refused("{object_store: {endpoint: 'minio:9000'}}", "object_store.endpoint", "http://host:port")
    refused("{object_store: {credentials_file: 's3.ini'}}", "object_store.credentials_file", "absolute")


def test_two_configs_on_one_bucket_keep_their_own_store_settings(tmp_path):
    """Two profiles of one process (two Airflow tasks' configs, a test's two lakes) name the same
    bucket with other credentials and endpoints: each one's tables and leases are reached with its
    own, whichever was loaded last (the settings travel with the config, not in a table of
    buckets)."""
    from loglake.core.objectstore import delta_location

    configs = []
    for who in ("a", "b"):
        keys = tmp_path / f"{who}.ini"
        keys.write_text(f"[default]\naws_access_key_id = key-{who}\naws_secret_access_key = secret-{who}\n")
        conf = write_conf(tmp_path / who, "localhost:9")
        profile = conf / "loglake.yaml"
        profile.write_text(profile.read_text().replace("  test:\n", (
            f"  test:\n    lake: {{root: 's3a://shared/{who}', object_store: {{endpoint: 'http://store-{who}:7070', "
            f"credentials_file: '{keys}'}}}}\n"), 1))
        configs.append(load_config(conf, home=tmp_path / who / "state"))
    for config, who in zip(configs, "ab"):
        path = config.table_path(config.dataset("job_views"), "batch")
        uri, options = delta_location(path, config.object_store)
        assert uri.startswith(f"s3://shared/{who}/")
        assert (options["AWS_ACCESS_KEY_ID"], options["AWS_ENDPOINT_URL"]) == (f"key-{who}", f"http://store-{who}:7070")
