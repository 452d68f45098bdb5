"""What a Spark job is asked to do: one typed request per job, checked when it is built.

Each job's options are a dataclass of their own (``BatchRequest`` ... ``SpeedRequest``);
what every job takes (the dataset, where its summary goes, its OpenLineage parent, its run
id) is in ``JobRequest``. A request travels as JSON, serialized in one place
(``to_dict``/``from_dict``): to the shared Spark application, through Airflow's XCom, and
on spark-submit's command line as the one argument ``--request JSON`` (``argv``/``from_argv``).
Inside one process it stays an object.
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping, get_args, get_type_hints

from loglake.core.errors import ParamError
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan

FLAG = "--request"
# How a value of each JSON form is said in an error (a field of another type is checked by its class).
_SAID = {bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class JobRequest:
    """What every job's request carries. ``run_id``: what the run is recorded under (the
    ledger, the record tables, the metrics series); ``summary_file``: where the summary goes
    (else one line on stdout); ``lineage_parent``: the OpenLineage run this job runs under,
    ``namespace/job/run-id`` (an Airflow task's, from its OpenLineage provider)."""

    job: ClassVar[str]
    run_id_is: ClassVar[str | None] = None  # what its run id names, when it needs one

    dataset: str
    _: KW_ONLY
    run_id: str | None = None
    summary_file: str | None = None
    lineage_parent: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ParamError("dataset", f"the {self.job} job needs a dataset name, found {self.dataset!r}")
        if self.run_id_is and not self.run_id:
            raise ParamError("run_id", f"the {self.job} job needs {self.run_id_is}")

    def ranges(self) -> tuple[OffsetRange, ...]:
        """The offset ranges it reads (a plan's), none by default."""
        return ()

    def rebuilt_layer(self) -> str | None:
        """The one table it writes when it rebuilds one, None when it writes its usual tables."""
        return None

    def with_summary_file(self, path: str | Path) -> "JobRequest":
        return replace(self, summary_file=str(path))

    # -- JSON, the one form a request travels in --------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job": self.job}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value is False:
                continue
            out[f.name] = json.loads(value.to_json()) if isinstance(value, Plan) else value
        return out

    @staticmethod
    def from_dict(value: Mapping[str, Any], job: str | None = None) -> "JobRequest":
        """The request a JSON object describes; ``job``: the one it must be for. A ParamError
        names the key that is missing, unknown or of the wrong form."""
        if not isinstance(value, Mapping):
            raise ParamError("request", f"a job request is a JSON object, found {type(value).__name__}")
        named = value.get("job")
        if job is not None and named != job:
            raise ParamError("request.job", f"this is the {job} job, the request is for {named!r}")
        cls = REQUESTS.get(named)
        if cls is None:
            raise ParamError("request.job", f"{named!r} is not one of {', '.join(REQUESTS)}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(value) - set(known) - {"job"})
        if unknown:
            raise ParamError(f"request.{unknown[0]}", f"the {named} job takes no {unknown[0]!r} "
                             f"(it takes {', '.join(known)})")
        args = dict((k, v) for k, v in value.items() if k != "job")
        if "plan" in args:
            try:
                args["plan"] = Plan.from_json(args["plan"])
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ParamError("request.plan", f"not a plan (loglake.core.plans.Plan.to_json): {e}") from None
        for name, hint in get_type_hints(cls).items():
            forms = tuple(t for t in (get_args(hint) or (hint,)) if t is not type(None))
            value = args.get(name)
            if name in known and value is not None and forms and not isinstance(value, forms):
                said = " or ".join(_SAID.get(t, t.__name__) for t in forms)
                raise ParamError(f"request.{name}", f"{said}, found {value!r}")
        try:
            return cls(**args)
        except TypeError as e:  # a required field missing
            raise ParamError("request", f"the {named} job's request: {e}") from None

    def argv(self) -> list[str]:
        """spark-submit's arguments after the application: ``--request JSON``."""
        return [FLAG, json.dumps(self.to_dict(), sort_keys=True)]

    @staticmethod
    def from_argv(job: str, argv: list[str]) -> "JobRequest":
        args = list(argv)
        if len(args) != 2 or args[0] != FLAG:
            raise ParamError("arguments", f"the {job} job takes {FLAG} JSON, found {' '.join(args) or 'nothing'}")
        try:
            value = json.loads(args[1])
        except ValueError as e:
            raise ParamError("request", f"not JSON: {e}") from None
        return JobRequest.from_dict(value, job)


def file_of(argv: list[str], name: str) -> str | None:
    """The file (``summary_file``, ``progress_file``) the request in a job's arguments names,
    even when the rest of it is malformed."""
    args = list(argv)
    try:
        value = json.loads(args[args.index(FLAG) + 1])
    except (ValueError, IndexError):
        return None
    found = value.get(name) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def summary_file_of(argv: list[str]) -> str | None:
    """Where the job's summary goes, even when the rest of its request is malformed."""
    return file_of(argv, "summary_file")


@dataclass(frozen=True)
class _Planned(JobRequest):
    plan: Plan

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.plan, Plan):
            raise ParamError("plan", f"the {self.job} job needs a plan")
        if self.plan.dataset != self.dataset:
            raise ParamError("plan", f"the plan is for dataset {self.plan.dataset!r}, not {self.dataset!r}")

    def ranges(self) -> tuple[OffsetRange, ...]:
        return self.plan.ranges


@dataclass(frozen=True)
class BatchRequest(_Planned):
    """Recompute ``plan``'s exact offset ranges (its run id: the ledger rows it writes)."""

    job: ClassVar[str] = "batch"


@dataclass(frozen=True)
class QualityRequest(_Planned):
    """Validate the ranges the batch run ``run_id`` wrote, and publish them."""

    job: ClassVar[str] = "quality"
    run_id_is: ClassVar[str | None] = "the batch job's run id (its ledger rows)"


@dataclass(frozen=True)
class MaintenanceRequest(JobRequest):
    """Expire, optimize and vacuum a dataset's tables."""

    job: ClassVar[str] = "maintenance"


LAYERS = ("batch", "speed", "latest")


@dataclass(frozen=True)
class RebuildRequest(JobRequest):
    """Rebuild one of the dataset's tables (``layer``) from the log."""

    job: ClassVar[str] = "rebuild"
    run_id_is: ClassVar[str | None] = "a run id"
    layer: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layer not in LAYERS:
            raise ParamError("layer", f"the rebuild job needs a layer, one of {', '.join(LAYERS)}; found {self.layer!r}")

    def rebuilt_layer(self) -> str | None:
        return self.layer


@dataclass(frozen=True)
class ReplayRequest(JobRequest):
    """Re-admit the quarantined records the current config accepts (``reason_code``: only
    those quarantined for it; ``dry_run``: count them, write nothing)."""

    job: ClassVar[str] = "replay"
    run_id_is: ClassVar[str | None] = "a run id (its batch ranges are recorded under it)"
    reason_code: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class SpeedRequest(JobRequest):
    """Run the speed layer's stream, or one available-now run (``available_now``) that stops
    at the log end; ``progress_file``: where its progress goes for ``loglake speed status``."""

    job: ClassVar[str] = "speed"
    available_now: bool = False
    progress_file: str | None = None


REQUESTS: dict[str, type[JobRequest]] = {c.job: c for c in (
    SpeedRequest, BatchRequest, QualityRequest, MaintenanceRequest, RebuildRequest, ReplayRequest)}
