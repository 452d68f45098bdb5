"""The platform on this machine: ``up``, ``down``, ``status``, the embedded broker and registry,
the local cluster, and the demo."""

from __future__ import annotations

import argparse
import sys
import time

from loglake.cli.command import Command, check_count_and_fraction
from loglake.core.config import Config
from loglake.kafka.admin import list_topics, log_bounds
from loglake.local import stack
from loglake.local.cluster import LocalCluster
from loglake.local.demo import run_demo
from loglake.local.stack import broker


def _platform(action: str):
    def run(config: Config, args) -> int:
        if action == "status":
            return stack.status(config, as_json=args.json)
        return getattr(stack, action)(config)
    return run


def _status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="all of it as one JSON object (what the metrics are made of)")


def _action(*choices: str):
    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=list(choices))
    return arguments


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


def cmd_demo(config: Config, args) -> int:
    """The whole platform: Kafka, speed streams, Airflow; a scheduled batch through the quality
    gate, maintenance while streaming, audits, and an exact serving view (``loglake.local.demo``)."""

    return run_demo(config, args.count, args.bad_fraction)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--bad-fraction", type=float, default=0.02)


COMMANDS = (
    Command("kafka", "the embedded Kafka broker", cmd_kafka, _action("start", "stop", "status"),
            checks_schemas=False),
    Command("registry", "the embedded schema registry (Apicurio, Confluent API)", cmd_registry,
            _action("start", "stop", "status"), checks_schemas=False),
    Command("cluster", "the local Kafka (3 nodes) and Spark standalone clusters of a local_cluster profile "
            "(local-cluster)", cmd_cluster, _action("up", "down", "status"), checks_schemas=False),
    Command("up", "start Kafka, every speed stream and Airflow in the background", _platform("up")),
    Command("down", "stop everything `up` started", _platform("down"), checks_schemas=False, fetches_jars=False),
    Command("status", "every process, and per partition: log end, speed position, batch watermark",
            _platform("status"), _status_arguments, checks_schemas=False, fetches_jars=False),
    Command("demo", "start Kafka, produce sample events, run the speed layer, print the tables", cmd_demo,
            _demo_arguments, check_count_and_fraction),
)
