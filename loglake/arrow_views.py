"""Tables and serving views as Arrow, without a JVM (delta-rs and its SQL engine).

The same rules as the Spark side (``spark_jobs/serving.py``, whose SQL builders this
reuses: plain strings): a dataset's tables and ledger are pinned at one consistent point
(``loglake.snapshots.pin``); the serving view is batch rows below each partition's
watermark plus speed rows at or above it (a changelog: the newest row per key, tombstones
dropped); a column one side lacks (a field added since, ``loglake.schemas``) reads as null.
"""

from __future__ import annotations

from loglake.config import Config, Dataset

# Delta type names (delta-rs) → SQL types, for a column one side of a view lacks.
_SQL = {"string": "VARCHAR", "long": "BIGINT", "integer": "INT", "double": "DOUBLE", "boolean": "BOOLEAN",
        "timestamp": "TIMESTAMP", "date": "DATE", "binary": "BYTEA"}


def _plain(table):
    """String views (DataFusion's) as plain strings: what pandas and most tools expect."""
    import pyarrow as pa

    fields = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


def _run(tables: dict, sql: str):
    import pyarrow as pa
    from deltalake import QueryBuilder

    qb = QueryBuilder()
    for alias, t in tables.items():
        qb = qb.register(alias, t)
    return _plain(pa.table(qb.execute(sql).read_all()))


def _find(config: Config, name: str) -> tuple[Dataset, str | None]:
    """The dataset ``name`` belongs to and its layer (None: the dataset's serving view)."""
    from loglake.tables import dataset_tables

    for ds in config.datasets.values():
        if name == ds.name:
            return ds, None
        for t in dataset_tables(config, ds):
            if t.name == name:
                return ds, t.layer
    raise KeyError(name)


def read(config: Config, name: str):
    """A raw table (``batch.job_views``) or a serving view (``job_views``) as a pyarrow.Table."""
    from loglake.snapshots import pin
    from loglake.tables import open_table

    ds, layer = _find(config, name)
    snap = pin(config, ds)
    if layer is not None:
        version = snap.version(layer)
        if version is None:
            raise FileNotFoundError(f"{name} has no table yet")
        return _run({"t": open_table(config.table_path(ds, layer), version)}, "SELECT * FROM t")
    return serving_view(config, ds, snap)


def serving_view(config: Config, ds: Dataset, snap):
    from loglake.kafka_admin import log_bounds
    from loglake.tables import open_table
    from spark_jobs.serving import changelog_view_sql, events_view_sql, null_filled

    tables = {}
    for side, layer in (("b", "batch"), ("s", "speed")):
        version = snap.version(layer)
        if version is not None:
            tables[side] = open_table(config.table_path(ds, layer), version)
    if not tables:
        raise FileNotFoundError(f"dataset {ds.name} has no speed or batch table yet")
    sides, columns = null_filled({side: (side, {f.name: _SQL.get(getattr(f.type, "type", str(f.type)), "VARCHAR")
                                                for f in tables[side].schema().fields})
                                  if side in tables else None for side in ("b", "s")})
    marks = snap.watermarks({p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()})
    if ds.kind == "changelog":
        sql = changelog_view_sql(sides["b"], sides["s"], marks, ds.key, columns)
    else:
        sql = events_view_sql(sides["b"], sides["s"], marks, columns)
    return _run(tables, sql)
