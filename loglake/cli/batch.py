"""The batch side: ``batch``, ``backfill``, ``maintain``, ``rebuild``, ``replay``, ``accept-loss``, ``erase``."""

from __future__ import annotations

import argparse
import sys
import time

from loglake.cli.command import Command, cli_run_id, print_tables, succeeded
from loglake.core.config import Config, Dataset
from loglake.jobs.launch import JobOutcome, run_job
from loglake.jobs.requests import BatchRequest, MaintenanceRequest, QualityRequest
from loglake.leases import writer
from loglake.ledger.losses import accept_loss, find_losses
from loglake.batch.planning import plan_backfill, plan_batch
from loglake.lifecycle.rebuild import run_rebuild
from loglake.lifecycle.replay import run_replay
from loglake.erasure.erase import erase, purge_due, purge_lines
from loglake.maintenance.runs import datasets_with_tables, format_log_rows
from loglake.ops.status import dataset_status, format_status


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

    run_id = cli_run_id(plan.kind)
    # Write, validate, publish under one lease: no other writer of the dataset in between.
    with writer(config, ds.name, plan.kind, run_id):
        t0 = time.monotonic()
        summary = succeeded(ds, run_job(config, BatchRequest(ds.name, plan, run_id=run_id)))
        rate = summary.records_per_second
        print(f"{plan.kind} {ds.name}: {summary.records} rows to {ds.tables.batch}, {summary.quarantined} to "
              f"{ds.tables.quarantine}, {summary.ranges} range(s) in {summary.seconds:.1f}s "
              f"({f'{rate:,} records/s' if rate else 'n/a'}); {time.monotonic() - t0:.1f}s in all "
              f"({'in the shared Spark application' if summary.shared_application else 'with JVM start'}); "
              f"run {run_id}")
        quality = run_job(config, QualityRequest(ds.name, plan, run_id=run_id))
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


def _batch_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("dataset")
    b.add_argument("--dry-run", action="store_true", help="print the plan only")


def cmd_backfill(config: Config, args) -> int:
    ds = config.dataset(args.dataset)
    plan = plan_backfill(config, ds, ranges=args.range, from_ts=args.from_ts, to_ts=args.to_ts)
    return run_plan(config, ds, plan, args.dry_run)


def _backfill_arguments(bf: argparse.ArgumentParser) -> None:
    bf.add_argument("dataset")
    bf.add_argument("--range", action="append", metavar="P:START-END",
                    help="partition P, offsets [START, END); repeat for several")
    bf.add_argument("--from", dest="from_ts", metavar="TS", help="ISO-8601 start (offsets-for-times)")
    bf.add_argument("--to", dest="to_ts", metavar="TS", help="ISO-8601 end, exclusive")
    bf.add_argument("--dry-run", action="store_true", help="print the plan only")


def cmd_maintain(config: Config, args) -> int:
    """Expire, optimize and vacuum each dataset's tables (the maintenance job under spark-submit)."""

    chosen = datasets_with_tables(config, args.dataset)
    for name in sorted(set(args.dataset or config.datasets) - {ds.name for ds in chosen}):
        print(f"maintain {name}: no table yet; nothing to maintain")
    run_id = cli_run_id("maintain")
    failed = 0
    for ds in chosen:
        t0 = time.monotonic()
        outcome = run_job(config, MaintenanceRequest(ds.name, run_id=run_id))
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


def _maintain_arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("dataset", nargs="*", help="datasets to maintain (default: every dataset with a table)")


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


def _accept_loss_arguments(al: argparse.ArgumentParser) -> None:
    al.add_argument("dataset")
    al.add_argument("--partition", type=int, help="only this partition (default: every partition with a loss)")
    al.add_argument("--reason", help="why the loss is accepted (kept in the ledger with who and when)")
    al.add_argument("--dry-run", action="store_true", help="show what would be recorded")


def cmd_rebuild(config: Config, args) -> int:
    """Make a damaged or deleted table again from the log (``loglake.lifecycle.rebuild.run_rebuild``)."""

    ds = config.dataset(args.dataset)
    run_rebuild(config, ds, [args.layer] if args.layer else None, cli_run_id("rebuild"), say=print)
    print_tables(config, ds)
    return 0


def _rebuild_arguments(rb: argparse.ArgumentParser) -> None:
    rb.add_argument("dataset")
    rb.add_argument("--layer", choices=["batch", "speed", "latest"],
                    help="the table to rebuild (default: every table of the dataset)")


def cmd_replay(config: Config, args) -> int:
    """Move the quarantined records the current config accepts into their layer (``loglake.lifecycle.replay``)."""

    ds = config.dataset(args.dataset)
    run_replay(config, ds, cli_run_id("replay"), args.reason_code, args.dry_run, say=print)
    if not args.dry_run:
        print_tables(config, ds)
    return 0


def _replay_arguments(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("dataset")
    rp.add_argument("--reason-code", help="only records quarantined for this reason (e.g. out_of_domain)")
    rp.add_argument("--dry-run", action="store_true", help="count what would move and what stays; write nothing")


def _key(args) -> str | None:
    if args.key_file is None:
        return args.key
    text = sys.stdin.read() if args.key_file == "-" else open(args.key_file, encoding="utf-8").read()
    return text.rstrip("\r\n")


def cmd_erase(config: Config, args) -> int:
    """Erase a data subject's key from every table, version and read of the log (``loglake.erasure.erase``)."""

    ds = config.dataset(args.dataset)
    if args.purge:
        for line in purge_lines(purge_due(config, ds, force=args.now)) or [
                f"erase {ds.name}: no erasure is due for its purge"]:
            print(line)
        return 0
    result = erase(config, ds, _key(args), reason=args.reason or "", field_name=args.field, requested_by=args.by)
    print("\n".join(result.lines()))
    return 0


def _erase_arguments(er: argparse.ArgumentParser) -> None:
    er.add_argument("dataset")
    er.add_argument("--key", help="the data subject's key (shown in the process list: --key-file - reads it "
                                  "from stdin instead)")
    er.add_argument("--key-file", help="read the key from this file ('-': stdin)")
    er.add_argument("--field", help="the field that holds the key (default: the dataset's key)")
    er.add_argument("--reason", help="why (kept in the erasure ledger with who and when)")
    er.add_argument("--by", help="who asks (default: user@host)")
    er.add_argument("--purge", action="store_true",
                    help="no new erasure: purge the files of older table versions for the erasures due "
                         "(erasure.purge_after)")
    er.add_argument("--now", action="store_true", help="with --purge: every applied erasure, due or not")


COMMANDS = (
    Command("batch", "recompute every partition from its batch watermark to the log end", cmd_batch,
            _batch_arguments),
    Command("backfill", "recompute exact offset ranges (or a time window) of a dataset", cmd_backfill,
            _backfill_arguments),
    Command("maintain", "expire speed rows covered by batch, OPTIMIZE and VACUUM each table", cmd_maintain,
            _maintain_arguments),
    Command("accept-loss", "record offsets Kafka deleted before loglake read them as lost, so the dataset "
            "continues from the earliest retained offset", cmd_accept_loss, _accept_loss_arguments),
    Command("rebuild", "make a damaged or deleted table again from the log (the old one is set aside); refused "
            "when the log no longer holds what it needs", cmd_rebuild, _rebuild_arguments),
    Command("replay", "re-validate the quarantined records (both layers) under the current config and move the "
            "ones now valid into their table, exactly once", cmd_replay, _replay_arguments),
    Command("erase", "forget a data subject's key: in every table, every table version (after the purge) and "
            "every later read of the log", cmd_erase, _erase_arguments),
)
