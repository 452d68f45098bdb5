"""How loglake's errors end an Airflow task (plugins/loglake_airflow/errors.py), with real error instances.

Permanent errors (bad input, data loss, a failed quality gate) become ``AirflowFailException``
with loglake's own message: the task fails without retries. Transient ones (the broker
unavailable, another writer holding the dataset) become ``AirflowException`` naming the
error: the task gets its retries. A Spark job's failure summary maps the same way. The
last tests go through the hook, a sensor, a planning task and the operator with the repo's
own conf, up to the point where a broker would be needed.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException

from loglake.core import paths
from loglake.core.errors import (
    CoordinatorNotReadyError,
    DataLossError,
    JobCancelled,
    JobError,
    JobFailure,
    KafkaAuthenticationError,
    KafkaUnavailableError,
    ParamError,
    QualityGateError,
    SchemaChangeError,
    StreamRunningError,
    WriterBusyError,
)
from loglake.core.plans import Plan


@pytest.fixture(scope="module", autouse=True)
def plugins(tmp_path_factory):
    """``loglake_airflow`` importable as Airflow's processes have it; loglake's conf from the repo."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow-home")))
        mp.setenv("LOGLAKE_CONF", str(paths.REPO_ROOT / "conf"))
        mp.setenv("LOGLAKE_PROFILE", "local")
        mp.setenv("LOGLAKE_HOME", str(tmp_path_factory.mktemp("state")))
        mp.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
        yield


def exceptions():
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    return AirflowException, AirflowFailException


QUALITY = QualityGateError("job_views", [{"expectation": "expect_column_values_to_not_be_null", "column": "user_id",
                                          "unexpected_count": 3, "element_count": 100, "sample_offsets": "0:7"}],
                           "run-1")
HOLDER = {"operation": "maintenance", "run_id": "manual-1", "pid": 42, "host": "host-a",
          "acquired_at": "2026-11-23T10:00:00Z"}

PERMANENT = [
    ParamError("ranges[0].end", "end (500) is after the log end (300) of partition 0"),
    DataLossError("job_views", 2, 0, 120, "accept the loss (loglake accept-loss job_views) to continue"),
    QUALITY,
    SchemaChangeError("job_views", "user_id: string -> long", "add a field instead", file="conf/datasets/job_views.yaml",
                      key="schema.user_id"),
    KafkaAuthenticationError("the broker refused loglake's login: SASL authentication failed"),
    JobError("batch", "job_views", 1, JobFailure.of(QUALITY)),
]
TRANSIENT = [
    KafkaUnavailableError("topic 'job_views' does not exist on localhost:9"),
    CoordinatorNotReadyError("reading loglake-speed-job_views offsets for job_views failed: COORDINATOR_LOAD_IN_PROGRESS"),
    WriterBusyError("job_views", HOLDER, 30.0),
    JobCancelled("job_views", "its caller went away"),
    StreamRunningError("job_views", "pid 42 on host-a"),
    JobError("batch", "job_views", 137, None),  # died without saying why: worth another attempt
]


@pytest.mark.parametrize("error", PERMANENT, ids=lambda e: type(e).__name__)
def test_a_permanent_error_fails_the_task_with_its_own_message(error):
    from loglake_airflow.errors import airflow_error

    _, AirflowFailException = exceptions()
    mapped = airflow_error(error)
    assert type(mapped) is AirflowFailException
    assert str(mapped) == str(error)


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_a_transient_error_is_retried_and_named(error):
    from loglake_airflow.errors import airflow_error

    AirflowException, _ = exceptions()
    mapped = airflow_error(error)
    assert type(mapped) is AirflowException  # not AirflowFailException: the task's retries apply
    assert str(mapped) == f"{type(error).__name__}: {error}"


def test_kafka_client_errors_are_judged_by_librdkafka():
    from loglake_airflow.errors import airflow_error

    AirflowException, AirflowFailException = exceptions()
    assert type(airflow_error(KafkaException(KafkaError(KafkaError._TRANSPORT)))) is AirflowException
    assert type(airflow_error(KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)))) is AirflowException
    unknown = airflow_error(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert type(unknown) is AirflowFailException and str(unknown).startswith("KafkaException: ")


@pytest.mark.parametrize("error", [ValueError("bad"), OSError(28, "No space left on device"), KeyError("x")],
                         ids=lambda e: type(e).__name__)
def test_an_error_loglake_does_not_know_goes_up_unchanged(error):
    from loglake_airflow.errors import airflow_error, loglake_errors

    assert airflow_error(error) is None

    @loglake_errors
    def body():
        raise error

    with pytest.raises(type(error)) as raised:
        body()
    assert raised.value is error


def test_the_decorator_maps_what_the_body_raises_and_keeps_the_cause():
    from loglake_airflow.errors import loglake_errors

    AirflowException, AirflowFailException = exceptions()

    @loglake_errors
    def plan(error):
        """Plan something."""
        raise error

    assert (plan.__name__, plan.__doc__) == ("plan", "Plan something.")
    with pytest.raises(AirflowFailException, match=r"^quality gate failed for job_views \(run run-1\)") as raised:
        plan(QUALITY)
    assert raised.value.__cause__ is QUALITY
    with pytest.raises(AirflowException, match="^WriterBusyError: dataset job_views is being written by maintenance"):
        plan(WriterBusyError("job_views", HOLDER, 30.0))
    already = AirflowFailException("the audit found missing offsets")
    with pytest.raises(AirflowFailException) as raised:
        plan(already)
    assert raised.value is already  # Airflow's own exceptions pass through as they are

    @loglake_errors
    def fine(x):
        return x + 1

    assert fine(1) == 2


def test_a_jobs_failure_summary_maps_the_same_way():
    from loglake_airflow.errors import summary_error

    AirflowException, AirflowFailException = exceptions()
    gate = summary_error(JobFailure.of(QUALITY))
    assert type(gate) is AirflowFailException
    assert str(gate).startswith("QualityGateError: quality gate failed for job_views")
    busy = summary_error(JobFailure.of(WriterBusyError("job_views", HOLDER, 30.0)))
    assert type(busy) is AirflowException and str(busy).startswith("WriterBusyError: dataset job_views")
    died = summary_error(JobFailure.from_dict({"error": "the shared application went away",
                                               "error_type": "SharedApplicationLost"}))
    assert type(died) is AirflowException  # said nothing about retries: another attempt


def test_an_unknown_dataset_fails_a_sensor_a_plan_and_the_hook_at_once():
    """The repo's conf, no broker: the name is refused before anything is read from Kafka or Delta."""
    from loglake.core.errors import ConfigError
    from loglake_airflow.hooks import LoglakeHook
    from loglake_airflow.plans import backfill_requests
    from loglake_airflow.sensors import BatchWatermarkSensor, StreamCaughtUpSensor

    _, AirflowFailException = exceptions()
    hook = LoglakeHook()
    assert hook.get_conn() is hook.config  # loaded once, kept for the hook's life
    assert hook.dataset("job_views").name == "job_views"
    with pytest.raises(ConfigError, match="unknown dataset 'page_views'"):
        hook.dataset("page_views")
    said = "dataset: unknown dataset 'page_views'; known datasets: "
    for sensor in (BatchWatermarkSensor(task_id="w", dataset="page_views", target={0: 10}),
                   StreamCaughtUpSensor(task_id="s", dataset="page_views")):
        assert sensor.mode == "reschedule"
        with pytest.raises(AirflowFailException, match=f"^{said}"):
            sensor.poke({})
    with pytest.raises(AirflowFailException, match=f"^{said}"):
        backfill_requests({"dataset": "page_views", "ranges": ["0:0-10"]}, "r/1")


def test_the_operator_refuses_a_plan_of_another_dataset_before_any_spark_submit():
    from loglake_airflow.operators import LoglakeSparkSubmitOperator

    _, AirflowFailException = exceptions()
    asked = {"job": "batch", "dataset": "job_views", "plan": json.loads(Plan("company_ceos", (), "backfill").to_json()),
             "run_id": "m"}
    op = LoglakeSparkSubmitOperator(task_id="malformed", job="batch", job_request=asked)
    with pytest.raises(AirflowFailException, match="^plan: the plan is for dataset 'company_ceos'"):
        op.execute({})


def test_a_plan_names_each_stopped_dataset_and_why_and_the_run_fails_naming_them():
    """``loglake_batch``'s plan task hands the datasets it stopped to XCom ``stopped`` (typed:
    which dataset, a data loss or a schema change, the error's words); its
    ``stopped_datasets`` task fails the run naming each and what to do."""
    import json

    from loglake_airflow.plans import fail_on_stopped, stopped_dataset

    loss, change = PERMANENT[1], PERMANENT[3]
    assert isinstance(loss, DataLossError) and isinstance(change, SchemaChangeError)
    stopped = json.loads(json.dumps([stopped_dataset("job_views", loss), stopped_dataset("company_ceos", change)]))
    assert [(s["dataset"], s["kind"]) for s in stopped] == [("job_views", "data_loss"),
                                                            ("company_ceos", "schema_change")]
    fail_on_stopped([])  # none stopped: the run's other tasks decide
    _, AirflowFailException = exceptions()
    with pytest.raises(AirflowFailException) as failed:
        fail_on_stopped(stopped)
    said = str(failed.value).splitlines()
    assert said[1] == f"job_views (lost offsets; `loglake accept-loss` once they are accounted for): {loss}"
    assert said[2] == f"company_ceos (its conf changes the schema in a way its tables cannot take): {change}"
