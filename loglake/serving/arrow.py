"""Tables and serving views as Arrow, without a JVM (delta-rs and its SQL engine).

The same rules and statements as the Spark side (``loglake.serving.sql``, plain strings
both engines run): a dataset's tables and ledger are pinned at one consistent point
(``loglake.ledger.snapshots.pin``); the serving view is batch rows below each partition's
watermark plus speed rows at or above it (a changelog: the newest row per key, tombstones
dropped); a column one side lacks (a field added since, ``loglake.schema_versions``) reads as null.
"""

from __future__ import annotations

import re

from loglake.core.config import Config, Dataset
from loglake.core.errors import ConfigError, ParamError
from loglake.core.plans import parse_timestamp
from loglake.ledger.snapshots import pin, served_ranges
from loglake.tables import dataset_tables, layer_table
from loglake.serving import history
from loglake.serving.sql import changelog_view_sql, events_view_sql, null_filled

HISTORY_VIEW = "history view"  # ``_find``'s layer for a dataset's history view

# Delta type names (delta-rs) → SQL types, for a column one side of a view lacks.
_SQL = {"string": "VARCHAR", "long": "BIGINT", "integer": "INT", "double": "DOUBLE", "boolean": "BOOLEAN",
        "timestamp": "TIMESTAMP", "date": "DATE", "binary": "BYTEA"}
# DataFusion's default orders nulls last ascending; Spark first (as the smallest values).
_SESSION = {"datafusion.sql_parser.default_null_ordering": "nulls_min"}


def _plain(table):
    """String views (DataFusion's) as plain strings: what pandas and most tools expect."""
    import pyarrow as pa

    fields = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


def _run(tables: dict, sql: str):
    import pyarrow as pa
    from deltalake import QueryBuilder

    qb = QueryBuilder(_SESSION)
    for alias, t in tables.items():
        qb = qb.register(alias, t)
    return _plain(pa.table(qb.execute(sql).read_all()))


def _find(config: Config, name: str) -> tuple[Dataset, str | None]:
    """The dataset ``name`` belongs to and its layer (None: the dataset's serving view)."""

    for ds in config.datasets.values():
        if name == ds.name:
            return ds, None
        if ds.history == "scd2" and name == history.view_name(ds):
            return ds, HISTORY_VIEW
        for t in dataset_tables(config, ds):
            if t.name == name:
                return ds, t.layer
    raise KeyError(name)


def read(config: Config, name: str):
    """A raw table (``batch.job_views``) or a serving view (``job_views``) as a pyarrow.Table."""

    ds, layer = _find(config, name)
    snap = pin(config, ds)
    if layer == HISTORY_VIEW:
        return history_view(config, ds, snap)
    if layer is not None:
        version = snap.version(layer)
        if version is None:
            raise FileNotFoundError(f"{name} has no table yet")
        return _run({"t": layer_table(config, ds, layer, version)}, "SELECT * FROM t")
    return serving_view(config, ds, snap)


def _view(config: Config, ds: Dataset, snap, sides: dict[str, str], sql):
    """A view over the dataset's tables of ``sides`` (layer → the name it is registered under),
    each at its pinned version: ``sql(config, ds, snap, tables)``'s rows."""
    tables = {layer: (side, layer_table(config, ds, layer, snap.version(layer)))
              for layer, side in sides.items() if snap.version(layer) is not None}
    if not tables:
        raise FileNotFoundError(f"dataset {ds.name} has no {' or '.join(sides)} table yet")
    return _run({side: t for side, t in tables.values()}, sql(config, ds, snap, tables))


def serving_view(config: Config, ds: Dataset, snap):
    return _view(config, ds, snap, {"speed": "s", "batch": "b"}, view_sql)


def history_view(config: Config, ds: Dataset, snap):
    return _view(config, ds, snap, {"history": "h", "speed": "s"}, history_view_sql)


def _typed(table) -> dict[str, str]:
    return {f.name: _SQL.get(getattr(f.type, "type", str(f.type)), "VARCHAR") for f in table.schema().fields}


def history_view_sql(config: Config, ds: Dataset, snap, tables: dict) -> str:
    """The history view's SQL (``loglake.serving.history``) over ``tables``: layer (history,
    speed) → (the name it is registered under, the delta-rs table)."""
    return history.view_of(ds, {layer: (tables[layer][0], _typed(tables[layer][1])) if layer in tables else None
                                for layer in ("history", "speed")}, served_ranges(config, ds, snap))


def view_sql(config: Config, ds: Dataset, snap, tables: dict) -> str:
    """The serving view's SQL (``loglake.serving.sql``) over ``tables``: layer (batch,
    speed) → (the name it is registered under, the delta-rs table); a layer absent: none."""

    sides, columns = null_filled({layer: (tables[layer][0], _typed(tables[layer][1])) if layer in tables else None
                                  for layer in ("batch", "speed")})
    marks = served_ranges(config, ds, snap)
    if ds.kind == "changelog":
        return changelog_view_sql(sides["batch"], sides["speed"], marks, ds.keys, columns)
    return events_view_sql(sides["batch"], sides["speed"], marks, columns)


# --- SQL over every table and view: ``loglake query --engine arrow`` ---------------------


class Unsupported(Exception):
    """A statement the Arrow engine does not run (or might not answer as Spark does): the
    message says why; ``loglake query`` then runs it with Spark."""


_TOKENS = re.compile(r"""(?P<space>\s+|--[^\n]*|/\*.*?\*/)
    |(?P<string>'(?:[^'\\]|\\.)*')|(?P<quoted>"(?:[^"]|"")*")|(?P<ident>`(?:[^`]|``)*`)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>.)""", re.X | re.S)

# Words that make a statement change something, or a setting: never run by the Arrow engine
# (``loglake query`` is read-only; Spark's parser decides what its engine refuses).
WRITES = frozenset("""insert update delete merge create drop alter truncate restore optimize vacuum set reset
                      copy grant revoke refresh cache uncache load msck repair use add into""".split())
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _tokens(sql: str) -> list[tuple[str, str]]:
    return [(m.lastgroup, m.group()) for m in _TOKENS.finditer(sql)]


def _words(tokens) -> list[str]:
    return [text.lower() for kind, text in tokens if kind == "word"]


def check_read_only(sql: str) -> None:
    """Refuse a statement with a word that writes or sets something (INSERT, DELETE, UPDATE,
    MERGE, CREATE, DROP, ALTER, SET, ... outside strings and quoted names), as
    ``loglake.serving.spark.check_read_only`` refuses what Spark would run as a write."""

    tokens = _tokens(sql)
    found = [w for w in _words(tokens) if w in WRITES]
    if found:
        verb = " ".join(sql.split()[:2]).upper()
        raise ParamError("sql", f"loglake query is read-only: {verb} ... ({found[0].upper()}) would change tables "
                         "behind the offsets ledger and the audit. Change data through loglake: backfill, maintain, "
                         "accept-loss")


def writes_for_sure(sql: str) -> bool:
    """Whether the statement starts with a word that writes or sets (DELETE, INSERT, SET, ...)."""
    words = _words(_tokens(sql))
    return bool(words) and words[0] in WRITES


def unlike_spark(sql: str, as_of: str | None = None) -> str | None:
    """Why the Arrow engine would not answer ``sql`` (read-only) as Spark does, seen from its
    text: None when it can. It runs one SELECT or WITH query, with ``as_of`` none or a
    timestamp; Spark reads a double-quoted text as a string (DataFusion: a name), and divides
    integers into a fraction (DataFusion: an integer)."""
    tokens = [t for t in _tokens(sql) if t[0] != "space"]
    while tokens and tokens[-1] == ("other", ";"):
        tokens.pop()
    words = _words(tokens)
    if as_of is not None and as_of.strip().isdigit():
        return "--as-of VERSION reads each raw table at a version of its own: Spark runs that"
    if not words or words[0] not in ("select", "with") or (words[0] == "with" and words[1:2] == ["recursive"]):
        return f"{words[0].upper() if words else 'an empty statement'} is not a query (SELECT or WITH)"
    if ("other", ";") in tokens:
        return "several statements"
    if any(kind == "quoted" for kind, _ in tokens):
        return 'a double-quoted text (a string in Spark SQL, a name in DataFusion)'
    if ("other", "/") in tokens:
        return "a division (of integers: a fraction in Spark SQL, an integer in DataFusion)"
    return None


def _known(config: Config) -> dict[str, tuple[Dataset, str | None]]:
    """Every name a query may use → (dataset, layer; None: the serving view)."""

    out: dict[str, tuple[Dataset, str | None]] = {}
    for ds in config.datasets.values():
        out[ds.name] = (ds, None)
        if ds.history == "scd2":
            out[history.view_name(ds)] = (ds, HISTORY_VIEW)
        out.update({t.name: (ds, t.layer) for t in dataset_tables(config, ds)})
    return out


def _bare(text: str) -> str:
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


def _rewrite(tokens, known) -> tuple[list[str], set[str]]:
    """The statement's pieces with each raw table's ``schema.table`` written as one quoted
    name (how the tables are registered), and the known names it uses."""
    out, used, i = [], set(), 0
    while i < len(tokens):
        kind, text = tokens[i]
        if kind in ("word", "ident") and i + 2 < len(tokens) and tokens[i + 1] == ("other", ".") \
                and tokens[i + 2][0] in ("word", "ident") and (i == 0 or tokens[i - 1] != ("other", ".")):
            name = f"{_bare(text)}.{_bare(tokens[i + 2][1])}".lower()
            if name in known:
                out.append(f'"{name}"')
                used.add(name)
                i += 3
                continue
        if kind in ("word", "ident") and _bare(text).lower() in known:
            used.add(_bare(text).lower())
        out.append(text)
        i += 1
    return out, used


def sql(config: Config, statement: str, as_of: str | None = None, strict: bool = True):
    """A read-only query (SELECT or WITH) over the serving views and raw tables, run by
    DataFusion (delta-rs' SQL engine, no JVM) with each dataset it names pinned at one point
    (now, or as of ``as_of``, a timestamp); a pyarrow.Table. Raises ``ParamError`` for a
    statement that would write and ``Unsupported`` for one it does not run; ``strict``: also
    for what it might answer unlike Spark (``unlike_spark``, and computed columns without a
    name of their own, which the two engines name differently)."""
    import pyarrow as pa
    from deltalake import QueryBuilder


    check_read_only(statement)
    why = unlike_spark(statement, as_of)
    if why is not None and (strict or not why.startswith(("a double", "a division"))):
        raise Unsupported(why)
    as_of_ms = parse_timestamp(as_of, "--as-of") if as_of is not None else None
    known = _known(config)
    tokens = _tokens(statement.strip().rstrip(";"))
    pieces, used = _rewrite(tokens, known)
    snaps, tables, views = {}, {}, []
    for name in sorted(used):  # pinned: each dataset the statement names, once
        ds, _layer = known[name]
        if ds.name not in snaps:
            snaps[ds.name] = snap = pin(config, ds, as_of_ms)
            for layer in ("speed", "batch", "quarantine", "latest", "history"):
                version = snap.version(layer) if getattr(ds.tables, layer, None) else None
                if version is not None:
                    tables[getattr(ds.tables, layer)] = (f'"{getattr(ds.tables, layer)}"',
                                                        layer_table(config, ds, layer, version))
    for name in sorted(used):
        ds, layer = known[name]
        if layer is not None and layer != HISTORY_VIEW and name not in tables:
            # Spark has none either: said here, in loglake's words, with no JVM started to say it.
            raise ConfigError(f"table {name} does not exist{' at ' + as_of if as_of else ''} yet", key="sql")
        if layer is None or layer == HISTORY_VIEW:
            layers, sql = (("history", "speed"), history_view_sql) if layer else (("speed", "batch"), view_sql)
            present = {lr: tables[getattr(ds.tables, lr)] for lr in layers if getattr(ds.tables, lr) in tables}
            if not present:
                raise ConfigError(f"dataset {ds.name} has no {' or '.join(layers)} table"
                                  f"{' at ' + as_of if as_of else ''} yet (run the speed layer or a batch)", key="dataset")
            views.append(f'"{name}" AS ({sql(config, ds, snaps[ds.name], present)})')
    if views:
        first = next(i for i, (kind, _t) in enumerate(tokens) if kind == "word")
        if tokens[first][1].lower() == "with":
            pieces.insert(first + 1, " " + ", ".join(views) + ",")
        else:
            pieces.insert(0, "WITH " + ", ".join(views) + " ")
    qb = QueryBuilder(_SESSION)
    for quoted, table in tables.values():
        qb = qb.register(quoted, table)
    try:
        result = _plain(pa.table(qb.execute("".join(pieces)).read_all()))
    except Exception as e:  # DataFusion's planning and execution errors (deltalake's DeltaError, ...)
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unsupported(f"DataFusion: {first_line}") from None
    if strict and "count(*)" in result.column_names:  # the one computed name both know: Spark calls it count(1)
        result = result.rename_columns(["count(1)" if c == "count(*)" else c for c in result.column_names])
    unnamed = [c for c in result.column_names if not _NAME.match(c) and c != "count(1)"]
    if strict and unnamed:
        raise Unsupported(f"a computed column without a name of its own ({unnamed[0]}): the engines name it "
                          "differently; name it with AS")
    return result
