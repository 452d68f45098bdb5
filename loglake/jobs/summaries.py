"""What a Spark job answers with: one typed summary per job, or a ``JobFailure``.

A job builds its summary as one of these values; ``loglake.jobs.protocol`` carries it as
a JSON object (``to_dict``) and the caller reads it back (``loglake.jobs.registry.Job.parse``:
each job names its summary type there) into the same type, so
the CLI, the Airflow operators, the benchmarks and the tests read fields, not keys.
``JobSummary`` holds what every job's run reports; each job adds its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from loglake.core.errors import JobFailure, ParamError


@dataclass(frozen=True, kw_only=True)
class JobSummary:
    """A job's run. ``start_seconds``: until its Spark session was ready (JVM start, or none
    in the shared application); ``shared_application``: it ran there; ``queued_seconds`` and
    ``start_wait_seconds``: waited in that application's queue, and for it to start;
    ``submit_seconds``: the caller's wall time for the whole job (an Airflow task's request,
    queue and run, set by the operator)."""

    job: ClassVar[str] = ""
    nested: ClassVar[dict[str, type[JobSummary]]] = {}  # a field that holds another job's summary
    dataset: str
    run_id: str | None = None
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    start_seconds: float | None = None
    shared_application: bool | None = None
    queued_seconds: float | None = None
    start_wait_seconds: float | None = None
    submit_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON's own types only: a tuple as a list (Airflow's XCom would store a tuple in a
        wrapper of its own, which a reader of the task's value through the REST API then sees)."""
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, value: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ParamError("summary", f"the {cls.job} job's summary has no field {', '.join(unknown)}")
        return cls(**{k: cls.nested[k].from_dict(v) if k in cls.nested and isinstance(v, dict) else v
                      for k, v in value.items()})


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class FailedExpectation:
    """One expectation that did not hold, as the quality gate reports it."""

    expectation: str
    column: str | None
    unexpected_count: int | None
    element_count: int | None
    sample_offsets: list = field(default_factory=list)


def _failed_expectations(values) -> tuple[FailedExpectation, ...]:
    return tuple(v if isinstance(v, FailedExpectation) else FailedExpectation(**v) for v in values or ())


@dataclass(frozen=True, kw_only=True)
class QualitySummary(JobSummary):
    """The quality gate: ``published`` when no ``fail`` expectation failed (and no foreign
    commit was found); ``rows`` validated; the expectations that ``failed`` and ``warned``."""

    job: ClassVar[str] = "quality"
    ranges: int = 0
    expectations: int = 0
    published: bool = False
    published_records: int = 0  # valid records of offsets no range had published before
    rows: int = 0
    staged: bool = False
    failed: tuple[FailedExpectation, ...] = ()
    warned: tuple[FailedExpectation, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "failed", _failed_expectations(self.failed))
        object.__setattr__(self, "warned", _failed_expectations(self.warned))


@dataclass(frozen=True, kw_only=True)
class BatchSummary(JobSummary):
    """A recompute of exact ranges: valid ``records`` written, ``quarantined`` ones, and,
    when run with the quality gate in one process, its ``quality`` summary."""

    job: ClassVar[str] = "batch"
    nested: ClassVar[dict[str, type[JobSummary]]] = {"quality": QualitySummary}
    ranges: int = 0
    records: int = 0
    quarantined: int = 0
    quarantined_by_reason: dict[str, int] = field(default_factory=dict)  # reason code → records
    staged: bool = False
    schema_version: int | None = None
    records_per_second: int | None = None
    quality: QualitySummary | None = None


@dataclass(frozen=True, kw_only=True)
class SpeedSummary(JobSummary):
    """The speed stream's run: the micro-batches it made and their processing time (JVM start excluded)."""

    job: ClassVar[str] = "speed"
    batches: int = 0
    records: int = 0
    processing_seconds: float = 0.0
    records_per_second: int | None = None


@dataclass(frozen=True, kw_only=True)
class MaintenanceSummary(JobSummary):
    """Expire, optimize, vacuum: the tables touched, the watermarks expiry used, and one row
    of the maintenance log per operation (``operations``)."""

    job: ClassVar[str] = "maintenance"
    tables: int = 0
    watermarks: dict[int, int] = field(default_factory=dict)
    rows_expired: int = 0
    vacuum_retention_hours: float = 0.0
    operations: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:  # JSON keys are strings
        object.__setattr__(self, "watermarks", {int(p): int(o) for p, o in self.watermarks.items()})


@dataclass(frozen=True, kw_only=True)
class RebuildSummary(JobSummary):
    """A table rebuilt from the log: the old one ``set_aside`` (its new name, None if there was
    none), the ``offsets`` read and the rows the new table holds."""

    job: ClassVar[str] = "rebuild"
    layer: str
    set_aside: str | None = None
    offsets: int = 0
    records: int = 0
    quarantined: int | None = None
    ranges: int | None = None  # batch
    checkpoint_set_aside: str | None = None  # speed
    from_batch_version: int | None = None  # latest


@dataclass(frozen=True, kw_only=True)
class ReplaySummary(JobSummary):
    """Quarantined records re-read: per layer, counts by reason of those the current config
    now accepts (``valid``) and still refuses (``invalid``); the batch ranges recomputed and
    whether the quality gate published them."""

    job: ClassVar[str] = "replay"
    nested: ClassVar[dict[str, type[JobSummary]]] = {"quality": QualitySummary}
    reason_code: str | None = None
    dry_run: bool = False
    speed: dict[str, dict[str, int]] = field(default_factory=dict)
    batch: dict[str, dict[str, int]] = field(default_factory=dict)
    batch_ranges: list[str] = field(default_factory=list)
    batch_published: bool | None = None
    quality: QualitySummary | None = None


Outcome = JobSummary | JobFailure
