"""The ``loglake`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time

from loglake.config import Config, Dataset, load_config
from loglake.errors import LoglakeError


# --- kafka ----------------------------------------------------------------------------


def embedded_kafka(config: Config):
    from loglake.embedded_kafka import EmbeddedKafka

    return EmbeddedKafka(config.home, port=config.kafka.port)


def cmd_kafka(config: Config, args) -> int:
    if args.action in ("start", "stop") and not config.kafka.embedded:
        print(f"profile {config.profile_name!r} uses the external cluster {config.kafka.bootstrap_servers}; "
              "nothing to start or stop")
        return 0
    if args.action == "start":
        kafka = embedded_kafka(config)
        t0 = time.monotonic()
        was = kafka.is_running()
        kafka.start()
        state = "already running" if was else f"started in {time.monotonic() - t0:.1f}s"
        print(f"kafka: {state} at {kafka.bootstrap} (data {config.home / 'kafka'}, log {config.home / 'logs' / 'kafka.log'})")
        return 0
    if args.action == "stop":
        kafka = embedded_kafka(config)
        running = kafka.is_running()
        kafka.stop()
        print("kafka: stopped" if running else "kafka: not running")
        return 0
    return kafka_status(config)


def kafka_status(config: Config) -> int:
    from loglake.kafka_admin import list_topics, watermarks

    topics = list_topics(config)
    print(f"kafka: {config.kafka.bootstrap_servers} answers; {len(topics)} topic(s)")
    for topic in sorted(topics):
        marks = watermarks(config, topic)
        total = sum(hi - lo for lo, hi in marks.values())
        print(f"  {topic}: {len(marks)} partition(s), {total} retained offset(s)")
        for p, (lo, hi) in sorted(marks.items()):
            print(f"    [{p}] earliest {lo}  end {hi}")
    return 0


# --- produce --------------------------------------------------------------------------


def cmd_produce(config: Config, args) -> int:
    from loglake.produce import produce

    ds = config.dataset(args.dataset)
    res = produce(config, ds, args.count, rate=args.rate, bad_fraction=args.bad_fraction, seed=args.seed,
                  progress=not args.quiet)
    print(f"produced {res.records} records to {ds.topic} ({res.good} good, {res.bad} malformed"
          f"{f', {res.tombstones} tombstones' if res.tombstones else ''}) in {res.seconds:.2f}s: "
          f"{res.rate:,.0f} records/s")
    return 0


# --- speed ----------------------------------------------------------------------------


def _speed_process(config: Config, ds: Dataset):
    from loglake.processes import Managed

    return Managed(config.home, f"speed-{ds.name}")


def _progress_file(config: Config, ds: Dataset):
    return config.home / "run" / f"speed-{ds.name}.progress.json"


def _targets(config: Config, name: str | None) -> list[Dataset]:
    return [config.dataset(name)] if name else list(config.datasets.values())


def speed_command(config: Config, ds: Dataset, available_now: bool) -> list[str]:
    from loglake.launch import spark_submit

    args = ["--dataset", ds.name, "--progress-file", str(_progress_file(config, ds))]
    return spark_submit(config, "speed", args + (["--available-now"] if available_now else []))


def cmd_speed(config: Config, args) -> int:
    from loglake.launch import job_env
    from loglake.processes import wait_for

    if args.action == "run":
        if not args.dataset:
            raise LoglakeError("speed run needs a DATASET")
        ds = config.dataset(args.dataset)
        t0 = time.monotonic()
        code, summary = run_speed_job(config, ds, args.available_now)
        if code == 0:
            print(f"speed {ds.name}: {summary.get('records', 0)} records in {summary.get('batches', 0)} "
                  f"micro-batch(es), {summary.get('processing_seconds', 0):.1f}s processing "
                  f"({summary.get('records_per_second') or 0:,} records/s), "
                  f"{time.monotonic() - t0:.1f}s with JVM start")
            _print_tables(config, ds)
        return code
    if args.action == "start":
        for ds in _targets(config, args.dataset):
            proc = _speed_process(config, ds)
            if proc.pid():
                print(f"speed {ds.name}: already running (pid {proc.pid()})")
                continue
            _progress_file(config, ds).parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "loglake.processes", *speed_command(config, ds, False)]
            pid = proc.start(cmd, env=job_env(config))
            print(f"speed {ds.name}: started (pid {pid}, log {proc.log_file})")
        if args.wait:
            for ds in _targets(config, args.dataset):
                wait_for(lambda: _progress_file(config, ds).exists(), args.wait, f"speed {ds.name} first batch",
                         log=_speed_process(config, ds))
        return 0
    if args.action == "stop":
        for ds in _targets(config, args.dataset):
            stopped = _speed_process(config, ds).stop()
            print(f"speed {ds.name}: {'stopped' if stopped else 'not running'}")
        return 0
    return speed_status(config, _targets(config, args.dataset))


def speed_status(config: Config, datasets: list[Dataset]) -> int:
    from loglake.status import dataset_status, format_status

    for ds in datasets:
        pid = _speed_process(config, ds).pid()
        line = f"speed {ds.name}: {'running (pid %d)' % pid if pid else 'stopped'}"
        pf = _progress_file(config, ds)
        if pf.exists():
            prog = json.loads(pf.read_text())
            line += (f"; last batch {prog.get('batchId')} at {prog.get('timestamp')}: "
                     f"{prog.get('numInputRows')} rows, {prog.get('processedRowsPerSecond', 0):,.0f} rows/s")
        print(line)
        try:
            print("\n".join(format_status(ds, dataset_status(config, ds))[1:]))
        except LoglakeError as e:
            print(f"  {e}")
    return 0


def _print_tables(config: Config, ds: Dataset) -> None:
    from loglake.tables import table_summary

    for line in table_summary(config, ds):
        print(f"  {line}")


# --- demo -----------------------------------------------------------------------------


def run_job(config: Config, cmd: list[str]) -> tuple[int, dict]:
    """Run a spark-submit command; return its exit code and its JSON summary line."""
    import subprocess

    from loglake.launch import job_env

    proc = subprocess.run(cmd, env=job_env(config), stdout=subprocess.PIPE, text=True)
    summary = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            summary = json.loads(line)
        else:
            print(line)
    return proc.returncode, summary


def run_speed_job(config: Config, ds: Dataset, available_now: bool = True) -> tuple[int, dict]:
    """Run the speed job under spark-submit; return its exit code and its summary line."""
    _progress_file(config, ds).parent.mkdir(parents=True, exist_ok=True)
    return run_job(config, speed_command(config, ds, available_now))


# --- batch, backfill, query -----------------------------------------------------------


def run_plan(config: Config, ds: Dataset, plan, dry_run: bool) -> int:
    """Print the plan; unless dry-run, write it (batch job), validate and publish it (quality
    job) as the DAGs do, and print a summary of each."""
    from datetime import datetime, timezone

    from loglake.launch import spark_submit

    print(plan.describe())
    if dry_run:
        print("dry run: nothing recomputed")
        return 0
    if plan.empty:
        print(f"{ds.name}: nothing to recompute (the batch layer is at the log end)")
        return 0
    run_id = f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{plan.kind}"
    job_args = ["--dataset", ds.name, "--plan", plan.to_json(), "--run-id", run_id]
    t0 = time.monotonic()
    code, summary = run_job(config, spark_submit(config, "batch", job_args))
    if code:
        print(f"{plan.kind} {ds.name}: failed with exit code {code}: {summary.get('error', 'see above')}",
              file=sys.stderr)
        return code
    rate = summary.get("records_per_second")
    print(f"{plan.kind} {ds.name}: {summary['records']} rows to {ds.tables.batch}, {summary['quarantined']} to "
          f"{ds.tables.quarantine}, {summary['ranges']} range(s) in {summary['seconds']:.1f}s "
          f"({f'{rate:,} records/s' if rate else 'n/a'}); {time.monotonic() - t0:.1f}s with JVM start; run {run_id}")
    code = print_quality(ds, *run_job(config, spark_submit(config, "quality", job_args)))
    from loglake.status import dataset_status, format_status
    print("\n".join(format_status(ds, dataset_status(config, ds))))
    return code


def print_quality(ds: Dataset, code: int, summary: dict) -> int:
    """Print the quality job's outcome; its exit code (non-zero: not published)."""
    if code:
        print(f"quality {ds.name}: NOT published (the watermark stays): {summary.get('error', f'exit code {code}')}",
              file=sys.stderr)
        return code
    warned = "; ".join(f"{w['expectation']}({w['column']}) {w['unexpected_count']} unexpected, e.g. offsets "
                       f"{w['sample_offsets']}" for w in summary.get("warned", []))
    print(f"quality {ds.name}: {summary['expectations']} expectation(s) on {summary['rows']} rows passed; "
          f"published in {summary['seconds']:.1f}s" + (f"; warnings: {warned}" if warned else ""))
    return 0


def cmd_batch(config: Config, args) -> int:
    from loglake.planning import plan_batch

    ds = config.dataset(args.dataset)
    return run_plan(config, ds, plan_batch(config, ds), args.dry_run)


def cmd_backfill(config: Config, args) -> int:
    from loglake.planning import plan_backfill

    ds = config.dataset(args.dataset)
    plan = plan_backfill(config, ds, ranges=args.range, from_ts=args.from_ts, to_ts=args.to_ts)
    return run_plan(config, ds, plan, args.dry_run)


def cmd_query(config: Config, args) -> int:
    from spark_jobs.serving import query
    from spark_jobs.session import get_spark

    # No stage progress bars: the result is the output.
    spark = get_spark(config, "loglake-query", {"spark.ui.showConsoleProgress": "false"})
    import logging

    from pyspark.errors import AnalysisException
    # PySpark logs every failed analysis as a JSON blob; the error below says it plainly.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        try:
            df = query(spark, config, args.sql, args.as_of)
        except AnalysisException as e:
            from spark_jobs.serving import register_tables
            names = register_tables(spark, config, args.as_of)
            first = str(e).strip().splitlines()[0]
            raise LoglakeError(f"{first}\n  tables{' as of ' + args.as_of if args.as_of else ''}: "
                               f"{', '.join(names) or 'none yet'}") from None
        pdf = df.limit(args.limit).toPandas() if args.limit else df.toPandas()
        if args.format == "csv":
            print(pdf.to_csv(index=False), end="")
        elif args.format == "json":
            print(pdf.to_json(orient="records", lines=True, date_format="iso"), end="")
        else:
            print(pdf.to_string(index=False) if len(pdf) else "(no rows)")
            print(f"({len(pdf)} row{'s' if len(pdf) != 1 else ''})")
    finally:
        spark.stop()
    return 0


def cmd_maintain(config: Config, args) -> int:
    """Expire, optimize and vacuum each dataset's tables (the maintenance job under spark-submit)."""
    from datetime import datetime, timezone

    from loglake.launch import spark_submit
    from loglake.maintenance import datasets_with_tables, format_log_rows

    chosen = datasets_with_tables(config, args.dataset)
    for name in sorted(set(args.dataset or config.datasets) - {ds.name for ds in chosen}):
        print(f"maintain {name}: no table yet; nothing to maintain")
    run_id = f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-maintain"
    failed = 0
    for ds in chosen:
        t0 = time.monotonic()
        code, summary = run_job(config, spark_submit(config, "maintenance", [
            "--dataset", ds.name, "--run-id", run_id]))
        if code:
            print(f"maintain {ds.name}: failed with exit code {code}"
                  f"{': ' + summary['error'] if 'error' in summary else ''}", file=sys.stderr)
            failed = failed or code
            continue
        print(f"maintain {ds.name}: {summary['tables']} table(s), {summary['rows_expired']} speed row(s) expired, "
              f"VACUUM retention {summary['vacuum_retention_hours']:g} h, {summary['seconds']:.1f}s in Spark; "
              f"{time.monotonic() - t0:.1f}s with JVM start; run {run_id}")
        print("\n".join(format_log_rows(summary["operations"])))
    return failed


def cmd_demo(config: Config, args) -> int:
    """The whole platform: Kafka, speed streams, Airflow; a scheduled batch through the quality
    gate, maintenance while streaming, audits, and an exact serving view (``loglake.demo``)."""
    from loglake.demo import run_demo

    return run_demo(config, args.count, args.bad_fraction)


# --- audit and diff --------------------------------------------------------------------


def cmd_audit(config: Config, args) -> int:
    """Every retained offset exactly once in its layer's tables; non-zero exit when not."""
    from loglake.audit import audit_dataset, format_audit

    ds = config.dataset(args.dataset)
    if args.sample < 0:
        raise LoglakeError(f"--sample must be >= 0, found {args.sample}")
    result = audit_dataset(config, ds, sample=args.sample, record=not args.no_record)
    print("\n".join(format_audit(result)))
    return 0 if result["ok"] else 1


def cmd_diff(config: Config, args) -> int:
    """Batch against speed rows for one partition's offsets; explains, never fails on differences."""
    from loglake.diff import diff_range, format_diff

    ds = config.dataset(args.dataset)
    if args.sample < 0:
        raise LoglakeError(f"--sample must be >= 0, found {args.sample}")
    d = diff_range(config, ds, args.partition, args.start, args.end, args.sample,
                   names=("--partition", "--from", "--to"))
    print(json.dumps(d, default=str) if args.json else "\n".join(format_diff(d)))
    return 0


# --- entry point ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loglake", description="Kafka is the truth; Delta tables are views of it.")
    p.add_argument("--conf-dir", help="configuration directory (default: conf/ or $LOGLAKE_CONF)")
    p.add_argument("--profile", help="profile in conf/loglake.yaml (default: $LOGLAKE_PROFILE or default_profile)")
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kafka", help="the embedded Kafka broker")
    k.add_argument("action", choices=["start", "stop", "status"])

    pr = sub.add_parser("produce", help="produce generated records to a dataset's topic")
    pr.add_argument("dataset")
    pr.add_argument("--count", type=int, required=True)
    pr.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")
    pr.add_argument("--bad-fraction", type=float, default=0.0, help="fraction of malformed records, 0..1")
    pr.add_argument("--seed", type=int)
    pr.add_argument("--quiet", action="store_true", help="no progress bar")

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

    q = sub.add_parser("query", help="Spark SQL over serving views and raw tables")
    q.add_argument("sql")
    q.add_argument("--as-of", help="Delta VERSION (raw tables) or TIMESTAMP (everything, consistent)")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--limit", type=int, default=0, help="at most N rows (0: all)")

    m = sub.add_parser("maintain", help="expire speed rows covered by batch, OPTIMIZE and VACUUM each table")
    m.add_argument("dataset", nargs="*", help="datasets to maintain (default: every dataset with a table)")

    for name, text in (("up", "start Kafka, every speed stream and Airflow in the background"),
                       ("down", "stop everything `up` started"),
                       ("status", "every process, and per partition: log end, speed position, batch watermark")):
        sub.add_parser(name, help=text)

    au = sub.add_parser("audit", help="check that every retained offset is in the tables exactly once")
    au.add_argument("dataset")
    au.add_argument("--sample", type=int, default=20, help="offending offsets shown per partition and kind")
    au.add_argument("--no-record", action="store_true", help="do not append the result to _audit_results")

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
        from loglake import platform
        return getattr(platform, action)(config)
    return run


def _check_args(args) -> None:
    if getattr(args, "count", 1) is not None and getattr(args, "count", 1) < 0:
        raise LoglakeError(f"--count must be >= 0, found {args.count}")
    bf = getattr(args, "bad_fraction", 0.0)
    if not 0.0 <= bf <= 1.0:
        raise LoglakeError(f"--bad-fraction must be within [0, 1], found {bf}")
    if getattr(args, "rate", None) is not None and args.rate <= 0:
        raise LoglakeError(f"--rate must be > 0 records/s, found {args.rate}")
    if getattr(args, "command", None) == "speed" and args.action == "run" and not args.available_now:
        raise LoglakeError("speed run needs --available-now (use `loglake speed start` for a continuous stream)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_args(args)
        config = load_config(args.conf_dir, args.profile)
        handler = {"kafka": cmd_kafka, "produce": cmd_produce, "speed": cmd_speed, "demo": cmd_demo,
                   "batch": cmd_batch, "backfill": cmd_backfill, "query": cmd_query, "maintain": cmd_maintain,
                   "audit": cmd_audit, "diff": cmd_diff,
                   "up": _platform("up"), "down": _platform("down"), "status": _platform("status")}[args.command]
        return handler(config, args)
    except LoglakeError as e:
        print(f"loglake: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
