"""The ``loglake`` command line: arguments in, loglake's own words out.

A thin layer, one module per area (``platform``, ``streams``, ``batch``, ``queries``), each
declaring its commands once (``loglake.cli.command.Command``: arguments, their checks, what
runs): each command calls the library (``loglake.*``; Spark jobs through
``loglake.jobs.launch``) and prints the outcome. Spark jobs run with their output
in a log file under ``<state>/logs/jobs/`` (JVM and Spark warnings stay there); the
console shows what the job reported. Errors loglake understands end with one line
``loglake: error: ...`` and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from loglake.cli import batch, platform, queries, streams
from loglake.cli.command import Command
from loglake.core.config import Config, load_config
from loglake.core.errors import LoglakeError
from loglake.schema_versions import check_all
from loglake.local.jars import for_config as fetch_on_first_use

# Every command, as ``loglake --help`` lists them.
ORDER = ("kafka", "registry", "cluster", "produce", "speed", "batch", "backfill", "query", "maintain", "up", "down",
         "status", "audit", "accept-loss", "rebuild", "replay", "erase", "history", "diff", "demo")
COMMANDS: dict[str, Command] = dict(sorted(((c.name, c) for area in (platform, streams, batch, queries)
                                            for c in area.COMMANDS), key=lambda kv: ORDER.index(kv[0])))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loglake", description="Kafka is the truth; Delta tables are views of it.")
    p.add_argument("--conf-dir", help="configuration directory (default: conf/ or $LOGLAKE_CONF)")
    p.add_argument("--profile", help="profile in conf/loglake.yaml (default: $LOGLAKE_PROFILE or default_profile)")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.arguments(sub.add_parser(command.name, help=command.help))
    return p


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
    command = COMMANDS[args.command]
    try:
        command.check(args)
        config = load_config(args.conf_dir, args.profile)
        if command.checks_schemas:
            check_all(config)
        keep_logs(config)
        if command.fetches_jars:
            fetch_on_first_use(config)
        return command.run(config, args)
    except LoglakeError as e:
        print(f"loglake: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
