"""The vocabulary of loglake's errors, and what a retry can do about each.

Each type carries what an operator needs to act: the file and key for configuration,
topic, partition and offsets for the log, the table for Delta. Messages say what was
expected, what was found and what to do.

Every error says whether it is **transient**: a later attempt of the same work may
succeed without anyone changing anything (the broker was briefly unavailable, a Delta
commit lost a race with a concurrent writer, a group coordinator was still loading).
Transient errors are retried with backoff — inside a call (``loglake.core.retrying``), and
across attempts of an Airflow task. Permanent ones (bad input, data loss, a failed
quality gate) fail once: retrying would only repeat the same answer.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import ClassVar

from confluent_kafka import KafkaError


class LoglakeError(Exception):
    """Base of every error loglake raises on purpose. ``transient``: whether retrying may help."""

    transient: ClassVar[bool] = False


# --- permanent: the input or the state must change first -----------------------------


class SetupError(LoglakeError):
    """Something `make setup` provides is missing or could not be resolved."""


class ConfigError(LoglakeError):
    """A configuration file or value is invalid.

    ``file`` and ``key`` name where; the message says what was expected.
    """

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        where = ": ".join(p for p in (file, key) if p)
        super().__init__(f"{where}: {message}" if where else message)


class SchemaChangeError(ConfigError):
    """A dataset's conf changes its schema in a way its tables cannot take (``loglake.schema_versions``)."""

    def __init__(self, dataset: str, changes: str, ways_forward: str, *, file: str, key: str):
        self.dataset = dataset
        self.changes = changes
        super().__init__(f"dataset {dataset}: breaking schema change refused (nothing was run; the tables keep "
                         f"their schema): {changes}. {ways_forward}", file=file, key=key)


class KeyedValueError(LoglakeError, ValueError):
    """A configuration value is invalid across fields; ``key`` names the key it is about.

    Raised inside the config models' validators (a ``ValueError``, so pydantic reports it
    at the right place); ``load_config`` turns it into a ``ConfigError`` naming file and key.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(message)


class ParamError(LoglakeError, ValueError):
    """A batch, backfill or command parameter is invalid; ``field`` names it (as in the DAG's Params)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class OffsetError(LoglakeError, ValueError):
    """An offset or offset range is malformed (negative, start > end, ...)."""

    def __init__(self, message: str, *, topic: str | None = None, partition: int | None = None):
        self.topic = topic
        self.partition = partition
        super().__init__(message)


class DataLossError(LoglakeError):
    """Offsets that must be read are no longer in the log. Never swallowed, never retried."""

    def __init__(self, topic: str, partition: int, missing_start: int, missing_end: int, detail: str = ""):
        self.topic = topic
        self.partition = partition
        self.missing_start = missing_start
        self.missing_end = missing_end
        msg = (
            f"data loss: {topic}[{partition}] offsets [{missing_start}, {missing_end}) "
            f"are no longer retained by Kafka"
        )
        super().__init__(f"{msg}; {detail}" if detail else msg)


class QualityGateError(LoglakeError):
    """A ``fail`` expectation failed: the range is written but not published."""

    def __init__(self, dataset: str, failed: list[dict], run_id: str):
        self.dataset = dataset
        self.failed = failed
        lines = [f"quality gate failed for {dataset} (run {run_id}): the batch watermark stays where it was"]
        for f in failed:
            lines.append(f"  {f['expectation']} on column {f['column']}: {f['unexpected_count']} unexpected of "
                         f"{f['element_count']} rows; sample offsets {f['sample_offsets'] or '-'}")
        super().__init__("\n".join(lines))


class ForeignCommitError(LoglakeError):
    """A table holds commits loglake did not make since the version readers are served (a
    notebook or another tool wrote to it): readers are not moved onto them unchecked.

    ``commits``: ``{"version", "operation", "engine", "timestamp"}`` of each. Permanent: the
    commits stay in the table until it is repaired."""

    def __init__(self, dataset: str, table: str, path: str, served: int | None, commits: list[dict]):
        self.dataset, self.table, self.path, self.served, self.commits = dataset, table, path, served, commits
        since = "since it was created" if served is None else f"since version {served}, the one readers are served"
        found = "; ".join(f"{table} version {c['version']}: {c['operation']} by {c['engine']} at {c['timestamp']}"
                          for c in commits)
        keep = "readers stay on the version they are served" if served is not None else "nothing is served from it"
        if table.startswith("batch."):
            repair = (f"rebuild it from the log (loglake rebuild {dataset} --layer batch), or restore it "
                      f"(RESTORE TABLE delta.`{path}` TO VERSION AS OF {served}) and run the batch again")
        else:
            repair = (f"restore it (RESTORE TABLE delta.`{path}` TO VERSION AS OF {served}), then rebuild the speed "
                      f"layer from the log (loglake rebuild {dataset} --layer speed) and run the batch again")
        if served is None:  # nothing served from it yet: no version to go back to
            repair = "set the table aside (or RESTORE it to a version before them) and run the batch again"
        super().__init__(f"{dataset}: {table} holds {len(commits)} commit(s) loglake did not make {since}: {found}; "
                         f"refused to serve them unchecked ({keep}). Look at them (loglake history {table}), then "
                         f"{repair}")


class KafkaAuthenticationError(LoglakeError):
    """The Kafka broker refused loglake's client: wrong credentials, or TLS that does not match
    (the CA does not trust the broker's certificate, or one side does not speak TLS).

    Permanent: the same credentials are refused again until the configuration or the
    environment changes."""


# bootstrap servers → (monotonic time, reason) of the latest refusal librdkafka reported for them.
_refusals: dict[str, tuple[float, str]] = {}


def refusal_recorder(bootstrap: str):
    """An ``error_cb`` for confluent-kafka clients of ``bootstrap``: it keeps the latest refusal
    (credentials, TLS) so that a call that then fails can say why.

    librdkafka reports a refused login only as an error event (the failed call itself just
    says "transport failure" once its time is up); the events arrive when the client is polled.
    """

    def record(error) -> None:
        reason = refusal_reason(error)
        if reason:
            _refusals[bootstrap] = (time.monotonic(), reason)
    return record


def kafka_refusal(bootstrap: str, since: float) -> str | None:
    """The latest refusal of ``bootstrap`` recorded by ``refusal_recorder`` at or after
    ``since`` (``time.monotonic()``); None: none."""
    at, reason = _refusals.get(bootstrap, (0.0, None))
    return reason if at >= since else None


def refusal_reason(error) -> str | None:
    """For a librdkafka error event: the broker's refusal of the client's login or TLS, in a
    few words (None: some other error)."""

    text = re.sub(r"^\S+/bootstrap: |^\S+://\S+: ", "", error.str())
    text = re.sub(r" \(after \d+ms in state \w+\)$", "", text).strip()
    if error.code() == KafkaError._AUTHENTICATION:
        return text
    if error.code() == KafkaError._SSL:
        return f"TLS: {text}"
    if error.code() == KafkaError._TRANSPORT and "SSL handshake failed" in text:
        return f"TLS: {text} (the port does not speak TLS)"
    return None


class ProcessError(LoglakeError):
    """A managed background process (broker, stream, Airflow) failed to start or stop."""


class PortInUseError(ProcessError):
    """A port a process must listen on is taken by another process; names the port."""

    def __init__(self, message: str, port: int):
        super().__init__(message)
        self.port = port


@dataclass(frozen=True)
class JobFailure:
    """What a job that failed answers with instead of its summary: the error's text and
    type, and whether another attempt may help (``is_transient``)."""

    error: str
    error_type: str
    transient: bool

    @classmethod
    def of(cls, error: BaseException) -> "JobFailure":
        return cls(str(error), type(error).__name__, is_transient(error))

    @classmethod
    def from_dict(cls, value: dict) -> "JobFailure":
        return cls(str(value["error"]), str(value.get("error_type", "error")), bool(value.get("transient", True)))

    @classmethod
    def reported(cls, value: dict | None) -> "JobFailure | None":
        """The failure a job's answer (its summary's JSON object) reports, if it reports one."""
        return cls.from_dict(value) if value is not None and "error" in value else None

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.error_type}: {self.error}"


class JobError(LoglakeError):
    """A Spark job ended without success; carries its ``JobFailure`` (None: it said nothing).

    Transient when the job said so (its own error was transient) or when it died
    without saying anything (a crash, an OOM: worth another attempt).
    """

    def __init__(self, job: str, dataset: str, code: int, failure: JobFailure | None, log: str | None = None):
        self.job, self.dataset, self.code, self.failure, self.log = job, dataset, code, failure, log
        where = f" (log: {log})" if log else ""
        super().__init__(f"{job} {dataset} failed: {failure or f'exit code {code}'}{where}")

    @property
    def transient(self) -> bool:  # type: ignore[override]
        return self.failure.transient if self.failure is not None else True


# --- transient: the same call may succeed later ---------------------------------------


class KafkaUnavailableError(LoglakeError):
    """The Kafka cluster could not be reached, or did not answer in time."""

    transient = True


class RegistryUnavailableError(LoglakeError):
    """The schema registry did not answer (refused, timed out) or failed on its side (5xx):
    records are never quarantined for it; the call is retried, then the job tries again."""

    transient = True

    def __init__(self, url: str, what: str, detail: str):
        self.url = url
        super().__init__(f"the schema registry at {url} did not answer ({what}): {detail}")


class CoordinatorNotReadyError(KafkaUnavailableError):
    """A consumer group's coordinator is moving or still loading its offsets (right after a broker start)."""


class WriterBusyError(LoglakeError):
    """Another writer holds the dataset (``loglake.leases``) and did not let go in time.

    Transient: the holder finishes, or its claim expires if it crashed."""

    transient = True

    def __init__(self, dataset: str, holder: dict, waited: float):
        self.dataset, self.holder = dataset, holder
        super().__init__(f"dataset {dataset} is being written by {describe_holder(holder)}; waited {waited:.0f}s "
                         f"(one writer per dataset: batch, backfill, maintenance and loglake's commands take turns)")


class LeaseLostError(LoglakeError):
    """A writer found, at a commit, that the dataset's lease is no longer its own: it stopped
    renewing for longer than the lease's life (paused, cut off from the store) and another writer
    took it. It commits nothing more (``loglake.leases.check_lease``).

    Transient: another attempt waits for the new holder, then runs again."""

    transient = True

    def __init__(self, dataset: str, operation: str, run_id: str | None, what: str, holder: dict | None,
                 why: str | None = None):
        self.dataset, self.holder = dataset, holder
        run = f" run {run_id}" if run_id else ""
        now = (f"{describe_holder(holder)} holds it now" if holder is not None
               else why or "it was released or taken since")
        super().__init__(f"dataset {dataset}: {operation}{run} lost the dataset's lease before {what}: {now}; "
                         "nothing more was committed (one writer per dataset); another attempt waits for the "
                         "holder and runs again")


class JobCancelled(LoglakeError):
    """The job's caller went away (an Airflow task killed or timed out, a command interrupted)
    while the job waited for its dataset's lease: it stopped before writing anything.

    Transient: the caller's next attempt runs it again."""

    transient = True

    def __init__(self, dataset: str, why: str):
        self.dataset = dataset
        super().__init__(f"the job of dataset {dataset} was cancelled before it wrote anything: {why}")


class StreamRunningError(LoglakeError):
    """Another speed stream of the dataset runs (``loglake.leases.stream_lease``): one query per
    checkpoint, or two would write the same micro-batch.

    Transient: once that one stops, this one can start."""

    transient = True

    def __init__(self, dataset: str, holder: str):
        self.dataset = dataset
        super().__init__(f"a speed stream of dataset {dataset} runs already ({holder or 'its holder unknown'}); "
                         f"one stream per dataset: stop it first (loglake speed stop {dataset})")


def describe_holder(holder: dict) -> str:
    """``maintenance run manual-1 (pid 42 on host-a, since 2026-11-23T10:00:00Z)``."""
    run = f" run {holder['run_id']}" if holder.get("run_id") else ""
    return (f"{holder.get('operation', 'a writer')}{run} (pid {holder.get('pid')} on {holder.get('host')}, "
            f"since {holder.get('acquired_at')})")


def is_transient(error: BaseException) -> bool:
    """Whether another attempt may help: ``known_transient``, and anything loglake does not
    know (a crash, an out-of-memory) — Airflow's own default, so an unexpected failure
    gets the retries its DAG declares. Permanent: loglake's permanent errors, and Kafka
    errors that librdkafka does not call retriable (an unknown topic, an authorisation failure)."""
    if isinstance(error, LoglakeError):
        return error.transient
    kafka = _kafka_error(error)
    return True if kafka is None else kafka


def known_transient(error: BaseException) -> bool:
    """Whether ``error`` is one that is known to pass: a transient loglake error, a retriable
    Kafka error (the broker or a coordinator is on its way), or a Delta concurrent-modification
    conflict (another writer committed first; the losing commit wrote nothing). What retry
    loops within a call retry; anything else goes up at once."""
    if isinstance(error, LoglakeError):
        return error.transient
    if _kafka_error(error):
        return True
    return any(c.__name__ == "DeltaConcurrentModificationException" for c in type(error).__mro__)


def _kafka_error(error: BaseException) -> bool | None:
    """For a confluent-kafka exception: whether it is retriable (None for other exceptions)."""
    from confluent_kafka import KafkaError, KafkaException  # deferred: kept off the start of DAG parsing

    if not isinstance(error, KafkaException) or not error.args or not isinstance(error.args[0], KafkaError):
        return None
    err = error.args[0]
    return bool(err.retriable()) or err.code() in retriable_kafka_codes()


def retriable_kafka_codes() -> set[int]:
    """librdkafka error codes that mean "not yet": the broker, a partition's leader or a
    group's coordinator is on its way."""

    return {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._WAIT_COORD, KafkaError.REQUEST_TIMED_OUT,
            KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
            # A cluster's node went away while a request waited on it (its handle is
            # decommissioned); the partition's new leader answers the next attempt.
            KafkaError._DESTROY_BROKER,
            # A partition's new leader whose high watermark has not caught up yet.
            KafkaError.OFFSET_NOT_AVAILABLE}
