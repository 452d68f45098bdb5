"""The Python API, for notebooks and other tools: ``lake = loglake.connect()``.

``lake.sql("SELECT ... FROM job_views")`` returns a Spark DataFrame over the serving views
and the raw tables, by the names ``loglake query`` uses (``job_views``, ``batch.job_views``,
``quarantine.job_views``, ...). Each call pins every dataset at its newest consistent
point (``loglake.ledger.snapshots``): a DataFrame keeps reading the versions it was made from,
whatever batch runs, backfills and maintenance do meanwhile, and a new call sees their
published result — so views stay exact for the whole life of the session. Statements
that would change a table are refused, as in ``loglake query``.

``lake.arrow(name)`` reads a raw table or a serving view as a ``pyarrow.Table`` without a
JVM (delta-rs), at the same kind of pinned point.

``lake.erase(dataset, key, reason=...)`` forgets a data subject (``loglake erase``,
docs/erasure.md); ``lake.erasures(dataset)`` lists the requests and their state.
"""

from __future__ import annotations

from pathlib import Path

from loglake.core.config import Config, load_config
from loglake.core.errors import ParamError
from loglake.schema_versions import check_all
from loglake.tables import dataset_tables
from loglake.serving.arrow import read


class Lake:
    """A connection to loglake's tables under one configuration (``loglake.connect``)."""

    def __init__(self, config: Config, spark=None):
        self.config = config
        self._spark = spark
        self._own_spark = spark is None

    @property
    def spark(self):
        """The Spark session (started on first use, its JVM output to ``<state>/logs/api.log``)."""
        if self._spark is None:
            from loglake.jobs.session import get_spark

            self._spark = get_spark(self.config, "loglake-api", {"spark.ui.showConsoleProgress": "false"},
                                    log_file=Path(self.config.home) / "logs" / "api.log")
        return self._spark

    def sql(self, statement: str, as_of: str | None = None):
        """A read-only Spark SQL statement over the serving views and raw tables; a DataFrame.
        ``as_of``: a timestamp (everything, consistent) or a Delta version (raw tables)."""
        from loglake.serving.spark import query

        return query(self.spark, self.config, statement, as_of)

    def table(self, name: str, as_of: str | None = None):
        """A serving view (``job_views``) or raw table (``batch.job_views``) as a DataFrame."""
        return self.sql(f"SELECT * FROM {_quoted(name)}", as_of)

    def tables(self) -> list[str]:
        """The names ``sql`` and ``arrow`` know: each dataset's tables and serving view."""

        return sorted([ds.name for ds in self.config.datasets.values()]
                      + [t.name for ds in self.config.datasets.values() for t in dataset_tables(self.config, ds)])

    def arrow(self, name: str):
        """A raw table or a dataset's serving view as a ``pyarrow.Table``, read with delta-rs
        (no JVM) at one pinned point."""

        if name not in self.tables():
            raise ParamError("name", f"unknown table or view {name!r}; known: {', '.join(self.tables())}")
        return read(self.config, name)

    def erase(self, dataset: str, key: str, *, reason: str, field: str | None = None,
              requested_by: str | None = None):
        """Erase the subject ``field`` (default: the dataset's key) = ``key`` from every table,
        version (after the purge) and later read of the log; the ``EraseResult``."""
        from loglake.erasure.erase import erase

        return erase(self.config, self.config.dataset(dataset), key, reason=reason, field_name=field,
                     requested_by=requested_by)

    def erasures(self, dataset: str | None = None) -> list:
        """The erasure requests (of ``dataset``), oldest first, each with its state."""
        from loglake.ledger.erasures import erasures

        return erasures(self.config, dataset)

    def close(self) -> None:
        """Stop the Spark session this connection started (not one it was given)."""
        if self._own_spark and self._spark is not None:
            self._spark.stop()
            self._spark = None

    def __enter__(self) -> "Lake":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def connect(conf_dir: str | Path | None = None, profile: str | None = None, *, home: str | Path | None = None,
            spark=None) -> Lake:
    """Connect to loglake's tables: the configuration as the CLI finds it (``$LOGLAKE_CONF``
    or ``conf/``, ``$LOGLAKE_PROFILE``, ``$LOGLAKE_HOME``), each overridable; ``spark``: an
    existing session to use instead of starting one. A schema change the tables cannot
    take is refused here too (``loglake.schema_versions``)."""

    config = load_config(conf_dir, profile, home=home)
    check_all(config)
    return Lake(config, spark)
