"""The serving views and SQL over every table, in Spark (runs inside a Spark driver).

Every table is registered as a view pinned to one consistent point, and each dataset's
serving view is ``loglake.serving.sql``'s statement over them. The watermarks come from the
pinned ledger (``loglake.ledger.snapshots.served_ranges``): a query of the tables needs no
broker.
"""

from __future__ import annotations

import re

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from loglake.core.config import Config, Dataset
from loglake.core.errors import ConfigError, ParamError
from loglake.lake.delta_io import table_exists
from loglake.core.plans import parse_timestamp
from loglake.ledger.snapshots import pin, served_ranges
from loglake.tables import open_table
from loglake.serving import history
from loglake.serving.sql import changelog_view_sql, events_view_sql, null_filled

_VERSION = re.compile(r"^\d+$")


def register_tables(spark: SparkSession, config: Config, as_of: str | None = None) -> list[str]:
    """Register ``speed.*``, ``batch.*``, ``quarantine.*`` and each dataset's serving view.

    Every view is pinned: each dataset's tables and ledger are read at one consistent point
    (``loglake.ledger.snapshots.pin``), now or as of a timestamp ``as_of``, so a registered view
    returns the same rows however long it is used, whatever batch runs, backfills and
    maintenance do meanwhile; registering again moves to the newest point. ``as_of`` a
    Delta version: each raw table at that version (serving views need a consistent point,
    so they are registered only for a timestamp). Returns the names registered.
    """
    names = []
    for schema in ("speed", "batch", "quarantine"):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
    version = int(as_of) if as_of is not None and _VERSION.match(as_of) else None
    as_of_ms = parse_timestamp(as_of, "--as-of") if as_of is not None and version is None else None
    for ds in config.datasets.values():
        snap = None if version is not None else pin(config, ds, as_of_ms)
        present = {}
        for layer in ("speed", "batch", "quarantine", "latest", "history"):
            name = getattr(ds.tables, layer)
            if name is None:
                continue
            path = config.table_path(ds, layer)
            pinned = snap.version(layer) if snap is not None else (version if table_exists(spark, path) else None)
            if pinned is None:  # no table (yet, or at that time)
                continue
            if snap is None:
                check_version(name, path, pinned, config.object_store)
            spark.sql(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM delta.`{path}` VERSION AS OF {pinned}")
            present[layer] = name
            names.append(name)
        if snap is None or ("speed" not in present and "batch" not in present):
            continue
        marks = served_ranges(config, ds, snap)
        sides, columns = aligned_sides(spark, {layer: present.get(layer) for layer in ("batch", "speed")})
        if ds.kind == "changelog":
            sql = changelog_view_sql(sides["batch"], sides["speed"], marks, ds.keys, columns)
        else:
            sql = events_view_sql(sides["batch"], sides["speed"], marks, columns)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW `{ds.name}` AS {sql}")
        names.append(ds.name)
        if ds.history == "scd2":
            types = {side: (name, {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields})
                     if name else None for side, name in (("history", present.get("history")),
                                                          ("speed", present.get("speed")))}
            spark.sql(f"CREATE OR REPLACE TEMP VIEW `{history.view_name(ds)}` AS {history.view_of(ds, types, marks)}")
            names.append(history.view_name(ds))
    return names


def check_version(name: str, path: str, version: int, store=None) -> None:
    """A Delta version ``--as-of`` asks of a table that lacks it: a ParamError naming the
    table and the versions it has (not Spark's time-travel exception)."""

    try:
        open_table(path, version, store)
        return
    except Exception:  # deltalake: the version is past the newest or its log was cleaned up
        pass
    newest = open_table(path, store=store)
    have = f"its newest is {newest.version()}" if newest is not None else "it has none"
    raise ParamError("--as-of", f"version {version} of {name} does not exist ({have}; versions are per table: "
                     f"`loglake history {name}` lists them, and a timestamp reads every table at one point)")


def aligned_sides(spark: SparkSession, tables: dict[str, str | None]) -> tuple[dict[str, str | None], list[str]]:
    """The serving view's columns — every column of either table (batch's order first),
    ``_deleted`` apart — and, per side, what to read: the table's name, or when it lacks
    some of those columns (a field the schema added that one table has not received yet,
    ``loglake.schema_versions``) a subquery giving them as typed nulls."""
    return null_filled({side: (name, {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields})
                        if name else None for side, name in tables.items()})


def serving_view(spark: SparkSession, config: Config, ds: Dataset | str, as_of: str | None = None) -> DataFrame:
    """The serving view of one dataset as a DataFrame."""
    ds = config.dataset(ds) if isinstance(ds, str) else ds
    names = register_tables(spark, config, as_of)
    if ds.name not in names:
        raise ConfigError(f"dataset {ds.name} has no speed or batch table yet (run the speed layer or a batch)",
                          key="dataset")
    return spark.table(f"`{ds.name}`")


# Commands that only read: SHOW, DESCRIBE, EXPLAIN (which plans a statement, never runs it).
_READ_ONLY_COMMANDS = re.compile(r"^(Show\w*|Describe\w*|ExplainCommand)$")


def _plan_nodes(plan):
    """Every node of a parsed (unresolved) logical plan, root first."""
    pending = [plan]
    while pending:
        node = pending.pop()
        yield node
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))


def check_read_only(spark: SparkSession, sql: str) -> None:
    """Refuse a statement that could change a table (INSERT, DELETE, UPDATE, MERGE, CREATE,
    DROP, ALTER, RESTORE, OPTIMIZE, VACUUM, SET, ...): loglake's tables change only through
    its jobs, which keep the offsets ledger and the audit true. Queries, SHOW, DESCRIBE
    and EXPLAIN pass. A statement that does not parse is left to Spark's own error."""

    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    except Py4JJavaError:
        return
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    for node in _plan_nodes(plan):
        name = node.getClass().getSimpleName()
        writes = command.isInstance(node) or name.endswith(("Statement", "Command")) or name == "InsertIntoStatement"
        if writes and not _READ_ONLY_COMMANDS.match(name):
            verb = " ".join(sql.split()[:2]).upper() if sql.split() else name
            raise ParamError("sql", f"loglake query is read-only: {verb} ... ({name}) would change tables behind "
                             "the offsets ledger and the audit. Change data through loglake: backfill, maintain, "
                             "accept-loss")


def query(spark: SparkSession, config: Config, sql: str, as_of: str | None = None) -> DataFrame:
    """Run a read-only Spark SQL statement with every table and serving view registered;
    returns the DataFrame. A statement that would write is refused (``check_read_only``)."""
    check_read_only(spark, sql)
    register_tables(spark, config, as_of)
    return spark.sql(sql)
