"""Reading what the tables hold: ``query``, ``history``, ``audit``, ``diff``."""

from __future__ import annotations

import argparse
import json
import logging

from loglake.cli.command import Command, at_least
from loglake.core.config import Config
from loglake.core.errors import LoglakeError, ParamError
from loglake.ledger.history import format_history, table_history
from loglake.ops.audit import audit_dataset
from loglake.ops.audit_report import format_audit
from loglake.ops.diff import diff_range, format_diff
from loglake.serving.arrow import Unsupported
from loglake.serving.arrow import sql as arrow_sql
from loglake.serving.arrow import writes_for_sure


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


def _query_arguments(q: argparse.ArgumentParser) -> None:
    q.add_argument("sql")
    q.add_argument("--engine", choices=["arrow", "spark"],
                   help="arrow: delta-rs' DataFusion, no JVM; spark: Spark SQL. Default: arrow for a query it "
                        "answers as Spark does, else spark")
    q.add_argument("--as-of", help="Delta VERSION (raw tables) or TIMESTAMP (everything, consistent)")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--limit", type=int, default=0, help="at most N rows (0: all)")


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


def cmd_history(config: Config, args) -> int:
    """A table's Delta history with loglake's meaning per version (delta-rs, no JVM)."""

    print("\n".join(format_history(args.table, table_history(config, args.table, args.limit))))
    return 0


def _history_arguments(hi: argparse.ArgumentParser) -> None:
    hi.add_argument("table", help="as in queries: batch.<dataset>, speed.<dataset>, quarantine.<dataset>, "
                                  "speed.<dataset>_latest")
    hi.add_argument("--limit", type=int, default=20, help="the newest N versions (default 20)")


def cmd_audit(config: Config, args) -> int:
    """Every retained offset exactly once in its layer's tables; non-zero exit when not."""

    ds = config.dataset(args.dataset)
    result = audit_dataset(config, ds, sample=args.sample, record=not args.no_record)
    print("\n".join(format_audit(result)))
    return 0 if result.ok else 1


def _audit_arguments(au: argparse.ArgumentParser) -> None:
    au.add_argument("dataset")
    au.add_argument("--sample", type=int, default=20, help="offending offsets shown per partition and kind")
    au.add_argument("--no-record", action="store_true", help="do not append the result to _audit_results")


def cmd_diff(config: Config, args) -> int:
    """Batch against speed rows for one partition's offsets; explains, never fails on differences."""

    ds = config.dataset(args.dataset)
    d = diff_range(config, ds, args.partition, args.start, args.end, args.sample,
                   names=("--partition", "--from", "--to"))
    print(json.dumps(d.to_dict(), default=str) if args.json else "\n".join(format_diff(d)))
    return 0


def _diff_arguments(df: argparse.ArgumentParser) -> None:
    df.add_argument("dataset")
    df.add_argument("--partition", type=int, required=True)
    df.add_argument("--from", dest="start", type=int, required=True, metavar="A")
    df.add_argument("--to", dest="end", type=int, required=True, metavar="B")
    df.add_argument("--sample", type=int, default=10, help="offsets shown per kind of difference")
    df.add_argument("--json", action="store_true", help="print the result as JSON")


def _check_sample(args) -> None:
    at_least(args.sample, 0, "--sample")


COMMANDS = (
    Command("query", "SQL over serving views and raw tables (read-only)", cmd_query, _query_arguments),
    Command("history", "a table's Delta history, each version with what loglake did there", cmd_history,
            _history_arguments),
    Command("audit", "check that every retained offset is in the tables exactly once", cmd_audit, _audit_arguments,
            _check_sample),
    Command("diff", "compare batch and speed rows of one partition's offsets [FROM, TO)", cmd_diff,
            _diff_arguments, _check_sample),
)
