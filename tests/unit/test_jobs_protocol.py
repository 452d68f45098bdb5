"""The job protocol (loglake.jobs.protocol) and the error vocabulary's retry meaning: pure, no services."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from loglake.core import errors
from loglake.core.errors import (ConfigError, CoordinatorNotReadyError, DataLossError, JobError, KafkaUnavailableError,
                            ParamError, QualityGateError, is_transient, known_transient)
from loglake.jobs.protocol import SUMMARY_PREFIX, JobRequest, failure, read_summary, report, summary_file_of
from loglake.core.offsets import OffsetRange
from loglake.ledger.planning import Plan
from loglake.core.retrying import attempts_made

PLAN = Plan("job_views", (OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 7)), "backfill", ("a note",))


@pytest.mark.parametrize("request_", [
    JobRequest("batch", "job_views", PLAN, "run-1"),
    JobRequest("quality", "job_views", PLAN, "dag/run:2", summary_file="/tmp/s"),
    JobRequest("speed", "job_views", available_now=True, progress_file="/x/p.json"),
    JobRequest("maintenance", "company_ceos", run_id="m"),
    JobRequest("rebuild", "company_ceos", run_id="r", layer="latest"),
    JobRequest("replay", "job_views", run_id="r", reason_code="out_of_domain", dry_run=True),
    JobRequest("replay", "job_views", run_id="r"),
], ids=["batch", "quality", "speed", "maintenance", "rebuild", "replay-dry", "replay"])
def test_a_request_round_trips_through_its_arguments(request_):
    assert JobRequest.parse(request_.job, request_.argv()) == request_


@pytest.mark.parametrize("make, field", [
    (lambda: JobRequest("nope", "job_views"), "job"),
    (lambda: JobRequest("batch", "job_views"), "plan"),
    (lambda: JobRequest("batch", "company_ceos", PLAN), "plan"),
    (lambda: JobRequest("quality", "job_views", PLAN), "run_id"),
    (lambda: JobRequest("rebuild", "job_views", run_id="r"), "layer"),
    (lambda: JobRequest("replay", "job_views"), "run_id"),
    (lambda: JobRequest.parse("batch", ["--plan", PLAN.to_json()]), "arguments"),
    (lambda: JobRequest.parse("batch", ["--dataset", "job_views", "--plan", "{not json"]), "plan"),
], ids=["unknown-job", "no-plan", "plan-of-another-dataset", "quality-without-run", "rebuild-without-layer",
        "replay-without-run", "no-dataset", "bad-plan"])
def test_bad_requests_name_the_field(make, field):
    with pytest.raises(ParamError) as e:
        make()
    assert e.value.field == field


def test_the_summary_is_one_guarded_line(tmp_path, capsys):
    report({"records": 3, "seconds": 1.5}, None)
    out = capsys.readouterr().out
    assert out.startswith(SUMMARY_PREFIX) and read_summary(out) == {"records": 3, "seconds": 1.5}
    noise = "\n".join(["{not json", '{"records": 9}', f"{SUMMARY_PREFIX}[1, 2]", f"{SUMMARY_PREFIX}{{broken",
                       out.strip(), "WARNING: Using incubator modules: jdk.incubator.vector"])
    assert read_summary(noise) == {"records": 3, "seconds": 1.5}  # only a prefixed JSON object counts
    assert read_summary('{"records": 9}') is None and read_summary(None) is None
    report({"ok": True}, str(tmp_path / "s"))
    assert read_summary((tmp_path / "s").read_text()) == {"ok": True}
    assert summary_file_of(["--dataset", "x", "--summary-file", "/a/b"]) == "/a/b"
    assert summary_file_of(["--summary-file"]) is None


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
    (JobError("batch", "job_views", 2, failure(DataLossError("t", 0, 0, 5))), False),
    (JobError("batch", "job_views", 2, failure(KafkaUnavailableError("down"))), True),
    (JobError("batch", "job_views", 137, None), True),  # died without a word: worth another attempt
    (MemoryError(), True),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_every_error_says_whether_a_retry_can_help(error, transient):
    assert is_transient(error) is transient
    assert failure(error)["transient"] is transient


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
