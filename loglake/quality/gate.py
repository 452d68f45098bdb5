"""The quality gate's work: validate a written batch range, then publish it (write → audit → publish).

``run_quality`` is what the quality job (``spark_jobs/quality.py``) runs after the batch job
wrote a plan's ranges, and what the rebuild and replay jobs run through
``loglake.quality.pipeline``. It reads
exactly the rows of those ranges from ``batch.<dataset>``, validates them with the
dataset's Great Expectations 1.x suite (``quality:`` in ``conf/datasets/<name>.yaml``),
stores one row per expectation in ``_quality_results`` and builds the GX Data Docs.
Only when no ``fail`` expectation failed, and no commit loglake did not make lies between
the versions readers are served and the current ones (``ForeignCommitError``: a notebook or
another tool wrote to the table), does it append the ranges to the offsets ledger as
*published*, which is what advances the batch watermark and moves readers; a ``warn`` failure
is recorded and shown, and publishes. A failed gate ends the job with a
``QualityGateError`` naming each failed expectation, its column, the unexpected count
and a sample of offsets, and leaves the watermark where it was.
"""

from __future__ import annotations

import json
import os
import re
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from loglake.core.config import Config, Dataset, Expectation
from loglake.core.contracts import QUALITY_RESULTS
from loglake.core.errors import ConfigError, ForeignCommitError, OffsetError, QualityGateError
from loglake.core.offsets import OffsetRange
from loglake.core.predicates import range_predicate
from loglake.jobs.protocol import Phases
from loglake.jobs.summaries import FailedExpectation, QualitySummary
from loglake.leases import appends_paused, check_lease
from loglake.core.plans import Plan
from loglake.ledger.ranges import ledger_rows, published_spans, uncovered
from loglake.tables import staging_path, staging_root
from loglake.lake import delta_io
from loglake.records import validation
from loglake.lake.delta_io import table_exists
from loglake.records.kafka_source import read_ranges
from loglake.lake.system_tables import append, append_ledger, serving_versions

SAMPLE = 10  # offsets shown per failed expectation
_SEVERITY = {"fail": "critical", "warn": "warning"}  # GX's own FailureSeverity names


def _class_name(expectation: str) -> str:
    return "".join(part.capitalize() for part in expectation.split("_"))


def build_suite(ds: Dataset):
    """The dataset's expectations as GX objects; a bad entry is a ConfigError naming its key."""
    import great_expectations as gx  # deferred: seconds to import, and only a gate with expectations needs it

    out = []
    for i, e in enumerate(ds.quality):
        key = f"datasets.{ds.name}.quality.{i}"
        cls = getattr(gx.expectations, _class_name(e.expectation), None)
        if cls is None:
            raise ConfigError(f"{e.expectation!r} is not a Great Expectations {gx.__version__} expectation",
                              key=f"{key}.expectation")
        kwargs = dict(e.kwargs)
        if e.column is not None:
            kwargs["column"] = e.column
        try:
            out.append(cls(**kwargs, severity=_SEVERITY[e.severity], meta={"loglake_index": i}))
        except Exception as err:  # GX validates arguments with pydantic: name what is wrong
            raise ConfigError(f"invalid arguments for {e.expectation}: {err}".splitlines()[0],
                              key=f"{key}.kwargs") from err
    return out


def _context(config: Config):
    """GX's file project under the state directory (suites, results, Data Docs)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=str(config.home))
    # GX's progress bars would fill the job's (and the Airflow task's) log.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _get_or_add(getter, adder, name: str):
    try:
        return getter(name)
    except (KeyError, LookupError, ValueError):
        return adder(name)


def validate_rows(config: Config, ds: Dataset, rows: DataFrame, run_name: str) -> list[dict]:
    """Validate ``rows`` with the dataset's suite; one dict per expectation (in config order)."""
    import great_expectations as gx

    expectations = build_suite(ds)
    if not expectations:
        return []
    context = _context(config)
    source = _get_or_add(context.data_sources.get, context.data_sources.add_spark, "loglake")
    asset = _get_or_add(source.get_asset, source.add_dataframe_asset, ds.name)
    batch = _get_or_add(asset.get_batch_definition, asset.add_batch_definition_whole_dataframe, "written range")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=ds.name, expectations=expectations))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=ds.name, data=batch, suite=suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=f"loglake-{ds.name}", validation_definitions=[definition],
        actions=[gx.checkpoint.UpdateDataDocsAction(name="data docs")],
        # SUMMARY, not COMPLETE: counts plus a sample, never every unexpected row of a big range.
        result_format={"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE,
                       "unexpected_index_column_names": ["_partition", "_offset"],
                       "return_unexpected_index_query": False}))
    # GX keeps results in files named by the run: no '/' or ':' (Airflow run ids have both).
    safe_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_name)
    run = checkpoint.run(batch_parameters={"dataframe": rows}, run_id=gx.RunIdentifier(run_name=safe_name))
    results = [r for v in run.run_results.values() for r in v.results]
    results.sort(key=lambda r: (r.expectation_config.meta or {}).get("loglake_index", 0))
    return [_outcome(e, r) for e, r in zip(ds.quality, results)]


def _outcome(e: Expectation, r) -> dict:
    result = r.to_json_dict().get("result") or {}
    sample = result.get("partial_unexpected_index_list") or []
    offsets = ", ".join(f"{s.get('_partition')}:{s.get('_offset')}" for s in sample[:SAMPLE] if isinstance(s, dict))
    if r.exception_info and r.exception_info.get("raised_exception"):
        result = {**result, "exception": r.exception_info.get("exception_message")}
    return {"expectation": e.expectation, "column": e.column, "severity": e.severity, "success": bool(r.success),
            "element_count": result.get("element_count"), "unexpected_count": result.get("unexpected_count"),
            "observed": json.dumps(result, default=str, sort_keys=True), "sample_offsets": offsets}


def _written(spark: SparkSession, config: Config, ds: Dataset, plan: Plan, run_id: str) -> list[dict]:
    """The ledger's *written* rows of this run for the plan's ranges, one per range (a
    partition may have several ranges)."""
    rows = [r for r in ledger_rows(config, ds) if r["run_id"] == run_id and r["state"] == "written"]
    by_range = {(r["partition"], r["start"], r["end"]): r for r in rows}
    missing = [str(r) for r in plan.ranges if r.size and (r.partition, r.start, r.end) not in by_range]
    if missing:
        raise OffsetError(f"run {run_id} did not write {', '.join(missing)} (run the batch job for this plan "
                          "first; the quality gate validates what it wrote)", topic=ds.topic)
    return [by_range[(r.partition, r.start, r.end)] for r in plan.ranges if r.size]


def run_quality(spark: SparkSession, config: Config, ds: Dataset, plan: Plan, run_id: str) -> QualitySummary:
    """Validate the plan's written ranges; publish them if no ``fail`` expectation failed."""
    started = time.monotonic()
    ranges = [r for r in plan.ranges if r.size]
    if not ranges:
        return QualitySummary(dataset=ds.name, run_id=run_id, expectations=len(ds.quality))
    phases = Phases()
    with phases("prepare"):
        written = _written(spark, config, ds, plan, run_id)
        staged = table_exists(spark, staging_path(config, ds, run_id, "batch"))
        source = staging_path(config, ds, run_id, "batch") if staged else config.table_path(ds, "batch")
        rows = spark.read.format("delta").load(source)
        if ds.kind != "changelog":
            rows = rows.where(range_predicate(ranges))
    rows = rows.persist()
    try:
        with phases("validate"):
            outcomes = validate_rows(config, ds, rows, f"{ds.name}/{run_id}")
            count = rows.count()
    finally:
        rows.unpersist()
    failed = [o for o in outcomes if not o["success"] and o["severity"] == "fail"]
    warned = [o for o in outcomes if not o["success"] and o["severity"] == "warn"]
    foreign = None
    if not failed:
        try:  # before anything is swapped in: a table another writer changed is never published
            serving_versions(config, ds)
        except ForeignCommitError as e:
            foreign = e
    published = not failed and foreign is None
    new_records = 0
    ranges_json = json.dumps([{"partition": r.partition, "start": r.start, "end": r.end} for r in ranges])
    with phases("results"):
        append(spark, config, QUALITY_RESULTS, [
            {**o, "dataset": ds.name, "topic": ds.topic, "ranges": ranges_json, "run_id": run_id,
             "published": published} for o in outcomes], stamp="validated_at")
    with phases("publish"):
        try:
            if published:
                if staged:
                    with delta_io.commit_metadata(spark, {"loglake_job": "quality", "loglake_run_id": run_id,
                                                          "loglake_step": "swap in the validated rows",
                                                          "loglake_ranges": delta_io.ranges_text(ranges)}):
                        swap_in(spark, config, ds, ranges, run_id)
                new_records = publish(spark, config, ds, written)
        finally:
            if staged:
                drop_staging(spark, config, ds, run_id)
    result = QualitySummary(dataset=ds.name, run_id=run_id, ranges=len(ranges), expectations=len(ds.quality),
                            published=published, rows=count, staged=staged, published_records=new_records,
                            failed=tuple(_brief(o) for o in failed), warned=tuple(_brief(o) for o in warned),
                            seconds=round(time.monotonic() - started, 3), phases=phases.seconds)
    if failed:
        raise QualityGateError(ds.name, failed, run_id)
    if foreign is not None:
        raise foreign
    return result


def swap_in(spark: SparkSession, config: Config, ds: Dataset, ranges, run_id: str) -> None:
    """Replace the served rows with the validated ones written aside: one Delta commit per
    table (a changelog's history, batch, then quarantine). Readers serve the batch table at the version the publish
    records next (``loglake.ledger.snapshots``), so they switch from the old rows to the new at once."""
    staged = {layer: spark.read.format("delta").load(staging_path(config, ds, run_id, layer))
              for layer in ("batch", "quarantine")}
    batch_path, quarantine_path = config.table_path(ds, "batch"), config.table_path(ds, "quarantine")
    if ds.history == "scd2":  # first: the history view drops a change it holds twice, never one it lacks
        check_lease(f"swap in {ds.tables.history}")
        (delta_io.to_delta(spark.read.format("delta").load(staging_path(config, ds, run_id, "history")), "overwrite",
                           ds.stats_columns).option("mergeSchema", "true").save(config.table_path(ds, "history")))
    if ds.kind == "changelog":
        # mergeSchema, never overwriteSchema: a column is never dropped from a served table
        # (a field's removal is refused at config load, loglake.schema_versions).
        check_lease(f"swap in {ds.tables.batch}")
        delta_io.to_delta(staged["batch"], "overwrite", ds.stats_columns).option("mergeSchema", "true").save(batch_path)
        where = f"_layer = 'batch' AND _topic = '{ds.topic}'"
    else:
        where = range_predicate(ranges)
        check_lease(f"swap in {ds.tables.batch}")
        (delta_io.to_delta(staged["batch"].where(where), "overwrite", ds.stats_columns).option("replaceWhere", where)
         .option("mergeSchema", "true").save(batch_path))
        where = f"_layer = 'batch' AND ({where})"
    # The speed stream appends to the quarantine table meanwhile (delta_io.replace_rows).
    delta_io.replace_rows(spark, staged["quarantine"].where(where), quarantine_path, where,
                          lambda: appends_paused(config, ds.name, f"quality {run_id}: swap in {ds.tables.quarantine}"),
                          ds.stats_columns)


def drop_staging(spark: SparkSession, config: Config, ds: Dataset, run_id: str) -> None:
    """Delete a run's staging tables (after their rows were swapped in, or refused)."""
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(staging_root(config, ds, run_id))
    root.getFileSystem(spark._jsc.hadoopConfiguration()).delete(root, True)


def _brief(o: dict) -> FailedExpectation:
    return FailedExpectation(**{k: o[k] for k in ("expectation", "column", "unexpected_count", "element_count",
                                                   "sample_offsets")})


def publish(spark: SparkSession, config: Config, ds: Dataset, written: list[dict]) -> int:
    """Append the written ranges to the ledger as published, with the versions readers now
    serve: the watermark may pass them. Refused (``ForeignCommitError``) when a commit loglake
    did not make lies between the versions served so far and those (``serving_versions``).

    Returns the valid records of the offsets no range had published before: each offset is
    counted once in the batch layer's ``loglake_records_total``, however often it is recomputed."""
    versions = serving_versions(config, ds)
    new = first_published(spark, config, ds, written)
    append_ledger(spark, config, [{**w, **versions, "state": "published"} for w in written])
    return new


def first_published(spark: SparkSession, config: Config, ds: Dataset, written: list[dict]) -> int:
    """The valid records of ``written``'s offsets that no published range covers yet. As the
    batch job counted them (``fresh_from``, ``fresh_records``) when the published coverage is
    still what it planned with; else (another run published part of them meanwhile) read
    again from the log and validated (a Spark pass over those offsets only)."""
    run_id = written[0]["run_id"] if written else None
    spans = published_spans(ledger_rows(config, ds), exclude_run=run_id)
    total, again = 0, []
    for w in written:
        parts = uncovered(spans.get(w["partition"], ()), w["start"], w["end"])
        fresh = w.get("fresh_from")
        if not parts:
            continue
        if fresh is not None and w.get("fresh_records") is not None and parts == [(fresh, w["end"])]:
            total += int(w["fresh_records"])
        else:
            again += [OffsetRange(ds.topic, w["partition"], s, e) for s, e in parts]
    if again:
        validated = validation.validate(read_ranges(spark, config, again), ds)
        total += validated.where(F.col("_reason").isNull()).count()
    return total
