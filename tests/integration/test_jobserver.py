"""The shared Spark application (``spark_jobs/server.py``, ``loglake.jobs.shared_app``): one
long-lived driver under spark-submit that runs the batch-side jobs the CLI and the DAG
tasks send it. Real broker, real Spark, real Delta; the application is started as
``loglake up`` starts it (supervised, in the background)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from loglake.core import paths
from loglake.core.config import load_config
from loglake.core.processes import descendants, wait_for
from loglake.jobs import shared_app
from loglake.jobs.launch import start_shared_application
from loglake.jobs.requests import BatchRequest, MaintenanceRequest
from loglake.kafka.admin import log_bounds
from loglake.leases import DatasetLock, writer
from loglake.batch.planning import plan_batch
from loglake.ledger.ranges import batch_watermarks, ledger_rows
from loglake.tables import open_table, query
from loglake.local.produce import produce
from loglake.testing import command_env, config_environment, loglake_command, run_loglake, write_conf
from loglake.testing.commands import environment

pytestmark = pytest.mark.integration

# How long a job waits for another writer of its dataset (900 s on the platform), in the
# application and the commands these tests start: writers that block each other fail the
# test in this time, not in the suite's timeout. Far above what a job here takes.
WRITER_WAIT_SECONDS = 240


@pytest.fixture(scope="module")
def served(tmp_path_factory, kafka_bootstrap):
    """A config whose shared application runs (started once for the module's tests)."""
    root = tmp_path_factory.mktemp("jobserver")
    config = load_config(write_conf(root, kafka_bootstrap), home=root / "state")
    os.environ.pop("LOGLAKE_LOCK_TOKEN", None)
    with config_environment(config), environment({"LOGLAKE_WRITER_WAIT_SECONDS": str(WRITER_WAIT_SECONDS)}):
        try:
            start_shared_application(config, wait=240)
            yield config
        finally:
            shared_app.stop(config)


def rows(config, ds, layer: str) -> list[tuple]:
    table = open_table(config.table_path(ds, layer))
    return [tuple(r.values()) for r in query(table, "SELECT * FROM t ORDER BY _partition, _offset")]


def test_cli_batch_runs_in_the_shared_application_and_writes_what_its_code_writes_alone(served, spark):
    config = served
    ds = config.dataset("job_views")
    produce(config, ds, 400, bad_fraction=0.1, seed=21, progress=False)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items() if hi}
    r = run_loglake(config, "batch", "job_views")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "batch job_views: 360 rows to batch.job_views, 40 to quarantine.job_views" in r.stdout
    assert "(in the shared Spark application)" in r.stdout  # no JVM of its own
    assert "quality job_views: 2 expectation(s) on 360 rows passed; published" in r.stdout
    assert batch_watermarks(config, ds) == ends
    # The application imported Great Expectations as it started, before any quality job came.
    log = shared_app.process(config).log_file.read_text()
    assert re.search(r"Great Expectations imported ahead of the quality gate in [\d.]+s", log), log[-2000:]
    assert "spark-jobs" not in r.stderr and "Traceback" not in r.stdout + r.stderr
    again = run_loglake(config, "batch", "job_views")  # published to the log end: no job is sent
    assert again.returncode == 0 and "job_views: nothing to recompute" in again.stdout, again.stdout + again.stderr
    shared = {layer: rows(config, ds, layer) for layer in ("batch", "quarantine")}
    # Delta keeps statistics of the filtered-on columns each table has (provenance, key,
    # Z-order; the quarantine's layer), named in the table's own property.
    from deltalake import DeltaTable

    names = {"batch": "_topic,_partition,_offset,user_id", "quarantine": "_topic,_partition,_offset,_layer"}
    for layer, expected in names.items():
        assert DeltaTable(config.table_path(ds, layer)).metadata().configuration[
            "delta.dataSkippingStatsColumns"] == expected, layer
    actions = DeltaTable(config.table_path(ds, "batch")).get_add_actions(flatten=True)
    assert actions.num_rows > 0
    stats = {c.split(".", 1)[1] for c in actions.schema.names if c.startswith("min.")}
    assert stats == {"_topic", "_partition", "_offset", "user_id"}, stats

    # The same range again by the job's own code in this process's Spark session (what a
    # spark-submitted job runs): the same rows.
    from loglake.batch.planning import plan_backfill
    from loglake.batch.recompute import run_batch

    plan = plan_backfill(config, ds, ranges=[f"{p}:0-{e}" for p, e in sorted(ends.items())])
    run_batch(spark, config, ds, plan, "in-process")
    assert {layer: rows(config, ds, layer) for layer in ("batch", "quarantine")} == shared


def _raw_request(config, body: dict) -> socket.socket:
    address = json.loads(shared_app.address_file(config).read_text())
    conn = socket.create_connection((address["host"], address["port"]), timeout=30)
    conn.sendall((json.dumps({"token": address["token"], **body}) + "\n").encode())
    return conn


def test_requests_of_another_state_or_code_or_without_the_token_are_refused(served, tmp_path):
    config = served
    assert (shared_app.address_file(config).stat().st_mode & 0o777) == 0o600
    base = {"request": {"job": "batch", "dataset": "job_views"}, **shared_app.identity(config)}
    for change, expected in ((dict(home=str(tmp_path)), "another state directory"),
                             (dict(code="0" * 16), "another code"),
                             (dict(request={"job": "speed", "dataset": "job_views"}),
                              "not run by the shared application"),
                             (dict(token="wrong"), "wrong or missing token")):
        with _raw_request(config, {**base, **change}) as conn:
            answer = json.loads(conn.makefile().readline())
        assert expected in answer.get("refused", ""), answer

    # The CLI's job for another state directory runs under spark-submit instead (submit says None).
    other = load_config(write_conf(tmp_path, config.kafka.bootstrap_servers), home=config.home)
    other_conf = MaintenanceRequest("job_views", run_id="x")
    assert shared_app.submit(other, other_conf, output=lambda _t: None) is None


def test_a_job_whose_caller_went_away_is_cancelled_and_writes_nothing(served):
    """The caller (an Airflow task killed, a CLI interrupted) closes its connection while its
    job waits for the dataset's lease: the job never writes, the lease is not taken by it."""
    config = served
    ds = config.dataset("company_ceos")
    produce(config, ds, 50, seed=22, progress=False)
    plan = plan_batch(config, ds)
    request = BatchRequest(ds.name, plan, run_id="cancelled-run")
    with writer(config, ds.name, "test holds the lease", export=False):
        conn = _raw_request(config, {"request": request.to_dict(), **shared_app.identity(config)})
        wait_for(lambda: (shared_app.ping(config) or {}).get("running"), 30, "the job to be accepted")
        time.sleep(1)  # it waits for the lease we hold
        conn.close()
        # The job stops at once, while the lease is still held: its wait for the lease is
        # cancelled (it does not hold a thread until the lease frees).
        wait_for(lambda: not (shared_app.ping(config) or {}).get("running"), 10,
                 "the cancelled job to end while the lease is held")
    shared_app.wait_idle(config, timeout=60)
    assert DatasetLock(config, ds.name).holder() is None
    assert not [r for r in ledger_rows(config, ds) if r["run_id"] == "cancelled-run"]


@pytest.fixture
def airflow_worker(served, monkeypatch, tmp_path):
    """This process as a LocalExecutor worker of ``loglake up`` sees it: the config in the
    environment, plugins/ on sys.path."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    monkeypatch.setenv("LOGLAKE_PROFILE", served.profile_name)
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
    return served


def test_a_cli_batch_and_a_scheduled_run_of_one_dataset_at_once_both_finish(airflow_worker):
    """``loglake batch job_views`` typed while the scheduled ``loglake_batch`` run of the same
    dataset is under way (issue 44, 5). The CLI holds the dataset's lease across its batch and
    quality jobs; the scheduled run's quality task comes while it does, and waits for the
    lease. Every job takes its dataset's lease before any slot or gate of the shared
    application, so the waiting task holds nothing the CLI's jobs need: both finish, neither
    ends in ``WriterBusyError`` after ``LOGLAKE_WRITER_WAIT_SECONDS``.

    The scheduled run's side is its tasks' own code (the DAG's planning function and
    ``LoglakeSparkSubmitOperator.execute``, as a LocalExecutor worker runs them) without the
    scheduler, which does not let a test choose when a task starts against a typed command."""
    import structlog.testing  # Airflow's task loggers are structlog's
    from loglake_airflow.operators import LoglakeSparkSubmitOperator
    from loglake_airflow.plans import batch_requests

    config = airflow_worker
    ds = config.dataset("job_views")
    produce(config, ds, 1000, bad_fraction=0.05, seed=24, progress=False)
    shared_app.wait_idle(config, timeout=60)
    # The scheduled run: its planning task, then its recompute task (the lease taken and let go
    # by the job in the application).
    [asked] = [r for r in batch_requests("loglake_batch/scheduled__lock-order")["requests"] if r["dataset"] == ds.name]
    LoglakeSparkSubmitOperator(task_id="recompute", job="batch", job_request=asked).execute({})

    # `loglake batch job_views` typed now; the run's quality task comes once the command holds the lease.
    t0 = time.monotonic()
    cli = subprocess.Popen(loglake_command("batch", ds.name), env=command_env(config), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: str((DatasetLock(config, ds.name).holder() or {}).get("run_id")).startswith("cli-"), 60,
                 "loglake batch to take the dataset's lease")
        quality = LoglakeSparkSubmitOperator(task_id="quality", job="quality", job_request=asked)
        said: dict = {}

        def scheduled_quality():
            try:
                said["summary"] = quality.execute({})
            except Exception as e:  # the task's failure, as Airflow would record it
                said["error"] = f"{type(e).__name__}: {e}"
            said["seconds"] = time.monotonic() - t0

        with structlog.testing.capture_logs() as task_log:  # what the task's log would show
            task = threading.Thread(target=scheduled_quality)
            task.start()
            out, err = cli.communicate(timeout=WRITER_WAIT_SECONDS + 120)
            cli_seconds = time.monotonic() - t0
            task.join(WRITER_WAIT_SECONDS + 120)
        lines = [entry["event"] for entry in task_log]
    finally:
        if cli.poll() is None:
            cli.kill()
    print(f"loglake batch: {cli_seconds:.1f}s; the scheduled quality task: {said.get('seconds', -1):.1f}s")
    assert cli.returncode == 0, out + err
    assert "quality job_views: 2 expectation(s) on" in out and "passed; published" in out, out
    # The task came while the command held the lease, and waited for it.
    assert any("job_views is being written by batch run cli-" in line for line in lines), lines
    assert "error" not in said, f"the scheduled run's quality task failed: {said['error']}"
    assert said["summary"]["published"] is True and said["summary"]["shared_application"] is True, said
    # Both ended when their work did, not when a wait for the lease gave up.
    assert max(cli_seconds, said["seconds"]) < WRITER_WAIT_SECONDS
    assert batch_watermarks(config, ds) == {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items() if hi}


def test_a_lease_holders_job_runs_while_jobs_of_its_dataset_wait_for_the_lease(served):
    """A job waiting for its dataset's lease holds no slot of the shared application: with as
    many jobs of the dataset waiting as it runs at a time (``LOGLAKE_SPARK_JOBS_CONCURRENCY``,
    2), the lease holder's own job (``loglake batch`` between its batch and quality jobs, as
    ``loglake.jobs.launch.run_job`` sends it) still runs at once."""
    config = served
    ds = config.dataset("company_ceos")
    produce(config, ds, 40, seed=26, progress=False)
    plan = plan_batch(config, ds)
    shared_app.wait_idle(config, timeout=60)
    answer: dict = {}
    with writer(config, ds.name, "batch", "cli-holds", export=False) as token:
        # Two jobs of the dataset without its lease (a scheduled run's task, the maintenance DAG's).
        waiting = [_raw_request(config, {"request": BatchRequest(ds.name, plan, run_id=f"waits-{i}").to_dict(),
                                         **shared_app.identity(config)}) for i in range(2)]
        wait_for(lambda: len((shared_app.ping(config) or {}).get("running") or {}) == 2, 30,
                 "the two jobs to be accepted")
        time.sleep(1)  # they wait for the lease we hold
        holder = threading.Thread(target=lambda: answer.update(sent=shared_app.submit(
            config, BatchRequest(ds.name, plan, run_id="cli-holds"), output=lambda _t: None, lease=token)))
        holder.start()
        holder.join(WRITER_WAIT_SECONDS / 2)
        ran = not holder.is_alive()
        still_waiting = len((shared_app.ping(config) or {}).get("running") or {})
        for conn in waiting:  # their callers go away: they stop waiting, never write
            conn.close()
        holder.join(120)
        # Before the lease is given back: the application has seen both callers go. (Released
        # at once, a waiting job whose caller's close it had not yet read could take it and run.)
        wait_for(lambda: not (shared_app.ping(config) or {}).get("running"), 60,
                 "the waiting jobs to stop once their callers went away")
    assert ran, "the lease holder's job did not run while two jobs of its dataset waited for the lease"
    assert still_waiting == 2  # they still waited for the lease: the holder's job did not wait for them to give up
    code, summary = answer["sent"]
    assert code == 0 and summary["shared_application"] is True, summary
    shared_app.wait_idle(config, timeout=60)
    assert DatasetLock(config, ds.name).holder() is None
    assert {r["run_id"] for r in ledger_rows(config, ds)} & {"waits-0", "waits-1"} == set()


# make test-long only: a fault scenario (the application killed mid-job); jobs in the shared application are
# in make test (the other tests here).
@pytest.mark.long
def test_the_application_killed_mid_job_is_a_transient_failure_and_comes_back(served):
    config = served
    ds = config.dataset("company_ceos")
    # Records of its own: alone (make test-long) no other test of this module made the topic.
    produce(config, ds, 30, seed=25, progress=False)
    plan = plan_batch(config, ds)
    answers = []
    with writer(config, ds.name, "test holds the lease", export=False):
        t = threading.Thread(target=lambda: answers.append(
            shared_app.submit(config, BatchRequest(ds.name, plan, run_id="killed-run"), output=lambda _t: None)))
        t.start()
        time.sleep(2)
        supervisor = shared_app.process(config).pid()
        old = json.loads(shared_app.address_file(config).read_text())["pid"]
        os.kill(old, signal.SIGKILL)  # the driver dies (the supervisor above it lives)
        t.join(60)
    assert answers and answers[0][0] != 0
    assert answers[0][1]["error_type"] == "SharedApplicationLost" and answers[0][1]["transient"] is True
    # The supervisor starts it again; it answers at a new address with the same state.
    wait_for(lambda: (shared_app.ping(config) or {}).get("pid") not in (None, old), 240,
             "the shared application to come back")
    assert shared_app.process(config).pid() == supervisor and len(descendants(supervisor)) > 1
    r = run_loglake(config, "batch", "company_ceos")
    assert r.returncode == 0 and "(in the shared Spark application)" in r.stdout, r.stdout + r.stderr


# make test-long only; make test covers its parts: a job's bounded wait for a starting application in
# tests/unit/test_jobserver_start_wait.py; a scheduled run's jobs served by the application `loglake up`
# started, in test_demo; CLI jobs in it, above.
@pytest.mark.long
def test_jobs_sent_while_the_application_starts_wait_for_it_and_run_in_it(served):
    """``loglake up`` starts the application last and a scheduled run's first tasks come right
    after: a job sent while it is still starting waits for it (bounded) instead of paying a
    JVM of its own under spark-submit. Two sent at once are both served by it."""
    config = served
    names = ("company_ceos", "job_views")
    for name in names:
        produce(config, config.dataset(name), 30, seed=23, progress=False)
    requests = [BatchRequest(name, plan_batch(config, config.dataset(name)), run_id=f"starting-{name}")
                for name in names]
    shared_app.stop(config)
    start_shared_application(config)  # as `loglake up` does: not waiting for it to answer
    assert shared_app.ping(config) is None  # starting: not answering yet
    answers, lines = {}, []

    def send(request):
        answers[request.dataset] = shared_app.submit(config, request, output=lines.append)

    threads = [threading.Thread(target=send, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for name in names:
        assert answers.get(name) is not None, f"{name}: submit gave up on the starting application: {lines}"
        code, summary = answers[name]
        assert code == 0 and summary["shared_application"] is True and summary["start_seconds"] == 0, summary
        assert summary["start_wait_seconds"] > 0, summary  # it came while the application started
    assert any("is starting; waiting" in line for line in lines), lines
