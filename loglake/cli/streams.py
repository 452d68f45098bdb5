"""Records in and the speed layer: ``produce``, ``speed``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from loglake.cli.command import Command, check_count_and_fraction, print_tables, succeeded
from loglake.core.config import Config
from loglake.core.errors import ConfigError, LoglakeError
from loglake.local import debezium, stack
from loglake.local.produce import produce
from loglake.ops.status import dataset_status, format_status
from loglake.speed.control import SpeedStream, streams


def cmd_produce(config: Config, args) -> int:
    ds = config.dataset(args.dataset)
    fmt = args.format or (debezium.default_format(ds) if ds.debezium else ds.format)
    if args.json_schemas is not None and fmt != "debezium-json":
        flag = "--json-schemas" if args.json_schemas else "--no-json-schemas"
        raise ConfigError(f"{flag} chooses the JSON converter's schema wrapper of --format debezium-json, not of "
                          f"{fmt}", key=flag)
    encoder = cdc = None
    if ds.debezium or fmt in debezium.FORMATS:
        cdc = debezium.encoding(config, ds, fmt, json_schemas=args.json_schemas is not False,
                                schema_file=args.schema)
    elif fmt != ds.format:
        raise ConfigError(f"dataset {ds.name} is format {ds.format} (its conf's format:): its topic takes "
                          f"{ds.format} values, not {fmt}", key="--format")
    elif args.schema is not None and not ds.in_registry:
        raise ConfigError(f"--schema registers a schema in the registry: dataset {ds.name} is json, its schema "
                          "is its conf's", key="--schema")
    elif ds.in_registry:
        from loglake.schemaregistry.serializers import encoder as registry_encoder

        encoder = registry_encoder(config, ds, schema_file=args.schema)
    res = produce(config, ds, args.count, rate=args.rate, bad_fraction=args.bad_fraction, seed=args.seed,
                  progress=not args.quiet, transactional=args.transactional,
                  transaction_size=args.transaction_size, abort_every=args.abort_every, encoder=encoder,
                  debezium=cdc)
    txns = (f" in {res.transactions} transactions, {res.aborted_transactions} aborted ({res.aborted} records no "
            f"read_committed consumer sees)" if args.transactional else "")
    print(f"produced {res.records} records to {ds.topic} ({res.good} good, {res.bad} malformed"
          f"{f', {res.tombstones} tombstones' if res.tombstones else ''}){txns} in {res.seconds:.2f}s: "
          f"{res.rate:,.0f} records/s")
    return 0


def _produce_arguments(pr: argparse.ArgumentParser) -> None:
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
    pr.add_argument("--format", choices=["json", "avro", "protobuf", "json-schema", *debezium.FORMATS],
                    help="the values' format (default and only choice: the dataset's format:); a registry format "
                         "is written by confluent-kafka's serializer with the profile's registry. A changelog with "
                         "envelope: debezium takes a Debezium change stream instead (inserts, updates, deletes each "
                         "followed by a tombstone, a re-snapshot): debezium-json (its default for format: json) as "
                         "Kafka Connect's JSON converter writes it, debezium-avro (its default for format: avro, "
                         "with key_format: avro) as the Avro converter does, the Key and Envelope schemas "
                         "registered under the dataset's key_subject and subject (<topic>-key, <topic>-value)")
    pr.add_argument("--schema", type=Path, metavar="FILE",
                    help="a registry format: register this schema under the dataset's subject first, then write "
                         "with the subject's newest version. debezium-avro: the Avro schema of the table's Value "
                         "record (or a whole Debezium Envelope, its after's record taken); without it the dataset "
                         "code's AVRO_VALUE (a dict), else the Envelope the subject already holds")
    pr.add_argument("--json-schemas", action=argparse.BooleanOptionalAction,
                    help="debezium-json: wrap key and value as {\"schema\": ..., \"payload\": ...}, as the JSON "
                         "converter does with schemas.enable=true (the default); --no-json-schemas: the bare key "
                         "and envelope (schemas.enable=false)")


def _check_produce(args) -> None:
    check_count_and_fraction(args)
    if args.transaction_size < 1:
        raise LoglakeError(f"--transaction-size must be >= 1 record, found {args.transaction_size}")
    if args.abort_every < 0:
        raise LoglakeError(f"--abort-every must be >= 0 (0: never abort), found {args.abort_every}")
    if args.rate is not None and args.rate <= 0:
        raise LoglakeError(f"--rate must be > 0 records/s, found {args.rate}")


def cmd_speed(config: Config, args) -> int:
    if args.action == "run":
        if not args.dataset:
            raise LoglakeError("speed run needs a DATASET")
        ds = config.dataset(args.dataset)
        t0 = time.monotonic()
        summary = succeeded(ds, SpeedStream(config, ds).run_available_now())
        print(f"speed {ds.name}: {summary.records} records in {summary.batches} "
              f"micro-batch(es), {summary.processing_seconds:.1f}s processing "
              f"({summary.records_per_second or 0:,} records/s), "
              f"{time.monotonic() - t0:.1f}s with JVM start")
        print_tables(config, ds)
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


def _speed_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("action", choices=["start", "stop", "status", "run"])
    s.add_argument("dataset", nargs="?")
    s.add_argument("--available-now", action="store_true", help="run: process what the topic holds now, then exit")
    s.add_argument("--wait", type=float, default=0, help="start: wait up to N s for the first batch")


def _check_speed(args) -> None:
    if args.action == "run" and not args.available_now:
        raise LoglakeError("speed run needs --available-now (use `loglake speed start` for a continuous stream)")


COMMANDS = (
    Command("produce", "produce generated records to a dataset's topic", cmd_produce, _produce_arguments,
            _check_produce),
    Command("speed", "the speed layer (Spark Structured Streaming → Delta)", cmd_speed, _speed_arguments,
            _check_speed),
)
