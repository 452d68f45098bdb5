"""Dataset names known to the DAG files, and the Airflow Assets of their tables.

DAG files may not read ``conf/`` when they are parsed, so the names offered by the
backfill form are kept here, in one constant; a test asserts it equals the datasets
in ``conf/datasets``. Tasks use the configuration itself at run time.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

DATASETS: tuple[str, ...] = ("company_ceos", "job_views")

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
