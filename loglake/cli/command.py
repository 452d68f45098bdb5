"""What every command of the command line is made of, and what several share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from loglake.core.config import Config, Dataset
from loglake.core.errors import LoglakeError
from loglake.jobs.launch import JobOutcome
from loglake.jobs.summaries import JobSummary
from loglake.tables import table_summary


def _no_arguments(p: argparse.ArgumentParser) -> None:
    pass


def _no_check(args: argparse.Namespace) -> None:
    pass


@dataclass(frozen=True)
class Command:
    """One ``loglake`` command, declared once: its name and help, its arguments, what it
    checks in them before anything runs (a ``LoglakeError`` naming the flag), and what it runs.
    ``checks_schemas``: a schema change the tables cannot take refuses it first (status says it
    among the rest; down and the services' own commands work whatever a dataset's conf says);
    ``fetches_jars``: it first fetches what ``make setup`` leaves out (an s3a:// lake's jars)."""

    name: str
    help: str
    run: Callable[[Config, argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    check: Callable[[argparse.Namespace], None] = _no_check
    checks_schemas: bool = True
    fetches_jars: bool = True


def at_least(value: float | None, least: float, flag: str, unit: str = "") -> None:
    """``flag``'s ``value`` (None: not given) is ``least`` or more; else a ``LoglakeError`` naming it."""
    if value is not None and value < least:
        raise LoglakeError(f"{flag} must be >= {least:g}{unit}, found {value}")


def check_count_and_fraction(args) -> None:
    """``--count`` and ``--bad-fraction`` of the commands that generate records."""
    at_least(args.count, 0, "--count")
    if not 0.0 <= args.bad_fraction <= 1.0:
        raise LoglakeError(f"--bad-fraction must be within [0, 1], found {args.bad_fraction}")


def print_tables(config: Config, ds: Dataset) -> None:
    for line in table_summary(config, ds):
        print(f"  {line}")


def succeeded(ds: Dataset, outcome: JobOutcome) -> JobSummary:
    """The summary of a job run that succeeded; a ``JobError`` (with the log's path) otherwise."""
    if not outcome.ok:
        raise outcome.error(ds.name)
    return outcome.summary


def cli_run_id(kind: str) -> str:
    """A run id for a job the command line starts: when, and what."""
    return f"cli-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{kind}"
