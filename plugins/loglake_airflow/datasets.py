"""Dataset names known to the DAG files, and the Airflow Assets of their tables.

DAG files may not read ``conf/`` when they are parsed, so the dataset names the backfill
form offers come from the environment: ``LOGLAKE_DATASETS`` (comma-separated), which
``loglake.local.airflow_env.airflow_env`` sets from ``conf/datasets`` for every Airflow
process it starts (``loglake up`` restarts Airflow when that list changes). Tasks use the
configuration itself at run time, and reject a name it does not know.
"""

from __future__ import annotations

import os

from airflow.sdk import Asset, AssetAlias

DATASETS_ENV = "LOGLAKE_DATASETS"


def dataset_names() -> list[str]:
    """The configured datasets' names, in the environment's order (events datasets first:
    the form's default is the first); empty when Airflow was not started by loglake."""
    return [n.strip() for n in os.environ.get(DATASETS_ENV, "").split(",") if n.strip()]

# The Spark tasks' outlet: which tables a run wrote is known only when it runs (the
# planned datasets, the chosen dataset), so each task emits events for exactly those
# tables through this alias instead of declaring every table of every dataset.
TABLES = AssetAlias("loglake.tables")


def table_asset(table: str) -> Asset:
    """The Asset of a loglake table ``<layer>.<name>``: name ``loglake.<layer>.<name>``.

    The URI is a stable name (``loglake://<layer>/<name>``), not the table's location,
    which depends on the profile.
    """
    layer, _, name = table.partition(".")
    if not layer or not name:
        raise ValueError(f"table {table!r} is not of the form <layer>.<name>")
    return Asset(name=f"loglake.{table}", uri=f"loglake://{layer}/{name}")
