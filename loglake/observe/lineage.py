"""OpenLineage events of loglake's batch-side jobs (docs/observability.md#lineage).

Every job ``loglake.jobs.entry.execute`` runs emits a START event and a COMPLETE (or FAIL) one
through the OpenLineage Python client, with the transport of the profile's ``lineage``
(a file, HTTP, the console). OpenLineage's Spark listener would see Spark's reads and writes
but not what they mean to loglake; these events say it, in loglake's own facets:

- the job ``<namespace>/loglake.<job>.<dataset>``; the run's ``loglake_run`` facet: loglake's
  run id, the job's seconds and phases, and (a batch run) its records and quarantined ones;
  its ``parent`` facet: the Airflow task's OpenLineage run it ran under (the provider's);
- inputs: the Kafka topic (namespace ``kafka://<first bootstrap server>``) with the offset
  ranges the run read per partition (``loglake_offsetRanges``); for the quality gate, the
  table it validated with its expectations' results (``dataQualityAssertions``);
- outputs: each Delta table the job writes (namespace ``file`` or ``s3://<bucket>``, name its
  path) with the version it left (``version``) and which table of the dataset it is
  (``loglake_table``).

Emitting never fails a job: a transport that refuses is said once on stderr.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any, ClassVar

import attr

from loglake.core.config import Config, Dataset

SCHEMA = "https://github.com/loglake/loglake/blob/main/docs/observability.md#lineage"

# The tables each job writes, by layer (TABLE_LAYERS in loglake.core.config; a dataset without one skips it).
WRITES = {"batch": ("batch", "quarantine", "history"), "quality": ("batch", "history"),
          "rebuild": ("batch", "speed", "quarantine", "latest"), "replay": ("batch", "speed", "quarantine"),
          "maintenance": ("speed", "batch", "quarantine", "history")}

_said: set[str] = set()


def _facets():
    """The facet classes (the client imported only when lineage is configured)."""
    from openlineage.client.generated.base import InputDatasetFacet, OutputDatasetFacet, RunFacet

    @attr.define
    class OffsetRangesDatasetFacet(InputDatasetFacet):
        ranges: list[dict[str, Any]]
        _additional_skip_redact: ClassVar[list[str]] = ["ranges"]

        @staticmethod
        def _get_schema() -> str:
            return f"{SCHEMA}-offset-ranges"

    @attr.define
    class LoglakeTableDatasetFacet(OutputDatasetFacet):
        table: str
        layer: str
        _additional_skip_redact: ClassVar[list[str]] = ["table", "layer"]

        @staticmethod
        def _get_schema() -> str:
            return f"{SCHEMA}-table"

    @attr.define
    class LoglakeRunFacet(RunFacet):
        job: str
        dataset: str
        runId: str | None  # noqa: N815 (OpenLineage's casing)
        summary: dict[str, Any] | None = None
        _additional_skip_redact: ClassVar[list[str]] = ["job", "dataset", "runId", "summary"]

        @staticmethod
        def _get_schema() -> str:
            return f"{SCHEMA}-run"

    return OffsetRangesDatasetFacet, LoglakeTableDatasetFacet, LoglakeRunFacet


def kafka_namespace(config: Config) -> str:
    return f"kafka://{config.kafka.bootstrap_servers.split(',')[0].strip()}"


def table_dataset(path: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a Delta table at ``path``."""
    if path.startswith(("s3a://", "s3://")):
        bucket, _, key = path.split("://", 1)[1].partition("/")
        return f"s3://{bucket}", f"/{key}"
    return "file", path.removeprefix("file:")


class JobLineage:
    """The events of one job run: ``start`` then ``complete`` or ``fail``."""

    def __init__(self, config: Config, job: str, ds: Dataset, run_id: str | None, ranges=(), layer: str | None = None,
                 parent: str | None = None):
        from openlineage.client import OpenLineageClient
        from openlineage.client.uuid import generate_new_uuid

        settings = config.profile.lineage
        self.config, self.job, self.ds, self.loglake_run = config, job, ds, run_id
        self.ranges = [r for r in ranges if r.size]
        # A rebuild of one layer writes that layer's table (and its quarantine rows).
        wrote = (layer,) if layer == "latest" else (layer, "quarantine")
        self.writes = WRITES[job] if layer is None else tuple(x for x in wrote if x in WRITES[job])
        self.client = OpenLineageClient(config={"transport": dict(settings.transport)})
        self.namespace = settings.namespace
        self.run_id = str(generate_new_uuid())
        self.parent = parent.rsplit("/", 2) if parent and parent.count("/") >= 2 else None  # namespace, job, run

    def _event(self, state, summary: dict | None = None, error: str | None = None):
        from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent
        from openlineage.client.facet_v2 import (
            data_quality_assertions_dataset, dataset_version_dataset, error_message_run, job_type_job
        )

        from loglake.tables import snapshot

        ranges_facet, table_facet, run_facet = _facets()
        run_facets: dict[str, Any] = {"loglake_run": run_facet(job=self.job, dataset=self.ds.name,
                                                               runId=self.loglake_run, summary=summary)}
        if self.parent is not None:
            from openlineage.client.facet_v2 import parent_run

            namespace, name, run = self.parent
            run_facets["parent"] = parent_run.ParentRunFacet(run=parent_run.Run(runId=run),
                                                             job=parent_run.Job(namespace=namespace, name=name))
        if error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(message=error,
                                                                                programmingLanguage="python")
        inputs = []
        if self.ranges:
            inputs.append(InputDataset(kafka_namespace(self.config), self.ds.topic, inputFacets={
                "loglake_offsetRanges": ranges_facet(ranges=[
                    {"partition": r.partition, "start": r.start, "end": r.end} for r in self.ranges])}))
        outputs = []
        done = summary is not None
        for layer in self.writes:
            if getattr(self.ds.tables, layer, None) is None:
                continue
            path = self.config.table_path(self.ds, layer)
            namespace, name = table_dataset(path)
            facets: dict[str, Any] = {}
            if done:
                try:
                    version = snapshot(path, self.config.object_store).version
                except FileNotFoundError:
                    version = None
                if version is not None:
                    facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))
            out = OutputDataset(namespace, name, facets=facets, outputFacets={
                "loglake_table": table_facet(table=getattr(self.ds.tables, layer), layer=layer)})
            if self.job == "quality" and summary is not None:
                # The gate reads what it validates: the batch rows of the run, with its expectations.
                assertions = [data_quality_assertions_dataset.Assertion(
                    assertion=f["expectation"], success=False, column=f.get("column"))
                    for f in (summary.get("failed") or []) + (summary.get("warned") or [])]
                inputs.append(InputDataset(namespace, name, inputFacets={
                    "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
                        assertions=assertions or [data_quality_assertions_dataset.Assertion(
                            assertion="expectation_suite", success=True)])}))
            outputs.append(out)
        job_facets = {"jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="LOGLAKE",
                                                               jobType="JOB")}
        return RunEvent(eventType=state, eventTime=datetime.now(timezone.utc).isoformat(),
                        run=Run(runId=self.run_id, facets=run_facets),
                        job=Job(namespace=self.namespace, name=f"loglake.{self.job}.{self.ds.name}", facets=job_facets),
                        inputs=inputs, outputs=outputs, producer="https://github.com/loglake/loglake")

    def _emit(self, state, **kw) -> None:
        try:
            self.client.emit(self._event(state, **kw))
        except Exception as e:  # lineage must never fail the job
            key = f"{type(e).__name__}"
            if key not in _said:
                _said.add(key)
                print(f"loglake: lineage event not emitted: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def start(self) -> None:
        from openlineage.client.event_v2 import RunState
        self._emit(RunState.START)

    def complete(self, summary: dict) -> None:
        from openlineage.client.event_v2 import RunState
        self._emit(RunState.COMPLETE, summary=summary)

    def fail(self, error: BaseException) -> None:
        from openlineage.client.event_v2 import RunState
        self._emit(RunState.FAIL, error=f"{type(error).__name__}: {error}")


def job_lineage(config: Config, job: str, ds: Dataset, run_id: str | None, ranges=(),
                layer: str | None = None, parent: str | None = None) -> JobLineage | None:
    """The lineage of a job run, None when the profile has no ``lineage`` (or the client
    cannot be made: said once on stderr)."""
    if config.profile.lineage is None or job not in WRITES:
        return None
    try:
        return JobLineage(config, job, ds, run_id, ranges, layer, parent)
    except Exception as e:
        if "client" not in _said:
            _said.add("client")
            print(f"loglake: lineage off: the OpenLineage client could not be made: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
        return None
