"""The ``loglake`` command line, as an operator runs it: real broker, real Spark, real Delta."""

from __future__ import annotations

import shutil
import time

import pytest
import yaml

from loglake.core.processes import free_port
from loglake.kafka.admin import group_offsets, log_bounds
from loglake.core.processes import Managed, wait_for
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

# What must never reach the console (each seen there before, in `loglake demo`): the JVM's
# warnings, Spark's log lines and stage progress, librdkafka's notices (lines starting "%").
NOISE = ["Using incubator modules", "WARN ", "Stage ", "Truncated the string representation",
         "Coordinator load in progress", "Traceback"]


def noise(text: str) -> list[str]:
    """The lines of ``text`` that are not loglake's own words."""
    return [line for line in text.splitlines()
            if line.startswith("%") or any(word in line for word in NOISE)]


def test_bad_arguments_are_rejected_with_the_name(make_config):
    config = make_config()
    r = run_loglake(config, "produce", "nope", "--count", "1")
    assert r.returncode == 2 and "unknown dataset 'nope'; known datasets: company_ceos, job_views" in r.stderr
    r = run_loglake(config, "produce", "job_views", "--count", "10", "--bad-fraction", "2")
    assert r.returncode == 2 and "--bad-fraction must be within [0, 1], found 2.0" in r.stderr
    r = run_loglake(config, "speed", "run", "job_views")
    assert r.returncode == 2 and "--available-now" in r.stderr


def test_produce_then_supervised_stream_start_status_stop(make_config):
    config = make_config()
    ds = config.dataset("job_views")
    r = run_loglake(config, "produce", "job_views", "--count", "600", "--bad-fraction", "0.1", "--seed", "7", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "produced 600 records to" in r.stdout and "540 good, 60 malformed" in r.stdout

    r = run_loglake(config, "speed", "start", "job_views", "--wait", "180")
    assert r.returncode == 0, r.stderr + r.stdout
    proc = Managed(config.home, "speed")  # the speed application, which runs every dataset's stream
    try:
        ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
        wait_for(lambda: group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends, 120,
                 "the stream's committed position to reach the log end", log=proc)
        status = run_loglake(config, "speed", "status", "job_views")
        assert status.returncode == 0, status.stderr
        assert f"running (pid {proc.pid()})" in status.stdout
        assert status.stdout.count("lag 0") == ds.partitions

        # Start is idempotent: a second start reports the running stream.
        again = run_loglake(config, "speed", "start", "job_views")
        assert "already running" in again.stdout

        # New records are picked up by the running stream.
        run_loglake(config, "produce", "job_views", "--count", "100", "--seed", "8", "--quiet")
        ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
        wait_for(lambda: group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends, 120,
                 "the stream to pick up new records", log=proc)
    finally:
        pid = proc.pid()
        stop = run_loglake(config, "speed", "stop", "job_views")
    assert "speed job_views: stopped" in stop.stdout
    assert proc.pid() is None
    # Nothing of the stream's process group is left behind (supervisor, spark-submit, JVM, python).
    from loglake.core.processes import group_alive
    assert pid is not None and not group_alive(pid)

    from loglake.tables import open_table, query
    speed = query(open_table(config.table_path(ds, "speed")), "SELECT _partition, _offset FROM t")
    quarantine = query(open_table(config.table_path(ds, "quarantine")), "SELECT _partition, _offset FROM t")
    assert len(speed) == 640 and len(quarantine) == 60
    assert len({(r["_partition"], r["_offset"]) for r in speed + quarantine}) == 700


# make test-long only; make test covers its parts: `loglake kafka start`, again (already running) and
# `kafka status` naming its address, on the secured profile, in test_secure_kafka; the broker stopped by
# `loglake down` with no process left, in test_demo.
@pytest.mark.long
def test_kafka_start_status_stop_on_embedded_profile(make_config, tmp_path):
    port = free_port()
    config = make_config()
    conf = config.conf_dir / "loglake.yaml"
    data = yaml.safe_load(conf.read_text())
    data["profiles"]["test"]["kafka"] = {"bootstrap_servers": f"localhost:{port}", "embedded": True}
    conf.write_text(yaml.safe_dump(data))
    try:
        r = run_loglake(config, "kafka", "start")
        assert r.returncode == 0, r.stderr
        assert "started in" in r.stdout and f"localhost:{port}" in r.stdout
        again = run_loglake(config, "kafka", "start")
        assert "already running" in again.stdout
        run_loglake(config, "produce", "job_views", "--count", "60", "--quiet")
        status = run_loglake(config, "kafka", "status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"kafka: answers at localhost:{port};")
        ds = config.dataset("job_views")
        assert f"{ds.topic}: {ds.partitions} partition(s), 60 retained offset(s)" in status.stdout
    finally:
        stop = run_loglake(config, "kafka", "stop")
    assert "kafka: stopped" in stop.stdout
    down = run_loglake(config, "kafka", "status", timeout=60)
    assert down.returncode == 2 and "did not answer" in down.stderr


# make test-long: `loglake batch` write → quality → publish with its own words in test_jobserver
# (through the shared application, then nothing to recompute); through spark-submit in the
# backfill test below; the rebuild job in test_rebuild; a query by the Arrow engine in test_query.
@pytest.mark.long
def test_batch_writes_validates_and_publishes_then_has_nothing_to_do(make_config):
    from loglake.ledger.ranges import batch_watermarks
    from loglake.local.produce import produce

    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 300, bad_fraction=0.1, seed=8)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    r = run_loglake(config, "batch", "job_views", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "batch plan for job_views: 6 range(s), 300 offset(s)" in r.stdout
    assert "batch job_views: 270 rows to batch.job_views, 30 to quarantine.job_views" in r.stdout
    assert "quality job_views: 2 expectation(s) on 270 rows passed; published" in r.stdout
    assert batch_watermarks(config, ds) == {p: e for p, e in ends.items() if e}
    again = run_loglake(config, "batch", "job_views")
    assert again.returncode == 0 and "job_views: nothing to recompute" in again.stdout
    query = run_loglake(config, "query", "SELECT count(*) AS n FROM job_views", "--format", "csv")
    assert (query.returncode, query.stdout, query.stderr) == (0, "n\n270\n", "")

    # The batch table deleted by mistake: rebuilt from the log (a spark-submit job), published again.
    shutil.rmtree(config.table_path(ds, "batch"))
    rebuilt = run_loglake(config, "rebuild", "job_views", "--layer", "batch", timeout=600)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "rebuild job_views batch: 270 rows from 300 offset(s) of the log" in rebuilt.stdout
    from loglake.tables import open_table, query as delta_query
    assert delta_query(open_table(config.table_path(ds, "batch")), "SELECT count(*) AS n FROM t")[0]["n"] == 270

    # The console held loglake's words only; the logs keep the rest.
    for out in (r, again, query, rebuilt):
        assert not noise(out.stdout + out.stderr), out.stdout + out.stderr
    jobs = sorted((config.home / "logs" / "jobs").glob("*.log"))
    assert {p.name.split("-")[0] for p in jobs} == {"batch", "quality", "rebuild"}, jobs
    assert all("incubator" in p.read_text() for p in jobs), jobs  # each spark-submit's JVM
    cli_log = (config.home / "logs" / "cli.log").read_text()
    assert "ran by the arrow engine" in cli_log  # the query: a SELECT answered without a JVM
    assert "starting Spark (loglake-query)" not in cli_log


def test_backfill_of_ranges_writes_and_publishes_exactly_them(make_config):
    """``loglake backfill DATASET --range P:A-B ...`` end to end; the ``--from/--to`` form plans
    the offsets of a time window (dry run: the same write and publish follow)."""
    from datetime import datetime, timezone

    from loglake.ledger.ranges import batch_watermarks, ledger_rows
    from loglake.local.produce import produce
    from loglake.tables import open_table, query

    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 300, bad_fraction=0.1, seed=12, progress=False)
    first = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}
    # Record timestamps are milliseconds: a few of them apart, the window's edge separates
    # the two produces exactly.
    time.sleep(0.01)
    between = datetime.now(timezone.utc)
    time.sleep(0.01)
    produce(config, ds, 120, seed=13, progress=False)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}

    a, b = sorted(first, key=first.get)[-2:]
    ranges = [(a, 0, first[a]), (b, 3, ends[b] - 2)]
    requested = sorted((p, o) for p, start, end in ranges for o in range(start, end))
    r = run_loglake(config, "backfill", "job_views", *(f"--range={p}:{s}-{e}" for p, s, e in ranges), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr

    batch = query(open_table(config.table_path(ds, "batch")), "SELECT _partition, _offset FROM t")
    quarantine = query(open_table(config.table_path(ds, "quarantine")),
                       "SELECT _partition, _offset FROM t WHERE _layer = 'batch'")
    # Every requested offset exactly once, in the batch table or its quarantine; nothing else.
    assert sorted((x["_partition"], x["_offset"]) for x in batch + quarantine) == requested
    assert batch and quarantine
    ledger = ledger_rows(config, ds)
    for state in ("written", "published"):
        assert sorted((x["partition"], x["start"], x["end"]) for x in ledger if x["state"] == state) == ranges
    (run_id,) = {x["run_id"] for x in ledger}
    # Only a range from the partition's first offset makes a contiguous published prefix.
    assert batch_watermarks(config, ds) == {a: first[a]}

    out = r.stdout
    assert f"backfill plan for job_views: 2 range(s), {len(requested)} offset(s)" in out, out
    assert (f"backfill job_views: {len(batch)} rows to batch.job_views, {len(quarantine)} to quarantine.job_views, "
            f"2 range(s)") in out, out
    assert f"run {run_id}" in out and run_id.endswith("-backfill")
    assert f"quality job_views: 2 expectation(s) on {len(batch)} rows passed; published" in out, out
    assert f"  [{a}] end {ends[a]}  speed position - (lag -)  batch watermark {first[a]} " in out, out
    assert not noise(r.stdout + r.stderr), r.stdout + r.stderr

    # The time form: the window from between the two produces to now holds the second one's offsets.
    window = run_loglake(config, "backfill", "job_views", "--from", between.isoformat(),
                     "--to", datetime.now(timezone.utc).isoformat(), "--dry-run")
    assert window.returncode == 0, window.stdout + window.stderr
    second = {p: (first[p], ends[p]) for p in ends if ends[p] > first[p]}
    assert f"backfill plan for job_views: {len(second)} range(s), 120 offset(s)" in window.stdout, window.stdout
    for p, (start, end) in second.items():
        assert f"  {ds.topic}[{p}]  [{start}, {end})  {end - start} offset(s)" in window.stdout, window.stdout
    assert "dry run: nothing recomputed" in window.stdout
    assert ledger_rows(config, ds) == ledger
