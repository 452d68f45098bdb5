"""The job protocol (loglake.jobs.protocol) and the error vocabulary's retry meaning: pure, no services."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException

from loglake.core import errors
from loglake.core.errors import (ConfigError, CoordinatorNotReadyError, DataLossError, JobError, JobFailure,
                                 KafkaUnavailableError, ParamError, QualityGateError, is_transient, known_transient)
from loglake.jobs import registry
from loglake.jobs.launch import JobOutcome
from loglake.jobs.protocol import SUMMARY_PREFIX, read_failure, read_summary, report
from loglake.jobs.requests import (REQUESTS, BatchRequest, JobRequest, MaintenanceRequest, QualityRequest, RebuildRequest,
                                   ReplayRequest, SpeedRequest, summary_file_of)
from loglake.jobs.summaries import (BatchSummary, FailedExpectation, MaintenanceSummary, QualitySummary,
                                    RebuildSummary, ReplaySummary, SpeedSummary)
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan
from loglake.core.retrying import attempts_made

PLAN = Plan("job_views", (OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 7)), "backfill", ("a note",))


@pytest.mark.parametrize("request_", [
    BatchRequest("job_views", PLAN, run_id="run-1"),
    QualityRequest("job_views", PLAN, run_id="dag/run:2", summary_file="/tmp/s",
                   lineage_parent="ns/loglake_batch.dataset.quality/01935a3c-0000-7000-8000-000000000001"),
    SpeedRequest("job_views", available_now=True, progress_file="/x/p.json"),
    MaintenanceRequest("company_ceos", run_id="m"),
    RebuildRequest("company_ceos", "latest", run_id="r"),
    ReplayRequest("job_views", "out_of_domain", True, run_id="r"),
    ReplayRequest("job_views", run_id="r"),
], ids=["batch", "quality", "speed", "maintenance", "rebuild", "replay-dry", "replay"])
def test_a_request_round_trips_through_json_and_the_command_line(request_):
    """One form on the wire: JSON's own types (XCom, the shared application), and spark-submit's
    ``--request JSON``; each job's registry entry names its request's type."""
    assert JobRequest.from_dict(json.loads(json.dumps(request_.to_dict()))) == request_
    argv = request_.argv()
    assert argv[0] == "--request" and len(argv) == 2
    assert JobRequest.from_argv(request_.job, argv) == request_
    assert registry.job(request_.job).request is type(request_)
    assert summary_file_of(argv) == request_.summary_file


def test_every_job_has_a_request_type():
    assert sorted(registry.JOBS) == sorted(REQUESTS)
    assert all(cls.job == name for name, cls in REQUESTS.items())


AS_JSON = json.loads(json.dumps(BatchRequest("job_views", PLAN, run_id="run-1").to_dict()))


@pytest.mark.parametrize("make, field", [
    (lambda: JobRequest.from_dict({**AS_JSON, "job": "nope"}), "request.job"),
    (lambda: JobRequest.from_dict(AS_JSON, "quality"), "request.job"),
    (lambda: JobRequest.from_dict(["batch"]), "request"),
    (lambda: BatchRequest("job_views", None), "plan"),
    (lambda: JobRequest.from_dict({k: v for k, v in AS_JSON.items() if k != "plan"}), "request"),
    (lambda: BatchRequest("company_ceos", PLAN), "plan"),
    (lambda: BatchRequest("", PLAN), "dataset"),
    (lambda: QualityRequest("job_views", PLAN), "run_id"),
    (lambda: RebuildRequest("job_views", "everything", run_id="r"), "layer"),
    (lambda: RebuildRequest("job_views", "batch"), "run_id"),
    (lambda: ReplayRequest("job_views"), "run_id"),
    (lambda: JobRequest.from_dict({**AS_JSON, "layer": "batch"}), "request.layer"),
    (lambda: JobRequest.from_dict({**AS_JSON, "run_id": 7}), "request.run_id"),
    (lambda: JobRequest.from_dict({"job": "replay", "dataset": "d", "run_id": "r", "dry_run": "yes"}),
     "request.dry_run"),
    (lambda: JobRequest.from_dict({"job": "maintenance", "dataset": 5}), "request.dataset"),
    (lambda: JobRequest.from_dict({"job": "speed", "dataset": "d", "available_now": 1}), "request.available_now"),
    (lambda: JobRequest.from_dict({**AS_JSON, "plan": "{not json"}), "request.plan"),
    (lambda: JobRequest.from_argv("batch", ["--dataset", "job_views"]), "arguments"),
    (lambda: JobRequest.from_argv("batch", ["--request", "{not json"]), "request"),
], ids=["unknown-job", "another-job", "not-an-object", "no-plan", "plan-missing", "plan-of-another-dataset",
        "no-dataset", "quality-without-run", "rebuild-bad-layer", "rebuild-without-run", "replay-without-run",
        "unknown-option", "run-id-not-a-string", "dry-run-not-a-bool",
        "dataset-not-a-string", "available-now-not-a-bool", "bad-plan", "old-arguments", "not-json"])
def test_bad_requests_name_the_field(make, field):
    with pytest.raises(ParamError) as e:
        make()
    assert e.value.field == field


def test_the_summary_is_one_guarded_line(tmp_path, capsys):
    summary = SpeedSummary(dataset="job_views", records=3, seconds=1.5)
    report(summary, None)
    out = capsys.readouterr().out
    assert out.startswith(SUMMARY_PREFIX) and read_summary(out) == summary.to_dict()
    noise = "\n".join(["{not json", '{"records": 9}', f"{SUMMARY_PREFIX}[1, 2]", f"{SUMMARY_PREFIX}{{broken",
                       out.strip(), "WARNING: Using incubator modules: jdk.incubator.vector"])
    assert read_summary(noise) == summary.to_dict()  # only a prefixed JSON object counts
    assert read_summary('{"records": 9}') is None and read_summary(None) is None
    report(JobFailure.of(DataLossError("t", 0, 0, 5)), str(tmp_path / "s"))
    assert read_failure(tmp_path / "s") == JobFailure.of(DataLossError("t", 0, 0, 5))
    report(summary, str(tmp_path / "ok"))
    assert read_failure(tmp_path / "ok") is None and read_failure(tmp_path / "none") is None
    assert summary_file_of(["--request", '{"job": "batch", "summary_file": "/a/b", "plan": 3}']) == "/a/b"
    assert summary_file_of(["--request"]) is None and summary_file_of(["--request", "{not json"]) is None


QUALITY = QualitySummary(dataset="job_views", run_id="r", ranges=2, expectations=3, published=False, rows=10,
                         failed=(FailedExpectation("expect_column_values_to_not_be_null", "url", 2, 10, [4, 7]),),
                         phases={"validate": 1.25})
SUMMARIES = [
    BatchSummary(dataset="job_views", run_id="r", ranges=2, records=8, quarantined=2, schema_version=3,
                 records_per_second=900, seconds=0.011, start_seconds=4.5, shared_application=False, quality=QUALITY),
    QUALITY,
    SpeedSummary(dataset="job_views", batches=2, records=40, processing_seconds=1.5, records_per_second=27),
    MaintenanceSummary(dataset="company_ceos", run_id="m", tables=4, watermarks={0: 12, 3: 40}, rows_expired=5,
                       vacuum_retention_hours=168.0, operations=[{"table": "speed.company_ceos", "attempts": 1}]),
    RebuildSummary(dataset="company_ceos", run_id="r", layer="latest", from_batch_version=7, offsets=9, records=3),
    ReplaySummary(dataset="job_views", run_id="r", reason_code="out_of_domain",
                  speed={"valid": {"out_of_domain": 2}, "invalid": {}}, batch={"valid": {}, "invalid": {}},
                  batch_ranges=["job_views[0] [0, 10)"], batch_published=False, quality=QUALITY),
]


@pytest.mark.parametrize("summary", SUMMARIES, ids=lambda s: s.job)
def test_every_jobs_summary_comes_back_as_its_own_type(summary, tmp_path):
    """What a job reports (JSON through a summary file) is read back as the value it was."""
    assert {j.summary.job for j in registry.JOBS.values()} == set(registry.JOBS)  # each job its own type
    report(summary, str(tmp_path / "s"))
    outcome = JobOutcome.of(summary.job, 0, read_summary((tmp_path / "s").read_text()), tmp_path / "log")
    assert outcome.ok and outcome.failure is None and outcome.summary == summary


def test_a_failure_or_silence_is_not_a_summary_and_says_why(tmp_path):
    gone = JobOutcome.of("batch", 2, JobFailure.of(DataLossError("t", 0, 0, 5)).to_dict(), tmp_path / "log")
    assert not gone.ok and gone.summary is None and gone.failure.error_type == "DataLossError"
    error = gone.error("job_views")
    assert not error.transient and "DataLossError" in str(error) and str(tmp_path / "log") in str(error)
    died = JobOutcome.of("batch", 137, None, tmp_path / "log")
    assert not died.ok and died.failure is None and died.error("job_views").transient
    with pytest.raises(ParamError) as e:  # a field the job's type does not have: a bug, said at once
        registry.job("batch").parse({"dataset": "job_views", "rows_written": 3})
    assert "rows_written" in str(e.value)
    with pytest.raises(ParamError) as e:
        JobOutcome.of("bach", 0, {"dataset": "job_views"})
    assert "'bach' is not one of speed, batch" in str(e.value)


def kafka_error(code) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize("error, transient", [
    (ParamError("ranges", "bad"), False),
    (ConfigError("bad", key="k"), False),
    (DataLossError("t", 0, 0, 5), False),
    (QualityGateError("job_views", [], "r"), False),
    (KafkaUnavailableError("down"), True),
    (CoordinatorNotReadyError("loading"), True),
    (kafka_error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), True),
    (kafka_error(KafkaError._ALL_BROKERS_DOWN), True),
    (kafka_error(KafkaError.NOT_LEADER_FOR_PARTITION), True),  # a broker that just restarted
    (kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART), False),
    (kafka_error(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),
    (JobError("batch", "job_views", 2, JobFailure.of(DataLossError("t", 0, 0, 5))), False),
    (JobError("batch", "job_views", 2, JobFailure.of(KafkaUnavailableError("down"))), True),
    (JobError("batch", "job_views", 137, None), True),  # died without a word: worth another attempt
    (MemoryError(), True),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_every_error_says_whether_a_retry_can_help(error, transient):
    assert is_transient(error) is transient
    assert JobFailure.of(error).transient is transient


def test_retries_within_a_call_take_only_errors_known_to_pass():
    class Conflict(Exception):  # what delta-spark's conflict exceptions derive from, by name
        pass
    Conflict.__name__ = "DeltaConcurrentModificationException"
    assert known_transient(Conflict()) and known_transient(kafka_error(KafkaError.NOT_COORDINATOR))
    assert not known_transient(MemoryError()) and not known_transient(DataLossError("t", 0, 0, 1))

    failures = [KafkaUnavailableError("down"), kafka_error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)]

    def flaky():
        if failures:
            raise failures.pop(0)
        return "done"

    assert attempts_made(flaky, attempts=5, base_delay=0.01) == ("done", 3)
    calls = []

    def permanent():
        calls.append(1)
        raise DataLossError("t", 0, 0, 1)

    with pytest.raises(DataLossError):
        attempts_made(permanent, attempts=5, base_delay=0.01)
    assert calls == [1]  # never retried

    def down():
        calls.append(2)
        raise KafkaUnavailableError("down")

    with pytest.raises(KafkaUnavailableError):
        attempts_made(down, attempts=3, base_delay=0.01)
    assert calls.count(2) == 3


def test_every_loglake_error_lives_in_the_errors_module():
    from tests.unit.test_layers import project_modules

    defined = {name: line for name, path in project_modules().items()
               for line in path.read_text().splitlines() if line.startswith("class ") and "Error(" in line}
    assert set(defined) <= {"loglake.core.errors"}, defined
    assert issubclass(errors.JobError, errors.LoglakeError)
