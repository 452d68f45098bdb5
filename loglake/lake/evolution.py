"""Before a writer writes: the dataset's schema version recorded, its tables evolved.

Every writer of a dataset's typed tables (the speed stream at its start, the batch job,
quarantine replay) calls ``prepare`` first. It refuses a breaking change (checked again
here: the job may run long after the CLI loaded the conf), records the conf's schema as a
new version when it is a form not recorded yet (``loglake.schema_versions``), and adds the fields
the conf gained to the writer's own tables as nullable columns, so that every table has
them from then on and older rows read them as null. The version returned is recorded with
what the writer writes (ledger ranges, speed commits' ``userMetadata``).
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from loglake.core.config import Config, Dataset
from loglake.core.contracts import FIELD_TYPES, SCHEMAS
from loglake.core.errors import ConfigError
from loglake.schema_versions import current_version, new_version_row
from loglake.lake.delta_io import add_missing_columns
from loglake.lake.system_tables import append


def record_version(spark: SparkSession, config: Config, ds: Dataset) -> int:
    """The schema version of ``ds``'s conf, recorded first when it is new.

    Two writers recording the same new version at once: the append is tied to the Delta
    transaction (``loglake-schemas-<dataset>``, version), so only the first lands."""
    row = new_version_row(config, ds)
    if row is not None:
        append(spark, config, SCHEMAS, [{**row, "recorded_at": datetime.now(timezone.utc)}],
               txn=(f"loglake-schemas-{ds.name}", row["version"]))
        print(f"loglake: {ds.name}: schema version {row['version']} recorded ({row['change']})",
              file=sys.stderr, flush=True)
    current = current_version(config, ds)
    if current is None:
        raise ConfigError(f"dataset {ds.name}: its schema was changed again while this writer recorded it; "
                          "run it again", key=f"datasets.{ds.name}.schema")
    return int(current["version"])


def prepare(spark: SparkSession, config: Config, ds: Dataset, layers: tuple[str, ...]) -> int:
    """Record the schema version in force and add the fields it gained to ``layers``' tables."""
    version = record_version(spark, config, ds)
    fields = {name: FIELD_TYPES.get(f.type, f.type) for name, f in ds.fields.items()}
    for layer in layers:
        if getattr(ds.tables, layer, None) is not None:
            add_missing_columns(spark, config.table_path(ds, layer), fields, f"schema version {version}",
                                config.object_store)
    return version
