"""The ``loglake`` command line: arguments in, loglake's own words out.

A thin layer: each command parses its arguments, calls the library (``loglake.*``; Spark
jobs through ``loglake.jobs.launch``) and prints the outcome. Spark jobs run with their output
in a log file under ``<state>/logs/jobs/`` (JVM and Spark warnings stay there); the
console shows what the job reported. Errors loglake understands end with one line
``loglake: error: ...`` and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from loglake.core.config import Config, Dataset, load_config
from loglake.core.errors import ConfigError, LoglakeError, ParamError
from loglake.jobs.launch import JobOutcome, run_job
from loglake.jobs.protocol import JobRequest
from loglake.jobs.summaries import JobSummary
from loglake.kafka.admin import list_topics, log_bounds
from loglake.ledger.history import format_history, table_history
from loglake.ledger.leases import writer
from loglake.ledger.losses import accept_loss, find_losses
from loglake.ledger.planning import plan_backfill, plan_batch
from loglake.ledger.schemas import check_all
from loglake.ledger.tables import table_summary
from loglake.lifecycle.rebuild import run_rebuild
from loglake.lifecycle.replay import run_replay
from loglake.local import stack
from loglake.local.cluster import LocalCluster
from loglake.local.demo import run_demo
from loglake.local.jars import for_config as fetch_on_first_use
from loglake.local.produce import produce
from loglake.local.stack import broker
from loglake.maintenance.runs import datasets_with_tables, format_log_rows
from loglake.ops.audit import audit_dataset, format_audit
from loglake.ops.diff import diff_range, format_diff
from loglake.ops.status import dataset_status, format_status
from loglake.serving.arrow import Unsupported
from loglake.serving.arrow import sql as arrow_sql
from loglake.serving.arrow import writes_for_sure
from loglake.speed.control import SpeedStream, streams

# --- kafka ----------------------------------------------------------------------------


def cmd_kafka(config: Config, args) -> int:
    if args.action in ("start", "stop") and config.profile.local_cluster is not None:
        print(f"loglake: error: profile {config.profile_name!r} runs a {len(config.kafka.ports)}-node Kafka "
              f"cluster: `loglake cluster {'up' if args.action == 'start' else 'down'}` {args.action}s it",
              file=sys.stderr)
        return 2
    if args.action in ("start", "stop") and not config.kafka.embedded:
        print(f"profile {config.profile_name!r} uses the external cluster {config.kafka.bootstrap_servers}; "
              "nothing to start or stop")
        return 0
    if args.action == "start":
        kafka = broker(config)
        t0 = time.monotonic()
        was = kafka.is_running()
        kafka.start()
        state = "already running" if was else f"started in {time.monotonic() - t0:.1f}s"
        print(f"kafka: {state} at {kafka.bootstrap} (data {config.home / 'kafka'}, log {kafka.log_path})")
        return 0
    if args.action == "stop":
        kafka = broker(config)
        running = kafka.is_running()
        kafka.stop()
        print("kafka: stopped" if running else "kafka: not running")
        return 0
    return kafka_status(config)


def cmd_cluster(config: Config, args) -> int:
    cluster = LocalCluster(config)
    if args.action == "up":
        t0 = time.monotonic()
        cluster.up()
        print(f"cluster: up in {time.monotonic() - t0:.1f}s (`loglake cluster status` shows it, "
              f"`loglake cluster down` stops it)")
        return 0
    if args.action == "down":
        cluster.down()
        return 0
    ok, lines = cluster.status_lines()
    print("\n".join(lines))
    return 0 if ok else 1


def cmd_registry(config: Config, args) -> int:
    if config.profile.registry is None:
        print(f"profile {config.profile_name!r} has no schema registry (registry: in conf/loglake.yaml, or "
              "LOGLAKE_REGISTRY_URL)")
        return 0
    embedded = stack.schema_registry(config)
    if args.action in ("start", "stop") and embedded is None:
        print(f"profile {config.profile_name!r} uses the external registry {config.registry.url}; nothing to "
              f"{args.action}")
        return 0
    if args.action == "start":
        stack.start_registry(config)
        return 0
    if args.action == "stop":
        stack.stop_registry(config)
        return 0
    line = stack.registry_line(config)
    print(line)
    if embedded is not None and not embedded.is_running():
        print(f"  the embedded registry is not running: `loglake registry start` (log {embedded.log_path})")
        return 1
    return 0 if line.endswith("(answers)") else 1


def kafka_status(config: Config) -> int:
    topics = list_topics(config)
    sec = config.kafka.security
    how = f" ({sec.protocol}, {sec.mechanism} as {sec.username})" if sec else ""
    print(f"kafka: answers at {config.kafka.bootstrap_servers}{how}; {len(topics)} topic(s)")
    for topic in sorted(topics):
        bounds = log_bounds(config, topic)
        total = sum(hi - lo for lo, hi in bounds.values())
        print(f"  {topic}: {len(bounds)} partition(s), {total} retained offset(s)")
        for p, (lo, hi) in sorted(bounds.items()):
            print(f"    [{p}] earliest {lo}  end {hi}")
    return 0


# --- produce --------------------------------------------------------------------------


def cmd_produce(config: Config, args) -> int:
    ds = config.dataset(args.dataset)
    fmt = args.format or ds.format
    if fmt != ds.format:
        raise ConfigError(f"dataset {ds.name} is format {ds.format} (its conf's format:): its topic takes "
                          f"{ds.format} values, not {fmt}", key="--format")
    if args.schema is not None and not ds.in_registry:
        raise ConfigError(f"--schema registers a schema in the registry: dataset {ds.name} is json, its schema "
                          "is its conf's", key="--schema")
    encoder = None
    if ds.in_registry:
        from loglake.schemaregistry.serializers import encoder as registry_encoder

        encoder = registry_encoder(config, ds, schema_file=args.schema)
    res = produce(config, ds, args.count, rate=args.rate, bad_fraction=args.bad_fraction, seed=args.seed,
                  progress=not args.quiet, transactional=args.transactional,
                  transaction_size=args.transaction_size, abort_every=args.abort_every, encoder=encoder)
    txns = (f" in {res.transactions} transactions, {res.aborted_transactions} aborted ({res.aborted} records no "
            f"read_committed consumer sees)" if args.transactional else "")
    print(f"produced {res.records} records to {ds.topic} ({res.good} good, {res.bad} malformed"
          f"{f', {res.tombstones} tombstones' if res.tombstones else ''}){txns} in {res.seconds:.2f}s: "
          f"{res.rate:,.0f} records/s")
    return 0


# --- speed ----------------------------------------------------------------------------


def cmd_speed(config: Config, args) -> int:
    if args.action == "run":
        if not args.dataset:
            raise LoglakeError("speed run needs a DATASET")
        ds = config.dataset(args.dataset)
        t0 = time.monotonic()
        summary = _succeeded(ds, SpeedStream(config, ds).run_available_now())
        print(f"speed {ds.name}: {summary.records} records in {summary.batches} "
              f"micro-batch(es), {summary.processing_seconds:.1f}s processing "
              f"({summary.records_per_second or 0:,} records/s), "
              f"{time.monotonic() - t0:.1f}s with JVM start")
        _print_tables(config, ds)
        return 0
    if args.action == "start":
        stack.start_streams(config, args.dataset, args.wait)
        return 0
    if args.action == "stop":
        stack.stop_streams(config, args.dataset)
        return 0
    return speed_status(config, args.dataset)


def speed_status(config: Config, name: str | None) -> int:
    for stream in streams(config, name):
        line = f"speed {stream.ds.name}: {stream.state()}"
        prog = stream.progress()
        if prog:
            line += (f"; last batch {prog.get('batchId')} at {prog.get('timestamp')}: "
                     f"{prog.get('numInputRows')} rows, {prog.get('processedRowsPerSecond', 0):,.0f} rows/s")
        print(line)
        try:
            print("\n".join(format_status(stream.ds, dataset_status(config, stream.ds))[1:]))
        except LoglakeError as e:
            print(f"  {e}")
    return 0


def _print_tables(config: Config, ds: Dataset) -> None:
    for line in table_summary(config, ds):
        print(f"  {line}")


def _succeeded(ds: Dataset, outcome: JobOutcome) -> JobSummary:
    """The summary of a job run that succeeded; a ``JobError`` (with the log's path) otherwise."""
    if not outcome.ok:
        raise outcome.error(ds.name)
    return outcome.summary


def _run_id(kind: str) -> str:
    return f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{kind}"


# --- batch, backfill, query -----------------------------------------------------------


def run_plan(config: Config, ds: Dataset, plan, dry_run: bool) -> int:
    """Print the plan; unless dry-run, write it (batch job), validate and publish it (quality
    job) as the DAGs do, and print a summary of each."""

    print(plan.describe())
    if dry_run:
        print("dry run: nothing recomputed")
        return 0
    if plan.empty:
        print(f"{ds.name}: nothing to recompute (the batch layer is at the log end)")
        return 0

    run_id = _run_id(plan.kind)
    # Write, validate, publish under one lease: no other writer of the dataset in between.
    with writer(config, ds.name, plan.kind, run_id):
        t0 = time.monotonic()
        summary = _succeeded(ds, run_job(config, JobRequest("batch", ds.name, plan, run_id)))
        rate = summary.records_per_second
        print(f"{plan.kind} {ds.name}: {summary.records} rows to {ds.tables.batch}, {summary.quarantined} to "
              f"{ds.tables.quarantine}, {summary.ranges} range(s) in {summary.seconds:.1f}s "
              f"({f'{rate:,} records/s' if rate else 'n/a'}); {time.monotonic() - t0:.1f}s in all "
              f"({'in the shared Spark application' if summary.shared_application else 'with JVM start'}); "
              f"run {run_id}")
        quality = run_job(config, JobRequest("quality", ds.name, plan, run_id))
    code = print_quality(ds, quality)
    print("\n".join(format_status(ds, dataset_status(config, ds))))
    return code


def print_quality(ds: Dataset, outcome: JobOutcome) -> int:
    """Print the quality job's outcome; its exit code (non-zero: not published)."""
    if not outcome.ok:
        said = outcome.failure.error if outcome.failure else f"exit code {outcome.code}"
        print(f"quality {ds.name}: NOT published (the watermark stays): {said} (log: {outcome.log})",
              file=sys.stderr)
        return outcome.code or 1
    summary = outcome.summary
    warned = "; ".join(f"{w.expectation}({w.column}) {w.unexpected_count} unexpected, e.g. offsets "
                       f"{w.sample_offsets}" for w in summary.warned)
    print(f"quality {ds.name}: {summary.expectations} expectation(s) on {summary.rows} rows passed; "
          f"published in {summary.seconds:.1f}s" + (f"; warnings: {warned}" if warned else ""))
    return 0


def cmd_batch(config: Config, args) -> int:
    ds = config.dataset(args.dataset)
    return run_plan(config, ds, plan_batch(config, ds), args.dry_run)


def cmd_backfill(config: Config, args) -> int:
    ds = config.dataset(args.dataset)
    plan = plan_backfill(config, ds, ranges=args.range, from_ts=args.from_ts, to_ts=args.to_ts)
    return run_plan(config, ds, plan, args.dry_run)


def cmd_query(config: Config, args) -> int:
    """Run a read-only statement: by the Arrow engine (delta-rs' DataFusion, no JVM) when it
    answers it as Spark would, else by Spark (``--engine`` chooses)."""

    if args.engine in (None, "arrow"):
        try:
            pdf = arrow_rows(config, args.sql, args.as_of, strict=args.engine is None)
        except Unsupported as e:
            if args.engine == "arrow":
                raise LoglakeError(f"--engine arrow: {e}") from None
            logging.getLogger("loglake.query").info("the arrow engine leaves this statement to Spark: %s", e)
        except ParamError as e:
            if args.engine == "arrow" or e.field != "sql" or writes_for_sure(args.sql):
                raise
            # A word that may write, outside strings: Spark's parser decides (and refuses a write).
        else:
            logging.getLogger("loglake.query").info("ran by the arrow engine")
            print(render_rows(pdf.head(args.limit) if args.limit else pdf, args.format), end="")
            return 0
    print(render_rows(spark_rows(config, args.sql, args.as_of, args.limit), args.format), end="")
    return 0


def arrow_rows(config: Config, sql: str, as_of: str | None = None, strict: bool = True):
    """A statement's rows by the Arrow engine (``loglake.serving.arrow.sql``) as a pandas
    DataFrame, as Spark's ``toPandas`` gives them (timestamps in UTC without a zone)."""

    pdf = arrow_sql(config, sql, as_of, strict).to_pandas()
    for column in pdf.columns:
        if getattr(pdf[column].dtype, "tz", None) is not None:
            pdf[column] = pdf[column].dt.tz_convert("UTC").dt.tz_localize(None)
    return pdf


def spark_rows(config: Config, sql: str, as_of: str | None = None, limit: int = 0, spark=None):
    """A statement's rows by Spark (``loglake.serving.spark.query``) as a pandas DataFrame; a
    session of its own (JVM output to ``cli.log``), stopped after, unless ``spark`` is given."""

    from py4j.protocol import Py4JError
    from pyspark.errors import AnalysisException, PySparkException

    from loglake.jobs.session import get_spark
    from loglake.serving.spark import query, register_tables

    own = spark is None
    # PySpark logs every failed analysis as a JSON blob; the error below says it plainly.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        # The result is the output: no stage progress bars, and the JVM's warnings go to the log.
        spark = spark or get_spark(config, "loglake-query", {"spark.ui.showConsoleProgress": "false"},
                                   log_file=config.home / "logs" / "cli.log")
        try:
            df = query(spark, config, sql, as_of)
        except AnalysisException as e:
            names = register_tables(spark, config, as_of)
            first = str(e).strip().splitlines()[0]
            raise LoglakeError(f"{first}\n  tables{' as of ' + as_of if as_of else ''}: "
                               f"{', '.join(names) or 'none yet'}") from None
        return df.limit(limit).toPandas() if limit else df.toPandas()
    except (Py4JError, PySparkException) as e:  # the session or the cluster failed, not the statement
        logging.getLogger("loglake.query").exception("Spark failed the statement")
        said = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise LoglakeError(f"Spark ({config.profile.spark.master}) could not run the statement: {said} "
                           f"(details: {config.home / 'logs' / 'cli.log'})") from None
    finally:
        if own and spark is not None:
            spark.stop()


def render_rows(pdf, fmt: str) -> str:
    """A query's rows as ``loglake query`` prints them: csv (a header line), json (one
    object per line, ISO timestamps) or a table with its row count."""
    if fmt == "csv":
        return pdf.to_csv(index=False)
    if fmt == "json":
        return pdf.to_json(orient="records", lines=True, date_format="iso")
    body = pdf.to_string(index=False) if len(pdf) else "(no rows)"
    return f"{body}\n({len(pdf)} row{'s' if len(pdf) != 1 else ''})\n"


def cmd_maintain(config: Config, args) -> int:
    """Expire, optimize and vacuum each dataset's tables (the maintenance job under spark-submit)."""

    chosen = datasets_with_tables(config, args.dataset)
    for name in sorted(set(args.dataset or config.datasets) - {ds.name for ds in chosen}):
        print(f"maintain {name}: no table yet; nothing to maintain")
    run_id = _run_id("maintain")
    failed = 0
    for ds in chosen:
        t0 = time.monotonic()
        outcome = run_job(config, JobRequest("maintenance", ds.name, run_id=run_id))
        if not outcome.ok:
            print(f"loglake: error: {outcome.error(ds.name)}",
                  file=sys.stderr)
            failed = failed or outcome.code or 1
            continue
        summary = outcome.summary
        print(f"maintain {ds.name}: {summary.tables} table(s), {summary.rows_expired} speed row(s) expired, "
              f"VACUUM retention {summary.vacuum_retention_hours:g} h, {summary.seconds:.1f}s in Spark; "
              f"{time.monotonic() - t0:.1f}s with JVM start; run {run_id}")
        print("\n".join(format_log_rows(summary.operations)))
    return failed


def cmd_demo(config: Config, args) -> int:
    """The whole platform: Kafka, speed streams, Airflow; a scheduled batch through the quality
    gate, maintenance while streaming, audits, and an exact serving view (``loglake.local.demo``)."""

    return run_demo(config, args.count, args.bad_fraction)


# --- audit and diff --------------------------------------------------------------------


def cmd_audit(config: Config, args) -> int:
    """Every retained offset exactly once in its layer's tables; non-zero exit when not."""

    ds = config.dataset(args.dataset)
    if args.sample < 0:
        raise LoglakeError(f"--sample must be >= 0, found {args.sample}")
    result = audit_dataset(config, ds, sample=args.sample, record=not args.no_record)
    print("\n".join(format_audit(result)))
    return 0 if result.ok else 1


def cmd_accept_loss(config: Config, args) -> int:
    """Record the offsets Kafka lost before a layer read them as lost (who, when, why)."""

    ds = config.dataset(args.dataset)
    if args.dry_run:
        losses = find_losses(config, ds, args.partition)
    else:
        losses = accept_loss(config, ds, args.reason or "", partition=args.partition)
    if not losses:
        print(f"{ds.name}: no offsets to accept: every layer reads from the earliest retained offset or later")
        return 0
    for loss in losses:
        print(f"{'would accept' if args.dry_run else 'accepted'} as lost: {loss.describe()}")
    if not args.dry_run:
        print(f"{ds.name}: recorded in the offsets ledger; the batch watermark continues from the earliest retained "
              f"offset and the speed layer resumes there")
    return 0


def cmd_rebuild(config: Config, args) -> int:
    """Make a damaged or deleted table again from the log (``loglake.lifecycle.rebuild.run_rebuild``)."""

    ds = config.dataset(args.dataset)
    run_rebuild(config, ds, [args.layer] if args.layer else None, _run_id("rebuild"), say=print)
    _print_tables(config, ds)
    return 0


def cmd_replay(config: Config, args) -> int:
    """Move the quarantined records the current config accepts into their layer (``loglake.lifecycle.replay``)."""

    ds = config.dataset(args.dataset)
    run_replay(config, ds, _run_id("replay"), args.reason_code, args.dry_run, say=print)
    if not args.dry_run:
        _print_tables(config, ds)
    return 0


def cmd_history(config: Config, args) -> int:
    """A table's Delta history with loglake's meaning per version (delta-rs, no JVM)."""

    print("\n".join(format_history(args.table, table_history(config, args.table, args.limit))))
    return 0


def cmd_diff(config: Config, args) -> int:
    """Batch against speed rows for one partition's offsets; explains, never fails on differences."""

    ds = config.dataset(args.dataset)
    if args.sample < 0:
        raise LoglakeError(f"--sample must be >= 0, found {args.sample}")
    d = diff_range(config, ds, args.partition, args.start, args.end, args.sample,
                   names=("--partition", "--from", "--to"))
    print(json.dumps(d.to_dict(), default=str) if args.json else "\n".join(format_diff(d)))
    return 0


# --- entry point ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loglake", description="Kafka is the truth; Delta tables are views of it.")
    p.add_argument("--conf-dir", help="configuration directory (default: conf/ or $LOGLAKE_CONF)")
    p.add_argument("--profile", help="profile in conf/loglake.yaml (default: $LOGLAKE_PROFILE or default_profile)")
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kafka", help="the embedded Kafka broker")
    k.add_argument("action", choices=["start", "stop", "status"])

    rg = sub.add_parser("registry", help="the embedded schema registry (Apicurio, Confluent API)")
    rg.add_argument("action", choices=["start", "stop", "status"])

    cl = sub.add_parser("cluster", help="the local Kafka (3 nodes) and Spark standalone clusters of a "
                                        "local_cluster profile (local-cluster)")
    cl.add_argument("action", choices=["up", "down", "status"])

    pr = sub.add_parser("produce", help="produce generated records to a dataset's topic")
    pr.add_argument("dataset")
    pr.add_argument("--count", type=int, required=True)
    pr.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")
    pr.add_argument("--bad-fraction", type=float, default=0.0, help="fraction of malformed records, 0..1")
    pr.add_argument("--seed", type=int)
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    pr.add_argument("--transactional", action="store_true",
                    help="write in transactions, as exactly-once producers do; some are aborted (--abort-every)")
    pr.add_argument("--transaction-size", type=int, default=100, help="records per transaction (default 100)")
    pr.add_argument("--abort-every", type=int, default=3,
                    help="abort every N-th transaction after its records reached the log (default 3; 0: none)")
    pr.add_argument("--format", choices=["json", "avro", "protobuf", "json-schema"],
                    help="the values' format (default and only choice: the dataset's format:); a registry format "
                         "is written by confluent-kafka's serializer with the profile's registry")
    pr.add_argument("--schema", type=Path, metavar="FILE",
                    help="a registry format: register this schema under the dataset's subject first, then write "
                         "with the subject's newest version")

    s = sub.add_parser("speed", help="the speed layer (Spark Structured Streaming → Delta)")
    s.add_argument("action", choices=["start", "stop", "status", "run"])
    s.add_argument("dataset", nargs="?")
    s.add_argument("--available-now", action="store_true",
                   help="run: process what the topic holds now, then exit")
    s.add_argument("--wait", type=float, default=0, help="start: wait up to N s for the first batch")

    b = sub.add_parser("batch", help="recompute every partition from its batch watermark to the log end")
    b.add_argument("dataset")
    b.add_argument("--dry-run", action="store_true", help="print the plan only")

    bf = sub.add_parser("backfill", help="recompute exact offset ranges (or a time window) of a dataset")
    bf.add_argument("dataset")
    bf.add_argument("--range", action="append", metavar="P:START-END",
                    help="partition P, offsets [START, END); repeat for several")
    bf.add_argument("--from", dest="from_ts", metavar="TS", help="ISO-8601 start (offsets-for-times)")
    bf.add_argument("--to", dest="to_ts", metavar="TS", help="ISO-8601 end, exclusive")
    bf.add_argument("--dry-run", action="store_true", help="print the plan only")

    q = sub.add_parser("query", help="SQL over serving views and raw tables (read-only)")
    q.add_argument("sql")
    q.add_argument("--engine", choices=["arrow", "spark"],
                   help="arrow: delta-rs' DataFusion, no JVM; spark: Spark SQL. Default: arrow for a query it "
                        "answers as Spark does, else spark")
    q.add_argument("--as-of", help="Delta VERSION (raw tables) or TIMESTAMP (everything, consistent)")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--limit", type=int, default=0, help="at most N rows (0: all)")

    m = sub.add_parser("maintain", help="expire speed rows covered by batch, OPTIMIZE and VACUUM each table")
    m.add_argument("dataset", nargs="*", help="datasets to maintain (default: every dataset with a table)")

    for name, text in (("up", "start Kafka, every speed stream and Airflow in the background"),
                       ("down", "stop everything `up` started"),
                       ("status", "every process, and per partition: log end, speed position, batch watermark")):
        parser = sub.add_parser(name, help=text)
        if name == "status":
            parser.add_argument("--json", action="store_true",
                                help="all of it as one JSON object (what the metrics are made of)")

    au = sub.add_parser("audit", help="check that every retained offset is in the tables exactly once")
    au.add_argument("dataset")
    au.add_argument("--sample", type=int, default=20, help="offending offsets shown per partition and kind")
    au.add_argument("--no-record", action="store_true", help="do not append the result to _audit_results")

    al = sub.add_parser("accept-loss", help="record offsets Kafka deleted before loglake read them as lost, so the "
                                           "dataset continues from the earliest retained offset")
    al.add_argument("dataset")
    al.add_argument("--partition", type=int, help="only this partition (default: every partition with a loss)")
    al.add_argument("--reason", help="why the loss is accepted (kept in the ledger with who and when)")
    al.add_argument("--dry-run", action="store_true", help="show what would be recorded")

    rb = sub.add_parser("rebuild", help="make a damaged or deleted table again from the log (the old one is set "
                                        "aside); refused when the log no longer holds what it needs")
    rb.add_argument("dataset")
    rb.add_argument("--layer", choices=["batch", "speed", "latest"],
                    help="the table to rebuild (default: every table of the dataset)")

    rp = sub.add_parser("replay", help="re-validate the quarantined records (both layers) under the current config "
                                       "and move the ones now valid into their table, exactly once")
    rp.add_argument("dataset")
    rp.add_argument("--reason-code", help="only records quarantined for this reason (e.g. out_of_domain)")
    rp.add_argument("--dry-run", action="store_true", help="count what would move and what stays; write nothing")

    hi = sub.add_parser("history", help="a table's Delta history, each version with what loglake did there")
    hi.add_argument("table", help="as in queries: batch.<dataset>, speed.<dataset>, quarantine.<dataset>, speed.<dataset>_latest")
    hi.add_argument("--limit", type=int, default=20, help="the newest N versions (default 20)")

    df = sub.add_parser("diff", help="compare batch and speed rows of one partition's offsets [FROM, TO)")
    df.add_argument("dataset")
    df.add_argument("--partition", type=int, required=True)
    df.add_argument("--from", dest="start", type=int, required=True, metavar="A")
    df.add_argument("--to", dest="end", type=int, required=True, metavar="B")
    df.add_argument("--sample", type=int, default=10, help="offsets shown per kind of difference")
    df.add_argument("--json", action="store_true", help="print the result as JSON")

    d = sub.add_parser("demo", help="start Kafka, produce sample events, run the speed layer, print the tables")
    d.add_argument("--count", type=int, default=20_000)
    d.add_argument("--bad-fraction", type=float, default=0.02)
    return p


def _platform(action: str):
    def run(config: Config, args) -> int:
        if action == "status":
            return stack.status(config, as_json=args.json)
        return getattr(stack, action)(config)
    return run


def _check_args(args) -> None:
    if getattr(args, "count", 1) is not None and getattr(args, "count", 1) < 0:
        raise LoglakeError(f"--count must be >= 0, found {args.count}")
    bf = getattr(args, "bad_fraction", 0.0)
    if not 0.0 <= bf <= 1.0:
        raise LoglakeError(f"--bad-fraction must be within [0, 1], found {bf}")
    if getattr(args, "transaction_size", 1) < 1:
        raise LoglakeError(f"--transaction-size must be >= 1 record, found {args.transaction_size}")
    if getattr(args, "abort_every", 0) < 0:
        raise LoglakeError(f"--abort-every must be >= 0 (0: never abort), found {args.abort_every}")
    if getattr(args, "rate", None) is not None and args.rate <= 0:
        raise LoglakeError(f"--rate must be > 0 records/s, found {args.rate}")
    if getattr(args, "command", None) == "speed" and args.action == "run" and not args.available_now:
        raise LoglakeError("speed run needs --available-now (use `loglake speed start` for a continuous stream)")


def keep_logs(config: Config) -> None:
    """loglake's own log records (librdkafka's retries and notices among them, through
    ``loglake.kafka``) go to ``<state>/logs/cli.log``; the console gets the answers."""

    logger = logging.getLogger("loglake")
    for h in [h for h in logger.handlers if getattr(h, "loglake_cli", False)]:  # main() run again
        logger.removeHandler(h)
        h.close()
    cli_log = config.home / "logs" / "cli.log"
    try:
        cli_log.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # no writable state directory: the command still runs (and says so if it needs one)
    file_handler = logging.FileHandler(cli_log, delay=True)
    file_handler.loglake_cli = True
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(file_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # not to a console handler some import may have put on the root logger


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_args(args)
        config = load_config(args.conf_dir, args.profile)
        if args.command not in ("down", "status", "kafka", "registry", "cluster"):
            # A schema change the tables cannot take is refused before anything runs (status
            # says it among the rest; down and kafka must work whatever a dataset's conf says).
            check_all(config)
        keep_logs(config)
        if args.command not in ("down", "status"):
            fetch_on_first_use(config)  # what make setup leaves out: an s3a:// lake's jars
        handler = {"kafka": cmd_kafka, "registry": cmd_registry, "cluster": cmd_cluster, "produce": cmd_produce,
                   "speed": cmd_speed, "demo": cmd_demo, "batch": cmd_batch, "backfill": cmd_backfill,
                   "query": cmd_query, "maintain": cmd_maintain,
                   "audit": cmd_audit, "diff": cmd_diff, "accept-loss": cmd_accept_loss, "rebuild": cmd_rebuild,
                   "history": cmd_history, "replay": cmd_replay,
                   "up": _platform("up"), "down": _platform("down"), "status": _platform("status")}[args.command]
        return handler(config, args)
    except LoglakeError as e:
        print(f"loglake: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
